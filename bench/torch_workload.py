"""A torch CPU workload with torch's default intra-op threads (the whole-process
section of run_bench.py): a controller whose steps each run one range,
`torch`, of float32 matmuls for about --seconds of wall time. Around each
range it measures the process's own CPU time (getrusage: every thread's) and
the main thread's; writes them as JSON to --report. Under
cpu.threads: recording only the main thread is sampled (torch's worker
threads never record an event); under all, every thread."""
import argparse
import json
import resource
import time

import torch

import rlscope_ray


def process_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.6)
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    a, b = torch.randn(args.size, args.size), torch.randn(args.size, args.size)
    for _ in range(20):  # torch's pool started and warm before any window
        a @ b
    report = {"threads": torch.get_num_threads(), "steps": {}}
    for n in range(1, args.steps + 1):
        with rlscope_ray.step(n):
            time.sleep(0.05)  # the flush thread arms every thread's timer
            with rlscope_ray.range("torch"):
                p0, t0, w0 = process_cpu_s(), time.thread_time(), time.monotonic()
                while time.monotonic() - w0 < args.seconds:
                    for _ in range(8):
                        a @ b
                p1, t1 = process_cpu_s(), time.thread_time()
        report["steps"][str(n)] = {"process_cpu_ms": 1000 * (p1 - p0), "main_cpu_ms": 1000 * (t1 - t0)}
    rlscope_ray.flush()
    report["stats"] = rlscope_ray.stats()
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()

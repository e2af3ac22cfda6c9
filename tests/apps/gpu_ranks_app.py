"""A PPO-shaped run whose workers launch GPU work with no GPU: the collector's
whole GPU path runs on tests/apps/fake_cupti.cc (RLSCOPE_CUPTI_LIBRARY), which
hands it the CUPTI records each worker describes (tests/test_hta_export.py).

    python gpu_ranks_app.py --out DIR --config FILE --fake-cupti LIB --work JSON [--steps N]

A controller (this process) and one Python worker per rank (--work's keys),
as examples/verl/demo_local.py runs them: the controller opens each sub-task's
range and hands it to every worker. In update_actor each worker, inside its
range, launches its device work (--work[rank]: [name, kind, stream, start_us,
end_us, correlation], times after K, a whole microsecond 20 us past the
range's start; correlation ids made unique per call, as CUPTI's are): an API call (cudaLaunchKernel, or cudaMemcpyAsync for a copy)
on its thread, then the kernel or copy on device `rank`; it returns once
they have ended. Steps are written by an aggregator it starts (as the demo).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

SUBTASKS = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"]
CBID_LAUNCH_KERNEL, CBID_MEMCPY_ASYNC = 211, 41  # cupti_runtime_cbid.h (CUDA 13)


def worker(rank: int, fake_cupti: str, work: list) -> None:
    import nvtx
    import rlscope_ray

    # What the CUDA driver does with CUDA_INJECTION64_PATH: the collector's
    # InitializeInjection, which loads libcupti (here the stand-in) and starts tracing.
    assert ctypes.CDLL(rlscope_ray.collector_path()).InitializeInjection() == 1
    cupti = ctypes.CDLL(fake_cupti)  # the same library the collector loaded
    cupti.fake_cupti_now.restype = ctypes.c_uint64
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    cupti.fake_cupti_api.argtypes = [u32, u64, u64, u32, u32]
    cupti.fake_cupti_kernel.argtypes = [ctypes.c_char_p, u32, u32, u64, u64, u32]
    cupti.fake_cupti_memcpy.argtypes = [u32, u32, u64, u64, u64, u32]
    names = {w[0]: w[0].encode() for w in work}  # kept: records point at their kernel's name
    launched = 0  # correlation ids are unique in a process, as CUPTI's: 100 per update_actor
    for line in sys.stdin:
        task = line.strip()
        if task == "quit":
            break
        with nvtx.annotate(task):
            if task == "update_actor":
                now = cupti.fake_cupti_now()
                k0 = (now + 999) // 1000 * 1000 + 20_000
                tid = threading.get_native_id()
                launched += 1
                for name, kind, stream, s_us, e_us, c in work:
                    corr = 100 * launched + c
                    t = cupti.fake_cupti_now()
                    copy = kind == "gpu_memcpy"
                    cupti.fake_cupti_api(CBID_MEMCPY_ASYNC if copy else CBID_LAUNCH_KERNEL, t, t + 1_000, tid, corr)
                    if copy:
                        cupti.fake_cupti_memcpy(rank, stream, k0 + s_us * 1000, k0 + e_us * 1000, 1_000_000, corr)
                    else:
                        cupti.fake_cupti_kernel(names[name], rank, stream, k0 + s_us * 1000, k0 + e_us * 1000, corr)
                end = k0 + max(w[4] for w in work) * 1000
                while cupti.fake_cupti_now() < end + 1_000_000:  # the device work is over
                    time.sleep(0.001)
            else:
                time.sleep(0.002)
        print(f"done {task}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--fake-cupti", required=True)
    ap.add_argument("--work", required=True, help="JSON: {rank: [[name, kind, stream, start_us, end_us, corr]]}")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # this process is that rank's worker
    args = ap.parse_args()
    work = {int(r): w for r, w in json.loads(args.work).items()}
    if args.worker is not None:
        worker(args.worker, args.fake_cupti, work[args.worker])
        return 0

    import rlscope_ray.cli  # noqa: F401  (no collector starts: RLSCOPE_AGGREGATOR unset)
    from rlscope_ray import collector_path
    from rlscope_ray.aggregator_process import start_aggregator

    agg = start_aggregator(Path(args.out).resolve(), config=args.config, args=["--exit-when-done"])

    def env(role: str, rank=None) -> dict:
        e = dict(os.environ, RLSCOPE_AGGREGATOR=agg.endpoint, RLSCOPE_ROLE=role, RLSCOPE_CONFIG=args.config,
                 NVTX_INJECTION64_PATH=collector_path(), RLSCOPE_CUPTI_LIBRARY=args.fake_cupti)
        if rank is not None:
            e["RLSCOPE_RANK"] = str(rank)
        return e

    workers = [subprocess.Popen([sys.executable, __file__, "--out", args.out, "--config", args.config,
                                 "--fake-cupti", args.fake_cupti, "--work", args.work, "--worker", str(r)],
                                env=env("worker", r), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for r in sorted(work)]
    os.environ.update(env("controller"))
    import nvtx
    import rlscope_ray

    rlscope_ray.start_collector()
    for step in range(1, args.steps + 1):
        with rlscope_ray.step(step):
            for task in SUBTASKS:
                with nvtx.annotate(task):
                    for w in workers:
                        w.stdin.write(task + "\n")
                        w.stdin.flush()
                    for w in workers:
                        assert w.stdout.readline().strip() == f"done {task}"
    for w in workers:
        w.stdin.write("quit\n")
        w.stdin.flush()
        assert w.wait(timeout=60) == 0
    rlscope_ray.shutdown_collector()
    agg.stop(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())

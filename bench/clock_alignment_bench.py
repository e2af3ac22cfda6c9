"""Clock alignment: collectors in time namespaces with known offsets.

    python bench/clock_alignment_bench.py --build-dir build/py [--load]
prints one JSON line per namespace: injected offset, estimated offset, error,
stated bound. --load keeps both cores busy meanwhile.

As tests/test_clock.py: a namespace's offset is taken from the host's clock
and must not put the clock below zero, so the aggregator and the controller
run at +BASE_S and the workers at BASE_S + each offset (any uptime works).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFSETS_S = (-500, 0, 1234)  # each worker's clock minus the aggregator's
BASE_S = 1000


def unshare(offset_s):
    return ["unshare", "--fork", "--kill-child=SIGTERM", "--time", "--monotonic", str(offset_s)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build/py")
    ap.add_argument("--load", action="store_true")
    args = ap.parse_args()
    import rlscope_ray
    from rlscope_ray.aggregator_process import start_aggregator

    tmp = tempfile.mkdtemp(prefix="rlscope_clock_bench_")
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)] if args.load else []
    try:
        agg = start_aggregator(os.path.join(tmp, "out"), command=unshare(BASE_S) + [rlscope_ray.aggregator_path()],
                               args=["--exit-when-done"], work_dir=tmp, database=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
        env.update(RLSCOPE_AGGREGATOR=agg.endpoint, NVTX_INJECTION64_PATH=rlscope_ray.collector_path())
        workers = []
        for rank, offset in enumerate(OFFSETS_S):
            workers.append(subprocess.Popen(
                unshare(BASE_S + offset) + [sys.executable,
                 os.path.join(ROOT, "tests", "apps", "nvtx_worker.py"), "--duration", "3.5",
                 "--report", os.path.join(tmp, f"w{rank}.json")],
                env=dict(env, RLSCOPE_ROLE="worker", RLSCOPE_RANK=str(rank))))
        time.sleep(2.5)  # bursts at connect, +1 s, +2 s
        subprocess.run(unshare(BASE_S) + [os.path.join(args.build_dir, "tests", "apps", "nvtx_app"), "--steps", "1"],
                       env=dict(env, RLSCOPE_ROLE="controller"), check=True)
        for w in workers:
            w.wait()
        agg.proc.wait(timeout=60)
        with open(os.path.join(tmp, "out", "run.json")) as f:
            run = json.load(f)
    finally:
        for p in load:
            p.kill()
    for p in run["processes"]:
        if p["role"] != "worker":
            continue
        injected = -OFFSETS_S[p["rank"]] * 1_000_000_000  # aggregator minus collector
        c = p["clock"]
        print(json.dumps({"injected_s": OFFSETS_S[p["rank"]], "estimated_offset_ns": c["offset_ns"],
                          "error_ns": abs(c["offset_ns"] - injected), "bound_ns": c["bound_ns"],
                          "probes": c["probes"], "load": args.load}))


if __name__ == "__main__":
    main()

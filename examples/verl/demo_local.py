"""`make demo` (first version): a PPO-shaped step loop across processes.

A controller (this script, RLSCOPE_ROLE=controller) runs 6 training steps with
verl's sub-task names; each sub-task is dispatched to workers (two Python
workers using the `nvtx` package, ranks 0 and 1, and one C++ worker using the
NVTX3 C API, rank 2) that do small real numeric work inside NVTX ranges. Every
process runs under the collector and streams to one aggregator, which writes
merged profiles for steps 2, 3 and 5 (configs/demo.yaml) while the job runs.
The Ray version of this demo replaces the subprocess workers with Ray actors.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUBTASKS = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="demo_out")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    args = ap.parse_args()
    build = Path(os.environ.get("RLSCOPE_BUILD_DIR", ROOT / "build" / "py"))
    if not build.is_absolute():
        build = ROOT / build

    # The collector reads its environment when rlscope_ray is imported.
    import rlscope_ray.cli  # noqa: F401  (no collector starts: RLSCOPE_AGGREGATOR unset)
    from rlscope_ray import collector_path
    from rlscope_ray.aggregator_process import AggregatorStartError, start_aggregator

    out = Path(args.out).resolve()
    try:
        agg = start_aggregator(out, config=args.config, args=["--exit-when-done"])
    except AggregatorStartError as e:
        print(f"rlscope-ray demo: {e}", file=sys.stderr)
        return 1
    endpoint = agg.endpoint

    def env(role: str, rank: int | None) -> dict:
        e = dict(os.environ, RLSCOPE_AGGREGATOR=endpoint, RLSCOPE_ROLE=role, RLSCOPE_CONFIG=args.config,
                 NVTX_INJECTION64_PATH=collector_path())
        if rank is not None:
            e["RLSCOPE_RANK"] = str(rank)
        return e

    workers = [subprocess.Popen([sys.executable, str(ROOT / "examples/verl/py_worker.py")], env=env("worker", r),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    workers.append(subprocess.Popen([str(build / "examples/verl/rlscope_demo_cpp_worker")], env=env("worker", 2),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))

    os.environ.update(env("controller", None))
    import nvtx
    import rlscope_ray

    rlscope_ray.start_collector()  # this process is the controller

    t0 = time.monotonic()
    for step in range(1, args.steps + 1):
        with rlscope_ray.step(step):
            for task in SUBTASKS:
                with nvtx.annotate(task):  # verl's marked_timer(name) emits this range
                    for w in workers:
                        w.stdin.write(task + "\n")
                        w.stdin.flush()
                    for w in workers:
                        assert w.stdout.readline().strip() == f"done {task}"
    for w in workers:
        w.stdin.write("quit\n")
        w.stdin.flush()
        w.wait(timeout=30)
    rlscope_ray.shutdown_collector()
    agg.stop(timeout=30)  # it exits once the steps are written
    print(f"rlscope-ray demo: {args.steps} steps in {time.monotonic() - t0:.2f} s; profiles in {out}")
    print_summary(out)
    return 0


def print_summary(out: Path) -> None:
    run = json.loads((out / "run.json").read_text())
    print(f"  processes: {len(run['processes'])}, steps written: {run['steps_written']}")
    for n in run["steps_written"]:
        trace = json.loads((out / f"step_{n}" / "trace.json").read_text())
        summary = json.loads((out / f"step_{n}" / "summary.json").read_text())
        names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
        print(f"\nstep {n}: {summary['duration_ms']:.1f} ms, {summary['totals']['spans']} spans, "
              f"{summary['totals']['dropped']} dropped, late: {summary['late_processes'] or 'none'}")
        print(f"  {'process':58s} " + " ".join(f"{t[:10]:>10s}" for t in SUBTASKS))
        for pid, label in sorted(names.items(), key=lambda kv: kv[1]):
            ms = {t: sum(float(e["dur"]) for e in trace["traceEvents"]
                         if e["ph"] == "X" and e["pid"] == pid and e["name"] == t) / 1000 for t in SUBTASKS}
            print(f"  {label[:58]:58s} " + " ".join(f"{ms[t]:10.2f}" for t in SUBTASKS))
        print(f"  trace: {out / f'step_{n}' / 'trace.json'} (open in ui.perfetto.dev)")


if __name__ == "__main__":
    sys.exit(main())

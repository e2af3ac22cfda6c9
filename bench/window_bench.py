"""Capture windows on a worker: how long after the controller's step edge the
worker's collector arms and disarms (the broadcast's latency), and what that
means for the first selected step's coverage.

    python bench/window_bench.py [--load]

A controller (tests/apps/step_controller.py, 10 steps of 100 ms, 50 ms
apart, steps [3, 6, 9] selected) and a worker that polls its collector's
armed flag every ~50 us and notes each change on CLOCK_MONOTONIC, the clock
the controller's report uses too. The window for step s opens when step s-1
begins and closes flush.window_slack_ms (20) after step s ends. Prints one
JSON line per selected step: open latency (worker armed minus step s-1's
begin), close latency (worker disarmed minus step s's end, slack included),
and whether the worker was armed when step s began (its coverage of the
step is then whole). --load keeps both cores busy meanwhile.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELECTED = (3, 6, 9)

WORKER = r"""
import json, os, sys, time
from rlscope_ray import _native  # starts the collector
stop, report = sys.argv[1], sys.argv[2]
changes, last = [], None
while not os.path.exists(stop):
    a = bool(_native.armed())
    if a != last:
        changes.append([time.monotonic_ns(), a])
        last = a
    time.sleep(0.00005)
json.dump(changes, open(report, "w"))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", action="store_true")
    args = ap.parse_args()
    import rlscope_ray
    from rlscope_ray.aggregator_process import start_aggregator

    tmp = tempfile.mkdtemp(prefix="rlscope_window_bench_")
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)] if args.load else []
    config = "{steps: [%s]}" % ", ".join(map(str, SELECTED))
    try:
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(config + "\n")  # the aggregator broadcasts the windows of its own config
        agg = start_aggregator(os.path.join(tmp, "out"), config=cfg, args=["--exit-when-done"], work_dir=tmp,
                               database=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
        env.update(RLSCOPE_AGGREGATOR=agg.endpoint, NVTX_INJECTION64_PATH=rlscope_ray.collector_path(),
                   RLSCOPE_CONFIG=config)
        stop, changes = os.path.join(tmp, "stop"), os.path.join(tmp, "changes.json")
        worker = subprocess.Popen([sys.executable, "-c", WORKER, stop, changes],
                                  env=dict(env, RLSCOPE_ROLE="worker", RLSCOPE_RANK="0"))
        time.sleep(2.0)  # the worker is up and connected
        report = os.path.join(tmp, "controller.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "apps", "step_controller.py"), "--steps", "10",
                        "--step-ms", "100", "--gap-ms", "50", "--report", report],
                       env=dict(env, RLSCOPE_ROLE="controller"), check=True)
        open(stop, "w").close()
        worker.wait(timeout=60)
        agg.proc.wait(timeout=60)
        with open(report) as f:
            steps = {s["step"]: s for s in json.load(f)["steps"]}
        with open(changes) as f:
            flips = json.load(f)
    finally:
        for p in load:
            p.kill()
    for s in SELECTED:
        opened = steps[s - 1]["begin_ns"]
        armed = next((t for t, a in flips if a and t >= opened), None)
        disarmed = next((t for t, a in flips if not a and t >= steps[s]["end_ns"]), None)
        print(json.dumps({
            "step": s, "load": args.load,
            "open_latency_us": None if armed is None else (armed - opened) / 1e3,
            "close_latency_us": None if disarmed is None else (disarmed - steps[s]["end_ns"]) / 1e3,
            "armed_when_step_began": armed is not None and armed <= steps[s]["begin_ns"]}))


if __name__ == "__main__":
    main()

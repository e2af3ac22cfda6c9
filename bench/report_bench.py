"""The report at scale: a run of 64 processes (a controller and 63 workers on
8 nodes, each with a GPU lane) and 100 written steps of verl's 8 sub-tasks,
written by rlscope_ray.report and rendered by headless Chromium; beside it
the same run with the timeline pictures left out (summaries without their
`timeline`), and Chromium on an empty page (its own start-up).

    python3 bench/report_bench.py [--processes 64] [--steps 100]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time

SUBTASKS = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"]
NODES = 8


def _label(rank):
    if rank is None:
        return "node 10.0.0.1 [n0] / main.py (controller) / pid 1000"
    return f"node 10.0.0.{2 + rank % NODES} [n{rank % NODES}] / PPOWorker (rank {rank}) / pid {2000 + rank}"


def _process(rank, step):
    return {"session": f"s{rank}", "label": _label(rank), "host": f"h{(rank or 0) % NODES}", "pid": 1000,
            "rank": rank, "role": "controller" if rank is None else "worker", "name": "PPOWorker",
            "selected": True, "spans": 40, "instants": 0, "gpu_records": 200, "events_received_total": 80,
            "dropped_total": 0, "unmatched_total": 0, "late": False, "unarmed_ms": 0.0,
            "clock": {"aligned": True, "bound_ns": 30000},
            "overhead": {"subtracted_ms": 0.05, "waits_ms": 0.0},
            "memory": {"rss_peak_mb": 4000.0 + step, "rss_begin_mb": 3990.0 + step, "rss_end_mb": 3991.0 + step,
                       "rss_change_mb": 1.0, "samples": 50,
                       "gpu": [{"device": 0, "allocated_peak_mb": 60000.0, "allocated_begin_mb": 59000.0,
                                "allocated_end_mb": 59000.0, "allocated_change_mb": 0.0}]}}


def _summary(step, workers, rng):
    ranks = list(range(workers))
    windows, t = [], 0.0
    for name in SUBTASKS:
        d = 20 + rng.random() * 100
        windows.append((name, t, d))
        t += d + 1
    lanes = [{"rank": None, "process": _label(None), "role": "controller", "node": "n0", "gpu": False, "omitted": 0,
              "boxes": [[b, d, n, i, 0] for i, (n, b, d) in enumerate(windows)]}]
    crit = {name: rng.choice(ranks) for name in SUBTASKS}
    for r in ranks:
        boxes = [[b + 0.5, d * (0.5 + rng.random() * 0.45), n, i, int(crit[n] == r)]
                 for i, (n, b, d) in enumerate(windows)]
        lanes.append({"rank": r, "process": _label(r), "role": "worker", "node": f"n{r % NODES}", "gpu": False,
                      "omitted": 0, "boxes": boxes})
        lanes.append({"rank": r, "process": _label(r), "role": "worker", "node": f"n{r % NODES}", "gpu": True,
                      "omitted": 0, "boxes": [[b + 1, d * 0.4, "GPU busy", i, 0] for i, (n, b, d) in enumerate(windows)]})
    breakdown = [{"subtask": n, "occurrences": 1, "rank": r, "process": _label(r), "session": f"s{r}",
                  "role": "worker", "window_ms": d, "cpu_only_ms": d * 0.3, "gpu_only_ms": d * 0.3,
                  "cpu_gpu_ms": d * 0.2, "idle_ms": d * 0.2, "overhead_ms": 0.01}
                 for n, _, d in windows for r in ranks]
    return {"step": step, "begin_ns": step * 10**9, "end_ns": step * 10**9 + int(t * 1e6), "duration_ms": t,
            "reason": "complete", "processes": [_process(None, step)] + [_process(r, step) for r in ranks],
            "late_processes": [], "capture_warnings": [], "clock_warnings": [], "not_profiled": [],
            "causality": {"checked": 8, "violations": 0, "max_violation_ns": 0},
            "correction": {"enabled": True, "duration_ms": t - 0.3, "subtracted_ms": 0.3},
            "breakdown": breakdown,
            "gpu_utilization": [{"process": _label(r), "rank": r, "gpu_busy_ms": t * 0.4, "gpu_busy_pct": 40.0,
                                 "naive_util_pct": 95.0, "sample_ms": 166.7} for r in ranks],
            "critical_path": {"step_ms": t - 0.3, "controller_ms": 8.0, "segments_omitted": 0, "segments": [
                {"subtask": n, "occurrence": 1, "begin_ms": b, "duration_ms": d, "critical_rank": crit[n],
                 "critical_process": _label(crit[n]), "critical_ms": d * 0.9, "median_ms": d * 0.7}
                for n, b, d in windows]},
            "stragglers": [{"subtask": n, "ranks": workers, "slowest_rank": crit[n], "slowest_process": _label(crit[n]),
                            "slowest_ms": d * 0.9, "median_ms": d * 0.7, "fastest_ms": d * 0.5, "ratio": 1.29}
                           for n, _, d in windows],
            "timeline": {"subtasks": SUBTASKS, "max_boxes_per_lane": 256, "lanes": lanes},
            "totals": {"processes": workers + 1}}


def make_run(root, processes, steps, with_timeline):
    rng = random.Random(7)
    os.makedirs(root)
    for n in range(1, steps + 1):
        s = _summary(n, processes - 1, rng)
        if not with_timeline:
            del s["timeline"]
        os.makedirs(os.path.join(root, f"step_{n}"))
        with open(os.path.join(root, f"step_{n}", "summary.json"), "w") as f:
            json.dump(s, f)
    with open(os.path.join(root, "run.json"), "w") as f:
        json.dump({"format": "rlscope-ray run v1", "final": True, "steps_written": list(range(1, steps + 1)),
                   "steps_seen": steps, "processes": [], "not_profiled": []}, f)


def chromium_run(path, profile):
    """(wall seconds of a headless Chromium dumping the page's DOM after its
    scripts ran, the number of charts the page says it drew, errors shown)."""
    t0 = time.monotonic()
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                        "--virtual-time-budget=2000", "--dump-dom", "file://" + path],
                       capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    m = re.search(r'data-rendered="(\d+)"', r.stdout)
    errors = re.search(r'<pre id="errors">(.*?)</pre>', r.stdout, re.S)
    return wall, int(m.group(1)) if m else -1, (errors.group(1).strip() if errors else "?")


def measure(tmp, processes, steps, runs):
    from rlscope_ray.report import write_report

    rows = {}
    empty = os.path.join(tmp, "empty.html")
    with open(empty, "w") as f:
        f.write("<!DOCTYPE html><html><body></body></html>")
    rows["empty"] = {"render": [chromium_run(empty, os.path.join(tmp, "p0"))[0] for _ in range(runs)]}
    for key, with_timeline in (("tables", False), ("pictures", True)):
        run = os.path.join(tmp, key)
        make_run(run, processes, steps, with_timeline)
        writes, renders, drawn, errors = [], [], -1, ""
        for i in range(runs):
            t0 = time.monotonic()
            page = write_report(run)
            writes.append(time.monotonic() - t0)
            wall, drawn, errors = chromium_run(str(page), os.path.join(tmp, f"p{key}{i}"))
            renders.append(wall)
        rows[key] = {"write": writes, "render": renders, "bytes": os.path.getsize(page), "drawn": drawn,
                     "errors": errors}
    return rows


def report_section(args, print_table):
    if shutil.which("chromium") is None:
        print_table("Report at scale", ["page", "result"],
                    [["all", "skipped: chromium is not installed (scripts/install_deps.sh installs it)"]])
        return
    full = (64, 100)  # quick: an eighth of the summaries; every chart kind still drawn
    processes = getattr(args, "processes", None) or (32 if args.quick else full[0])
    steps = getattr(args, "report_steps", None) or (25 if args.quick else full[1])
    tmp = tempfile.mkdtemp(prefix="rlscope_report_bench_")
    try:
        rows = measure(tmp, processes, steps, 1 if args.quick else 3)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(rows["empty"]["render"])
    table = []
    for key, what in (("tables", "without the timeline pictures (baseline)"),
                      ("pictures", "with a timeline per step and the trend")):
        r = rows[key]
        table.append([what, f"{r['bytes'] / 1e6:.1f} MB", f"{statistics.median(r['write']):.2f} s",
                      f"{statistics.median(r['render']) - base:.2f} s", str(r["drawn"]),
                      "none" if not r["errors"] else r["errors"][:60]])
    size = "" if (processes, steps) == full else f" (`make bench-long`: {full[0]} x {full[1]})"
    print_table(f"Report at scale: {processes} processes, {steps} steps{size} (headless Chromium; its start-up on an "
                f"empty page, {base:.2f} s, taken off)",
                ["page", "size", "written in", "rendered in", "charts drawn", "script errors"], table)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()

    def _print(title, headers, rows):
        print(f"### {title}\n")
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" * len(headers))
        for r in rows:
            print("| " + " | ".join(r) + " |")

    report_section(argparse.Namespace(processes=a.processes, report_steps=a.steps, quick=True), _print)

"""The run database (rlscope_ray.rundb): its size per million events beside
the JSON it is read from, and a cross-step question over 1,000 steps asked of
it beside a Python script reading the 1,000 summary.json files.

Both runs are synthetic run directories written here in the aggregator's
layout (run.json, step_<N>/summary.json, step_<N>/trace.json one event per
line): 4 processes (a controller, ranks 0-2) and verl's 8 sub-tasks per step.

    python3 bench/rundb_bench.py [--events 1000000] [--steps 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SUBTASKS = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"]
RANKS = [0, 1, 2]
QUESTION = ("SELECT step, arg_max(rank, busy_ms) AS slowest_rank, max(busy_ms) AS ms FROM subtasks "
            "WHERE subtask = 'update_actor' AND rank IS NOT NULL GROUP BY step ORDER BY step")


def _process(rank, n_spans, n_instants, step):
    role = "controller" if rank is None else "worker"
    label = f"node 10.0.0.1 [s{rank}] / {'PPOWorker (rank %d)' % rank if rank is not None else 'main (controller)'}"
    return {"session": f"s{rank}", "label": label, "host": "10.0.0.1", "pid": 1000 + (rank or 0) * 10 + (rank is None),
            "rank": rank, "role": role, "name": "PPOWorker" if rank is not None else "main", "selected": True,
            "spans": n_spans, "instants": n_instants, "gpu_records": 0, "cpu_samples": 0, "dropped_total": 0,
            "events_received_total": n_spans * 2 + n_instants, "unmatched_total": 0,
            "overhead": {"subtracted_ms": 0.05, "events": n_spans * 2}, "clock": {"bound_ns": 40000}}


def _summary(step, rng, spans_per_process, instants):
    begin = step * 10**9
    dur_ms = 500 + rng.random() * 50
    procs = [_process(None, 9, instants, step)] + [_process(r, spans_per_process, 0, step) for r in RANKS]
    breakdown, stragglers = [], []
    for t in SUBTASKS:
        busy = {r: rng.random() * 50 for r in RANKS}
        for p in procs:
            b = busy.get(p["rank"], 0.0)
            breakdown.append({"subtask": t, "occurrences": 1, "rank": p["rank"], "process": p["label"],
                              "session": p["session"], "role": p["role"], "window_ms": 60.0, "cpu_only_ms": b,
                              "gpu_only_ms": 0, "cpu_gpu_ms": 0, "idle_ms": 60.0 - b, "overhead_ms": 0.01,
                              "attribution": None})
        slow = max(RANKS, key=busy.get)
        med = statistics.median(busy.values())
        stragglers.append({"subtask": t, "ranks": 3, "slowest_rank": slow, "slowest_process": procs[slow + 1]["label"],
                           "slowest_ms": busy[slow], "median_ms": med, "fastest_ms": min(busy.values()),
                           "ratio": busy[slow] / med if med else 0})
    return {"step": step, "begin_ns": begin, "end_ns": begin + int(dur_ms * 1e6), "duration_ms": dur_ms,
            "reason": "complete", "processes": procs, "late_processes": [], "lost_processes": [],
            "not_profiled": [], "correction": {"enabled": True, "duration_ms": dur_ms - 0.2, "subtracted_ms": 0.2},
            "breakdown": breakdown, "stragglers": stragglers,
            "totals": {"processes": 4, "spans": 9 + 3 * spans_per_process, "instants": instants, "dropped": 0}}


def _trace(path, summary):
    """trace.json as chrome_trace.cc writes it: M events, then one event a line."""
    t0 = summary["begin_ns"] / 1000.0
    lines = []
    for p in summary["processes"]:
        pid = p["pid"]
        lines.append('{"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":"%s"}}' % (pid, p["label"]))
        lines.append('{"ph":"M","name":"thread_name","pid":%d,"tid":%d,"args":{"name":"main"}}' % (pid, pid))
        for i in range(p["spans"]):
            lines.append('{"ph":"X","name":"forward","cat":"nvtx","pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f,'
                         '"args":{"raw_ts":%.3f,"raw_dur":%.3f}}' % (pid, pid, t0 + i * 2.0, 1.5, t0 + i * 2.0, 1.6))
        for i in range(p["instants"]):
            lines.append('{"ph":"i","s":"t","name":"ray.submit","cat":"nvtx","pid":%d,"tid":%d,"ts":%.3f,'
                         '"args":{"payload":%d}}' % (pid, pid, t0 + i * 3.0, i))
    head = '{"displayTimeUnit":"ns","otherData":{"step":%d},"traceEvents":[\n' % summary["step"]
    with open(path, "w") as f:
        f.write(head + "\n,".join(lines) + "\n]}\n")
    return len(lines)


def write_run(root, steps, spans_per_process, instants=0, traces=True):
    """A synthetic run directory; returns (events in its traces, bytes of its JSON)."""
    rng = random.Random(7)
    os.makedirs(root, exist_ok=True)
    events = nbytes = 0
    for n in range(1, steps + 1):
        d = os.path.join(root, f"step_{n}")
        os.makedirs(d, exist_ok=True)
        s = _summary(n, rng, spans_per_process, instants)
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump(s, f)
        if traces:
            events += sum(p["spans"] + p["instants"] for p in s["processes"])
            _trace(os.path.join(d, "trace.json"), s)
        nbytes += sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    with open(os.path.join(root, "run.json"), "w") as f:
        json.dump({"format": "rlscope-ray run v1", "final": True, "config_yaml": "", "processes": [],
                   "steps_written": list(range(1, steps + 1))}, f)
    return events, nbytes


def python_answer(root, steps):
    """The same answer as QUESTION by a script over the summaries."""
    out = []
    for n in range(1, steps + 1):
        with open(os.path.join(root, f"step_{n}", "summary.json")) as f:
            s = json.load(f)
        rows = [b for b in s["breakdown"] if b["subtask"] == "update_actor" and b["rank"] is not None]
        best = max(rows, key=lambda b: b["cpu_only_ms"] + b["gpu_only_ms"] + b["cpu_gpu_ms"])
        out.append((n, best["rank"]))
    return out


def _timed(fn, runs=3):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def measure(events, steps, work):
    """The bench's rows: {name: value}."""
    from rlscope_ray import rundb

    big = os.path.join(work, "big")
    per_step = 4  # few steps, many spans each, as a long step of a real run
    spans = max(1, events // (per_step * 3))
    ev, json_bytes = write_run(big, per_step, spans, instants=events // (per_step * 50))
    t = time.perf_counter()
    rundb.update(big)
    ingest_s = time.perf_counter() - t
    db_bytes = os.path.getsize(rundb.db_path(big))
    many = os.path.join(work, "many")
    write_run(many, steps, 20, instants=5, traces=False)
    t = time.perf_counter()
    rundb.update(many)
    ingest_many_s = time.perf_counter() - t
    con = rundb.connect(rundb.db_path(many), read_only=True)
    sql_s, sql_rows = _timed(lambda: con.execute(QUESTION).fetchall())
    con.close()
    cli_s, _ = _timed(lambda: subprocess.run([sys.executable, "-m", "rlscope_ray.cli", "query", many, QUESTION],
                                             check=True, capture_output=True), runs=2)
    py_s, py_rows = _timed(lambda: python_answer(many, steps))
    assert [(s, r) for s, r, _ in sql_rows] == py_rows, "the SQL and the script disagree"
    return {"events": ev, "json_bytes": json_bytes, "db_bytes": db_bytes, "ingest_s": ingest_s,
            "steps": steps, "ingest_many_s": ingest_many_s, "sql_s": sql_s, "cli_s": cli_s, "py_s": py_s}


def rundb_section(args, print_table):
    events = 1_000_000 if not getattr(args, "quick", True) else 250_000
    work = tempfile.mkdtemp(prefix="rlscope_rundb_bench_")
    try:
        m = measure(events, 1000, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_m = 1e6 / m["events"]
    print_table("Run database (rlscope_ray.rundb, DuckDB)", ["measure", "value", "beside"], [
        ["run.duckdb per million events", "%.1f MB" % (m["db_bytes"] * per_m / 1e6),
         "%.1f MB of JSON (trace.json + summary.json)" % (m["json_bytes"] * per_m / 1e6)],
        ["bytes per event", "%.1f" % (m["db_bytes"] / m["events"]), "%.1f in JSON" % (m["json_bytes"] / m["events"])],
        ["ingest throughput", "%.0f k events/s" % (m["events"] / m["ingest_s"] / 1e3),
         "%d events in 4 steps, one update" % m["events"]],
        ["ingest of %d summaries" % m["steps"], "%.2f s" % m["ingest_many_s"], "one update, summaries only"],
        ["slowest rank in update_actor per step, %d steps: SQL" % m["steps"], "%.1f ms" % (m["sql_s"] * 1e3),
         "a Python script over the %d summary.json: %.0f ms" % (m["steps"], m["py_s"] * 1e3)],
        ["the same by `rlscope-ray query` (process start, catch-up, CSV)", "%.0f ms" % (m["cli_s"] * 1e3), ""],
    ])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long", action="store_true", help="1,000,000 events (default 250,000)")
    args = ap.parse_args()
    args.quick = not args.long

    def print_table(title, header, rows):
        print(f"### {title}\n\n| " + " | ".join(header) + " |\n|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            print("| " + " | ".join(str(c) for c in r) + " |")
        print()

    rundb_section(args, print_table)


if __name__ == "__main__":
    main()

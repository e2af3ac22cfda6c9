"""Perfetto's own trace_processor_shell reading our .pftrace files, for tests:
what a user's Perfetto UI or trace_processor loads, in the same shape as
pftrace.json_view (tracks, slices with their args, flows, counters, process
and thread names), and every non-zero import stat.

The shell is found at $RLSCOPE_TRACE_PROCESSOR, else beside the project
(../shared/tools/trace_processor_shell, v35), else on PATH; `shell()` is
None where there is none (its tests skip, saying so): its own download of
the binary needs a network these machines do not have.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional

from conftest import ROOT
from pftrace import _num

# Import stats that say nothing about the trace's content: the clock
# snapshots' cache (info: a trace with one clock domain, ours, has misses).
HARMLESS_STATS = {"clock_sync_cache_miss"}


def shell() -> Optional[str]:
    for candidate in (os.environ.get("RLSCOPE_TRACE_PROCESSOR"),
                      str(ROOT.parent / "shared" / "tools" / "trace_processor_shell"),
                      shutil.which("trace_processor_shell")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def query(trace: Path, sql: str) -> List[Dict[str, str]]:
    """One statement's rows (CSV values as strings; "[NULL]" for NULL)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as q:
        q.write(sql)
        q.flush()
        r = subprocess.run([shell(), "-q", q.name, str(trace)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"trace_processor_shell failed on {trace}: {r.stderr[-2000:]}"
    return list(csv.DictReader(io.StringIO(r.stdout)))


def stats(trace: Path) -> List[Dict[str, str]]:
    """Every non-zero stat of the import but the duration ones (some import
    problems are severity `info` in v35: all are listed, not only errors)."""
    return query(trace, "select name, idx, severity, source, value from stats "
                        "where value > 0 and name not like '%duration_ns'")


_SLICES = """
select s.id, s.ts, s.dur, s.name, s.category as cat, s.arg_set_id, tr.name as track_name,
  th.tid as tid, th.name as thread, coalesce(p1.pid, p2.pid) as pid
from slice s join track tr on s.track_id = tr.id
left join thread_track tt on tt.id = s.track_id left join thread th on th.utid = tt.utid
left join process p1 on p1.upid = th.upid
left join process_track pt on pt.id = s.track_id left join process p2 on p2.upid = pt.upid"""

_ARGS = """
select arg_set_id, key, value_type, int_value, string_value, real_value from args
where arg_set_id in (select arg_set_id from slice) and key like 'debug.%'"""

_COUNTERS = """
select p.pid, t.name, c.ts, c.value from counter c join process_counter_track t on c.track_id = t.id
join process p using (upid)"""


def _value(row: Dict[str, str]):
    t = row["value_type"]
    if t in ("int", "uint", "pointer"):
        return int(row["int_value"])
    if t == "bool":
        return bool(int(row["int_value"]))
    if t == "real":
        return float(row["real_value"])
    return row["string_value"]


def _arg_sets(trace: Path) -> Dict[str, dict]:
    """arg_set_id -> {name: value}, arrays ("grid[0]", ...) back as lists."""
    sets: Dict[str, dict] = defaultdict(dict)
    arrays: Dict[tuple, Dict[int, object]] = defaultdict(dict)
    for row in query(trace, _ARGS):
        key = row["key"][len("debug."):]
        if key.endswith("]") and "[" in key:
            name, index = key[:-1].split("[", 1)
            arrays[(row["arg_set_id"], name)][int(index)] = _value(row)
        else:
            sets[row["arg_set_id"]][key] = _value(row)
    for (set_id, name), items in arrays.items():
        sets[set_id][name] = [items[i] for i in sorted(items)]
    return sets


def view(trace: Path) -> dict:
    """What trace_processor took from `trace`, keyed as pftrace.json_view
    keys trace.json: slices and instants as one multiset (an instant is a
    slice of no duration to trace_processor) with their args, flows,
    counters, processes, and tracks (threads' and processes' named ones)."""
    procs = {(int(r["pid"]), r["name"]) for r in query(trace, "select pid, name from process where pid != 0")}
    # A thread's track, or one of a process's named tracks (its sampled CPU,
    # a GPU stream): what trace.json names as a thread.
    tracks = {(int(r["pid"]), r["name"]) for r in query(
        trace, "select p.pid, t.name from thread t join process p using (upid) where t.name is not null and "
               "p.pid != 0 union select p.pid, t.name from process_track t join process p using (upid) "
               "where t.name is not null")}
    sets = _arg_sets(trace)
    slices, where = Counter(), {}
    for r in query(trace, _SLICES):
        if r["tid"] != "[NULL]":
            name = r["thread"] if r["thread"] != "[NULL]" else f"thread {r['tid']}"
        else:
            name = r["track_name"]
        track = (int(r["pid"]), name)
        ts, dur = int(r["ts"]), max(0, int(r["dur"]))
        args = {k: _num(v) for k, v in sets.get(r["arg_set_id"], {}).items()}
        slices[(track, r["name"], r["cat"], ts, dur, tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in args.items())))] += 1
        where[r["id"]] = (track, ts)
    flows = {(where[r["slice_out"]], where[r["slice_in"]]) for r in query(trace, "select slice_out, slice_in from flow")}
    counters = Counter(((int(r["pid"]), r["name"]), int(r["ts"]), _num(float(r["value"])))
                       for r in query(trace, _COUNTERS))
    return {"processes": procs, "tracks": tracks, "slices": slices, "flows": flows, "counters": counters}


def json_as_view(j: dict) -> dict:
    """pftrace.json_view's dict in view()'s shape: instants among the
    slices; the tracks are the named threads and every track a slice is on
    (a process's start/end ranges)."""
    slices = Counter(j["slices"])
    for (track, name, cat, ts, args), n in j["instants"].items():
        slices[(track, name, cat, ts, 0, args)] += n
    tracks = set(j["threads"]) | {k[0] for k in slices}
    return {"processes": j["processes"], "tracks": tracks, "slices": slices, "flows": j["flows"],
            "counters": j["counters"]}


"""Every step's figures, read back: ``<run>/figures.jsonl`` (docs/always_on.md).

The aggregator appends one line per written step (aggregator/figures_json.h):
for every step under ``always_on`` (most of them only this line, no
``step_<N>/`` directory), and for each step it writes in full otherwise. A line
is the compact form of the step's summary.json: the same keys where they mean
the same, the breakdown, stragglers and critical path as tables whose
``process`` is an index into the line's ``processes``.

Readers here: the run database (rlscope_ray.rundb, through :func:`as_summary`),
``rlscope-ray diff`` (rlscope_ray.diff) and the metrics endpoint
(rlscope_ray.metrics). A line is whole or absent: the aggregator appends each
whole (a failed append is cut off again); a reader that meets a line still
being written (no newline yet) stops before it and takes it at its next look.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ._native import names as _names

FIGURES_FILE = _names.FIGURES_FILE


def path(run_dir: str) -> str:
    return os.path.join(run_dir, FIGURES_FILE)


def read_from(run_dir: str, offset: int = 0, max_bytes: int = -1) -> Tuple[List[Dict[str, Any]], int]:
    """The whole lines from byte `offset` on (within `max_bytes` of it, when
    not -1, but at least one line), parsed, and the offset after the last
    whole line (where the next read starts). A line that does not parse is
    skipped (counted nowhere: the aggregator never writes one)."""
    try:
        with open(path(run_dir), "rb") as f:
            f.seek(offset)
            data = f.read(max_bytes)
            if max_bytes >= 0 and b"\n" not in data:
                data += f.readline()  # one line longer than max_bytes
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            fig = json.loads(line)
        except ValueError:
            continue
        if isinstance(fig, dict) and isinstance(fig.get("step"), int):
            out.append(fig)
    return out, offset + end


def load(run_dir: str) -> Dict[int, Dict[str, Any]]:
    """Every step's figures by step number (a step written again, after a
    resumed run's replay, is its last line)."""
    figs, _ = read_from(run_dir)
    return {f["step"]: f for f in figs}


def rows(table: Optional[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
    """A {"columns", "rows"} table of a figures line as dicts."""
    if not table:
        return
    cols = table.get("columns") or []
    for r in table.get("rows") or []:
        yield dict(zip(cols, r))


def subtasks(fig: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The step's breakdown rows, each with its process's rank, session, role and label."""
    procs = fig.get("processes") or []
    out = []
    for r in rows(fig.get("subtasks")):
        p = procs[r["process"]] if 0 <= r.get("process", -1) < len(procs) else {}
        r.update(rank=p.get("rank"), session=p.get("session"), role=p.get("role"), process=p.get("label"))
        out.append(r)
    return out


def _who(procs: List[Dict[str, Any]], index: Any) -> Dict[str, Any]:
    return procs[index] if isinstance(index, int) and 0 <= index < len(procs) else {}


def as_summary(fig: Dict[str, Any]) -> Dict[str, Any]:
    """The figures line in summary.json's shape, as far as it goes (the
    run database ingests both with one function)."""
    procs = fig.get("processes") or []
    stragglers = []
    for g in rows(fig.get("stragglers")):
        p = _who(procs, g.pop("slowest_process", None))
        g.update(slowest_rank=p.get("rank"), slowest_process=p.get("label"))
        g["ratio"] = g["slowest_ms"] / g["median_ms"] if g.get("median_ms") else 0.0
        stragglers.append(g)
    segments = []
    for c in rows(fig.get("critical_path")):
        p = _who(procs, c.pop("critical_process", None))
        # One row per sub-task, its occurrences summed: occurrence 0.
        c.update(critical_rank=p.get("rank"), critical_process=p.get("label"), occurrence=0)
        segments.append(c)
    for p in procs:  # the report's peak: the step's first reading plus its rise
        mem = p.get("memory")
        if isinstance(mem, dict) and None not in (mem.get("rss_end_mb"), mem.get("rss_change_mb"),
                                                  mem.get("rss_rise_mb")):
            mem.setdefault("rss_peak_mb", mem["rss_end_mb"] - mem["rss_change_mb"] + mem["rss_rise_mb"])
    return {
        "step": fig["step"], "detail": fig.get("detail"), "trigger": fig.get("trigger"),
        "begin_ns": fig.get("begin_ns"), "end_ns": fig.get("end_ns"), "duration_ms": fig.get("duration_ms"),
        "reason": fig.get("reason"), "correction": fig.get("correction") or {}, "totals": fig.get("totals") or {},
        "late_processes": [None] * int(fig.get("late") or 0), "lost_processes": [None] * int(fig.get("lost") or 0),
        "not_profiled": [None] * int(fig.get("not_profiled") or 0),
        "processes": procs, "breakdown": subtasks(fig), "stragglers": stragglers,
        "critical_path": {"segments": segments},
    }


def step_ms(fig: Dict[str, Any]) -> float:
    """The step's time: corrected when the correction ran, else raw."""
    corr = fig.get("correction") or {}
    return float(corr["duration_ms"] if corr.get("enabled") and corr.get("duration_ms") is not None
                 else fig.get("duration_ms") or 0.0)

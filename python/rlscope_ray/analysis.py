"""The breakdown from Python: where a window's time went.

The aggregator computes the breakdown (``summary.json``: ``breakdown``, per
sub-task and process, after overhead correction; docs/summary_format.md) by a
sweep over interval sets in C++ (aggregator/breakdown.h). ``breakdown(step)``
reads those rows as the aggregator wrote them; nothing here re-derives them
from trace.json, which lacks what the aggregator knew (which of the
controller's time was a wait on its workers, what the correction removed).
The sweep's functions are here too, the same C++ code, for intervals of your
own: any window, any grouping.

    from rlscope_ray import analysis
    for row in analysis.breakdown("out/step_3"):
        print(row.subtask, row.process, row.cpu_only_ms, row.gpu_only_ms, row.cpu_gpu_ms, row.idle_ms)
    cpu = analysis.subtract(analysis.union(ranges, t0, t1), analysis.union(syncs, t0, t1))
    print(analysis.resource_overlap(cpu, kernels, t0, t1))

Intervals are ``(begin_ns, end_ns)`` pairs, end exclusive, in any order.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from . import _native

Interval = Tuple[int, int]

#: nvidia-smi's shortest sampling period, the bin of ``naive_utilization``.
NAIVE_SAMPLE_NS: int = _native.NAIVE_SAMPLE_NS


@dataclass
class Overlap:
    """ns of a window in which only the CPU, only the GPU, both, or neither was busy."""

    cpu_only: int
    gpu_only: int
    cpu_gpu: int
    idle: int

    @property
    def total(self) -> int:
        return self.cpu_only + self.gpu_only + self.cpu_gpu + self.idle


def union(intervals: Iterable[Interval], begin: int, end: int) -> List[Interval]:
    """The sorted, disjoint union of ``intervals`` clipped to [begin, end)."""
    return _native.union_clipped(list(intervals), begin, end)


_ALL = (-(2**63), 2**63 - 1)  # union() over all time: sorts and merges


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> List[Interval]:
    """The time in ``a`` but not in ``b``, sorted and disjoint."""
    return _native.subtract(union(a, *_ALL), union(b, *_ALL))


def resource_overlap(cpu: Iterable[Interval], gpu: Iterable[Interval], begin: int, end: int) -> Overlap:
    """Sweep CPU-busy against GPU-busy intervals over [begin, end) (RL-Scope's
    resource overlap). Overlaps within each set count once."""
    return Overlap(*_native.resource_overlap(list(cpu), list(gpu), begin, end))


def naive_utilization(gpu: Iterable[Interval], begin: int, end: int, sample_ns: int = NAIVE_SAMPLE_NS) -> float:
    """nvidia-smi's "utilization": the share of ``sample_ns`` bins of
    [begin, end) in which any GPU interval ran; compare the true busy share,
    ``total(union(gpu, begin, end)) / (end - begin)``."""
    if sample_ns < 1 or (end - begin) // sample_ns > 10_000_000 or end - begin > 2**62:
        raise ValueError(f"naive_utilization: sample_ns={sample_ns} over {end - begin} ns: need sample_ns >= 1 "
                         "and at most 10 million bins")
    return _native.naive_utilization(list(gpu), begin, end, sample_ns)


def total(disjoint: Iterable[Interval]) -> int:
    return sum(e - b for b, e in disjoint)


@dataclass(frozen=True)
class BreakdownRow:
    """One row of a step's breakdown (summary.json ``breakdown[]``): one
    sub-task ("step" for the whole step) in one process, in ms after
    correction, summed over the sub-task's occurrences. The four segments add
    up to ``window_ms``; ``overhead_ms`` is the profiler time removed from it."""

    subtask: str
    process: str  # the process's label (trace track name)
    rank: Optional[int]
    role: str
    session: str
    occurrences: int
    window_ms: float
    cpu_only_ms: float
    gpu_only_ms: float
    cpu_gpu_ms: float
    idle_ms: float
    overhead_ms: float
    attribution: Optional[Dict[str, Any]]  # where its CPU time went; None without CPU samples

    @property
    def overlap(self) -> Overlap:
        """The four segments in ns, to set beside ``resource_overlap`` of
        intervals of your own (the summary keeps 6 significant digits)."""
        return Overlap(*(round(ms * 1e6) for ms in (self.cpu_only_ms, self.gpu_only_ms, self.cpu_gpu_ms,
                                                    self.idle_ms)))


def breakdown(step: Union[str, os.PathLike]) -> List[BreakdownRow]:
    """The breakdown the aggregator computed for one step, in the summary's
    order. ``step`` is a step directory (``<out>/step_<N>``) or its
    summary.json; a summary written before there was a breakdown has no rows.
    Raises OSError when the file cannot be read and ValueError when it is not
    a step summary (docs/summary_format.md)."""
    path = Path(step)
    if path.is_dir():
        path = path / "summary.json"
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    rows = summary.get("breakdown", []) if isinstance(summary, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: not a step summary (docs/summary_format.md): no breakdown list")
    return [_row(path, i, r) for i, r in enumerate(rows)]


def _row(path: Path, i: int, r: Any) -> BreakdownRow:
    try:
        return BreakdownRow(
            subtask=str(r["subtask"]), process=str(r["process"]),
            rank=None if r.get("rank") is None else int(r["rank"]), role=str(r.get("role") or ""),
            session=str(r.get("session") or ""), occurrences=int(r.get("occurrences", 1)),
            window_ms=float(r["window_ms"]), cpu_only_ms=float(r["cpu_only_ms"]),
            gpu_only_ms=float(r["gpu_only_ms"]), cpu_gpu_ms=float(r["cpu_gpu_ms"]), idle_ms=float(r["idle_ms"]),
            overhead_ms=float(r.get("overhead_ms", 0.0)), attribution=r.get("attribution"))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{path}: breakdown[{i}] is not a breakdown row ({type(e).__name__}: {e}); "
                         "see docs/summary_format.md") from e

"""The breakdown engine from Python: where a window's time went.

The aggregator's breakdown (``summary.json``: ``breakdown``,
``gpu_utilization``) is a sweep over interval sets in C++
(aggregator/breakdown.h). The same functions are here, for questions the
summary does not answer: any window, any process, any grouping.

    from rlscope_ray import analysis
    procs = analysis.trace_intervals("out/step_3/trace.json")
    for pid, p in procs.items():
        cpu = analysis.subtract(analysis.union(p.cpu, t0, t1), analysis.union(p.waits, t0, t1))
        print(p.label, analysis.resource_overlap(cpu, p.gpu, t0, t1))

Intervals are ``(begin_ns, end_ns)`` pairs, end exclusive, in any order;
times in a trace are the aggregator's clock, already overhead-corrected
(the recorded ones are in each event's ``args.raw_ts``/``raw_dur``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Tuple

from . import _native

Interval = Tuple[int, int]

#: nvidia-smi's shortest sampling period, the bin of ``naive_utilization``.
NAIVE_SAMPLE_NS: int = _native.NAIVE_SAMPLE_NS

# Trace categories (aggregator/chrome_trace.cc) that are not CPU work.
_names = _native.names
_GPU_CATS = {_names.CAT_KERNEL, _names.CAT_MEMCPY, _names.CAT_MEMSET}
# (CPU samples' category tracks say where sampled CPU time went, not which
# ranges were open: the breakdown's CPU busy time does not come from them.)
_NOT_CPU_CATS = _GPU_CATS | {_names.CAT_CUDA_API, _names.CAT_CUDA_SYNC, _names.CAT_CUPTI_OVERHEAD, _names.CAT_LAUNCH,
                             _names.CAT_CPU_SAMPLES}


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


@dataclass
class ProcessIntervals:
    """One process of a step trace, as the breakdown sees it."""

    label: str
    cpu: List[Interval] = field(default_factory=list)  # annotated ranges and Ray methods, not the step range
    gpu: List[Interval] = field(default_factory=list)  # kernels, copies, sets on any stream
    waits: List[Interval] = field(default_factory=list)  # CUDA synchronisation: the CPU waits, not works


def _ns(us: float) -> int:
    return round(us * 1000)


def trace_intervals(trace_path: str) -> Dict[int, ProcessIntervals]:
    """Per process (trace pid): its CPU, GPU and wait intervals in a step's
    trace.json. The controller's sub-task windows are CPU here; the
    summary's controller rows count them as waiting on the workers. The
    controller's "step" ranges are left out."""
    with open(trace_path) as f:
        trace = json.load(f)
    procs: Dict[int, ProcessIntervals] = {}
    open_async: Dict[Tuple[int, str, object], int] = {}

    def proc(pid: int) -> ProcessIntervals:
        return procs.setdefault(pid, ProcessIntervals(label=str(pid)))

    for e in trace.get("traceEvents", []):
        ph, pid, cat = e.get("ph"), e.get("pid"), e.get("cat", "")
        if ph == "M":
            if e.get("name") == "process_name":
                proc(pid).label = (e.get("args") or {}).get("name", str(pid))
            continue
        if ph == "X":
            iv = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
            if cat in _GPU_CATS:
                proc(pid).gpu.append(iv)
            elif cat == _names.CAT_CUDA_SYNC:
                proc(pid).waits.append(iv)
            elif cat not in _NOT_CPU_CATS and not (e.get("name") == _names.STEP and "payload" in (e.get("args") or {})):
                proc(pid).cpu.append(iv)
        elif ph in ("b", "e") and cat not in _NOT_CPU_CATS:  # start/end ranges, possibly across threads
            key = (pid, cat, e.get("id"))
            if ph == "b":
                open_async[key] = _ns(e["ts"])
            elif key in open_async:
                proc(pid).cpu.append((open_async.pop(key), _ns(e["ts"])))
    return procs

"""Per-rank Kineto-style traces of one step, for Holistic Trace Analysis.

    rlscope-ray export hta RUN_DIR --step N --out DIR

reads RUN_DIR/step_<N>/trace.json and summary.json (what the aggregator
writes) and writes DIR/rank_<r>.json for every rank of the step, in the
fields HTA (``holistictraceanalysis``, ``hta.trace_analysis.TraceAnalysis``)
reads from a PyTorch profiler (Kineto) trace: ``distributedInfo`` (rank,
world_size), ``baseTimeNanoseconds``, a ``ProfilerStep#N`` slice over the step,
CPU ranges as ``user_annotation``, CUDA API calls as ``cuda_runtime`` /
``cuda_driver`` with ``correlation`` and ``External id``, kernels, copies and
sets as ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` on (pid = device,
tid = stream) with ``stream``, ``device`` and ``correlation``, and ``ac2g``
flows from each launch to what it launched. docs/exports.md says what maps to
what and what is left out (the controller, CPU samples, off-CPU tracks).

Pure Python and the standard library: HTA is not needed to write the files.
"""
from __future__ import annotations

import json
import os
import re
from typing import Dict, Iterable, List, Optional, Tuple

from ._native import names as _names

KNOWN_RUN_FORMATS = (_names.RUN_FORMAT,)

# Track ids the aggregator gives GPU streams and sampled tracks
# (aggregator/step_trace.h StreamTrackId/SampleTrackId/OffCpuTrackId).
_STREAM_TRACK_BASE = 1 << 40
_SAMPLE_TRACK_BASE = 1 << 42
# Async (start/end) ranges go on a track of their own beside their thread:
# they need not nest with the thread's push/pop ranges.
_ASYNC_TRACK_BASE = 1 << 44
# Correlation ids are per process: the k-th process of a rank's file gets
# its ids offset by k << 32 so that two processes sharing a rank never mix.
_CORRELATION_SHIFT = 32

_GPU_CATS = {_names.CAT_KERNEL: "kernel", _names.CAT_MEMCPY: "gpu_memcpy", _names.CAT_MEMSET: "gpu_memset"}
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
_LEFT_OUT_CATS = (_names.CAT_CPU_SAMPLES, _names.CAT_OFF_CPU, _names.CAT_LAUNCH)
_RANK_IN_LABEL = re.compile(r"\(([^(),]*), rank (\d+)\)")


class HtaExportError(Exception):
    """What is wrong with the input, in one line."""


def _read_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise HtaExportError(f"cannot read {what} {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise HtaExportError(f"{path} is not a valid {what} (JSON: {e})") from e


def load_step(run_dir: str, step: int) -> Tuple[dict, dict]:
    """(trace, summary) of RUN_DIR/step_<step>; HtaExportError when the run
    directory, its format or the step is not what this exporter reads."""
    if not os.path.isdir(run_dir):
        raise HtaExportError(f"{run_dir}: no such run directory")
    run_json = os.path.join(run_dir, "run.json")
    if not os.path.isfile(run_json):
        raise HtaExportError(f"{run_dir} is not a run directory (no run.json)")
    fmt = _read_json(run_json, "run.json").get("format")
    if fmt not in KNOWN_RUN_FORMATS:
        raise HtaExportError(f"{run_json}: unknown run format {fmt!r} (this rlscope-ray reads "
                             f"{', '.join(repr(k) for k in KNOWN_RUN_FORMATS)})")
    step_dir = os.path.join(run_dir, f"step_{step}")
    if not os.path.isdir(step_dir):
        raise HtaExportError(f"{run_dir} has no step {step} (no {step_dir})")
    trace_path = os.path.join(step_dir, "trace.json")
    if not os.path.isfile(trace_path):
        raise HtaExportError(f"step {step} of {run_dir} has no trace.json (a summary-only step, or output.formats "
                             "without json)")
    return _read_json(trace_path, "trace"), _read_json(os.path.join(step_dir, "summary.json"), "summary")


def _ns(us) -> int:
    """A trace time (microseconds, ns precision) as integer nanoseconds."""
    return int(round(float(us) * 1000))


def _process_ranks(events: List[dict], summary: dict) -> Dict[int, Tuple[Optional[int], str, str]]:
    """trace pid -> (rank or None, role, label), by the summary's processes
    (matched on the track's label), else the label's "(role, rank R)"."""
    by_label = {p.get("label"): p for p in summary.get("processes", [])}
    out: Dict[int, Tuple[Optional[int], str, str]] = {}
    for e in events:
        if e.get("ph") != "M" or e.get("name") != "process_name":
            continue
        label = str(e.get("args", {}).get("name", ""))
        p = by_label.get(label)
        if p is not None:
            rank = p.get("rank")
            out[e["pid"]] = (int(rank) if rank is not None else None, str(p.get("role", "")), label)
            continue
        m = _RANK_IN_LABEL.search(label)
        out[e["pid"]] = (int(m.group(2)), m.group(1), label) if m else (None, "", label)
    return out


def _thread_names(events: Iterable[dict]) -> Dict[Tuple[int, int], Tuple[str, int]]:
    """(pid, tid) -> (name, sort index) from the M events."""
    names: Dict[Tuple[int, int], Tuple[str, int]] = {}
    for e in events:
        if e.get("ph") != "M" or e.get("tid", 0) == 0:
            continue
        key = (e["pid"], e["tid"])
        name, sort = names.get(key, ("", e["tid"]))
        if e.get("name") == "thread_name":
            name = str(e.get("args", {}).get("name", ""))
        elif e.get("name") == "thread_sort_index":
            sort = int(e.get("args", {}).get("sort_index", sort))
        names[key] = (name, sort)
    return names


class _RankTrace:
    """The events of one rank's file being built (times in ns from the step's begin)."""

    def __init__(self, rank: int, base_ns: int):
        self.rank = rank
        self.base_ns = base_ns
        self.events: List[dict] = []
        self.meta: List[dict] = []
        self.devices: Dict[int, set] = {}
        self.labels: List[str] = []

    def slice(self, name: str, cat: str, pid: int, tid: int, ts_ns: int, dur_ns: int, args: dict) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
             "ts": (ts_ns - self.base_ns) / 1000, "dur": max(dur_ns, 0) / 1000, "args": args}
        self.events.append(e)
        return e

    def metadata(self, kind: str, pid: int, tid: int, name: str, sort: Optional[int] = None) -> None:
        self.meta.append({"ph": "M", "name": f"{kind}_name", "pid": pid, "tid": tid, "args": {"name": name}})
        if sort is not None:
            self.meta.append({"ph": "M", "name": f"{kind}_sort_index", "pid": pid, "tid": tid,
                              "args": {"sort_index": sort}})

    def flow(self, corr: int, launch: dict, device_event: dict) -> None:
        for ph, e in (("s", launch), ("f", device_event)):
            f = {"ph": ph, "id": corr, "pid": e["pid"], "tid": e["tid"], "ts": e["ts"], "cat": "ac2g", "name": "ac2g"}
            if ph == "f":
                f["bp"] = "e"
            self.events.append(f)


def _async_slices(events: List[dict]) -> List[dict]:
    """The aggregator's start/end ranges ("b"/"e" pairs by cat and id) as X
    slices on the begin's thread; one never ended is left out."""
    opened: Dict[Tuple[str, object], dict] = {}
    out: List[dict] = []
    for e in events:
        key = (e.get("cat", ""), e.get("id"))
        if e.get("ph") == "b":
            opened[key] = e
        elif e.get("ph") == "e" and key in opened:
            b = opened.pop(key)
            cat = str(b.get("cat", ""))
            out.append({"ph": "X", "name": b.get("name", ""), "cat": cat[:-6] if cat.endswith(".async") else cat,
                        "pid": b["pid"], "tid": _ASYNC_TRACK_BASE + int(b["tid"]), "ts": b["ts"],
                        "dur": (_ns(e["ts"]) - _ns(b["ts"])) / 1000, "args": dict(b.get("args", {}), async_range=True)})
    return out


def _cpu_cat(e: dict) -> Optional[str]:
    """Kineto's category of a CPU-side slice; None: left out of the export."""
    cat = str(e.get("cat", ""))
    tid = int(e.get("tid", 0))
    if cat in _LEFT_OUT_CATS or _SAMPLE_TRACK_BASE <= tid < _ASYNC_TRACK_BASE:  # sampled tracks
        return None
    if cat == _names.CAT_CUDA_API:
        return "cuda_runtime" if str(e.get("name", "")).startswith("cuda") else "cuda_driver"
    if cat == "cuda_sync":
        return "cuda_sync"
    if cat == "cupti_overhead":
        return "overhead"
    return "user_annotation"


def _add_process(rt: _RankTrace, events: List[dict], pid: int, corr_offset: int,
                 threads: Dict[Tuple[int, int], Tuple[str, int]]) -> None:
    """One process's slices into its rank's file."""
    launches: Dict[int, dict] = {}
    device_events: List[Tuple[int, dict]] = []
    cpu_tids = set()
    for e in events:
        if e.get("ph") != "X":
            continue
        tid, args = int(e.get("tid", 0)), dict(e.get("args") or {})
        ts, dur = _ns(e["ts"]), _ns(e.get("dur", 0))
        if e.get("cat") in _GPU_CATS and tid >= _STREAM_TRACK_BASE:
            device, stream = int(args.get("device", 0)), int(args.get("stream", 0))
            corr = int(args.pop("correlation", 0))
            kargs = {"device": device, "stream": stream, "correlation": corr + corr_offset if corr else -1}
            if "bandwidth_GBps" in args:
                kargs["memory bandwidth (GB/s)"] = args.pop("bandwidth_GBps")
            kargs.update({k: v for k, v in args.items() if k not in ("device", "stream")})
            ev = rt.slice(str(e.get("name", "")), _GPU_CATS[e["cat"]], device, stream, ts, dur, kargs)
            rt.devices.setdefault(device, set()).add(stream)
            if corr:
                device_events.append((corr + corr_offset, ev))
            continue
        cat = _cpu_cat(e)
        if cat is None:
            continue
        if "correlation" in args:
            args["correlation"] = int(args["correlation"]) + corr_offset
        if cat == "user_annotation":
            args["domain"] = e.get("cat", "")
        ev = rt.slice(str(e.get("name", "")), cat, pid, tid, ts, dur, args)
        cpu_tids.add(tid)
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = ev
    enclosing = _link_external_ids(rt.events, pid)
    linked = []
    for corr, ev in device_events:
        if corr in launches:
            ev["args"]["External id"] = launches[corr]["args"].get("External id", -1)
            rt.flow(corr, launches[corr], ev)
            linked.append((ev, enclosing.get(id(launches[corr]), [])))
    _gpu_user_annotations(rt, linked)
    for tid in sorted(cpu_tids):
        name, sort = threads.get((pid, tid - _ASYNC_TRACK_BASE if tid >= _ASYNC_TRACK_BASE else tid), (str(tid), tid))
        rt.metadata("thread", pid, tid, name + (" (async ranges)" if tid >= _ASYNC_TRACK_BASE else ""), sort)


def _gpu_user_annotations(rt: _RankTrace, linked: List[Tuple[dict, List[dict]]]) -> None:
    """Kineto's gpu_user_annotation: per CPU range and stream, a slice on the
    stream from the first start to the last end of what was launched inside
    it (no "stream" arg: HTA counts only kernels as the GPU's work)."""
    spans: Dict[Tuple[int, int, int], List] = {}
    for ev, ranges in linked:
        ts, end = round(ev["ts"] * 1000), round((ev["ts"] + ev["dur"]) * 1000)
        for r in ranges:
            key = (r["args"]["External id"], ev["pid"], ev["tid"])
            span = spans.setdefault(key, [ts, end, r["name"]])
            span[0], span[1] = min(span[0], ts), max(span[1], end)
    for (ext, device, stream), (ts, end, name) in spans.items():
        rt.slice(name, "gpu_user_annotation", device, stream, ts + rt.base_ns, end - ts, {"External id": ext})


def _link_external_ids(events: List[dict], pid: int) -> Dict[int, List[dict]]:
    """Kineto's "External id": each user_annotation gets its own; a CUDA API
    call the one of the innermost range around it on its thread (-1: none).
    Returns id(call) -> the ranges around it, outermost first."""
    next_id = 1 + max((e["args"].get("External id", 0) for e in events if e["ph"] == "X"), default=0)
    by_tid: Dict[int, List[dict]] = {}
    for e in events:
        if (e["ph"] == "X" and e["pid"] == pid and e["cat"] not in _DEVICE_CATS
                and "External id" not in e["args"]):
            by_tid.setdefault(e["tid"], []).append(e)
    enclosing: Dict[int, List[dict]] = {}
    for tid_events in by_tid.values():
        stack: List[dict] = []
        for e in sorted(tid_events, key=lambda x: (x["ts"], -x["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if e["cat"] == "user_annotation":
                e["args"]["External id"] = next_id
                next_id += 1
                stack.append(e)
            else:
                e["args"]["External id"] = stack[-1]["args"]["External id"] if stack else -1
                enclosing[id(e)] = list(stack)
    return enclosing


def _main_tid(pid: int, real_pid: Optional[int], threads: Dict[Tuple[int, int], Tuple[str, int]]) -> int:
    """The thread that carries the ProfilerStep slice: the process's main
    thread (sort index 0), else its pid."""
    for (p, tid), (_, sort) in sorted(threads.items()):
        if p == pid and sort == 0 and tid < _STREAM_TRACK_BASE:
            return tid
    return real_pid if real_pid is not None else pid


def build_rank_traces(trace: dict, summary: dict, step: int) -> Tuple[Dict[int, dict], List[str]]:
    """rank -> the Kineto-style trace of that rank; and the labels of the
    processes left out (the controller, processes without a rank)."""
    events = trace.get("traceEvents", [])
    other = trace.get("otherData", {})
    begin_ns = int(other.get("begin_ns", summary.get("begin_ns", 0)))
    end_ns = int(other.get("end_ns", summary.get("end_ns", begin_ns)))
    ranks = _process_ranks(events, summary)
    threads = _thread_names(events)
    real_pids = {p.get("label"): p.get("pid") for p in summary.get("processes", [])}
    by_pid: Dict[int, List[dict]] = {}
    for e in events + _async_slices(events):
        by_pid.setdefault(e.get("pid"), []).append(e)
    built: Dict[int, _RankTrace] = {}
    left_out: List[str] = []
    for pid in sorted(ranks, key=lambda p: (ranks[p][0] is None, ranks[p][0] or 0, p)):
        rank, role, label = ranks[pid]
        if rank is None or role == "controller":
            left_out.append(label)
            continue
        rt = built.setdefault(rank, _RankTrace(rank, begin_ns))
        rt.labels.append(label)
        rt.metadata("process", pid, 0, label, rank)
        _add_process(rt, by_pid.get(pid, []), pid, (len(rt.labels) - 1) << _CORRELATION_SHIFT, threads)
        tid = _main_tid(pid, real_pids.get(label), threads)
        rt.slice(f"ProfilerStep#{step}", "user_annotation", pid, tid, begin_ns, end_ns - begin_ns,
                 {"External id": 0, "step": step})
    world = 1 + max(built, default=-1)
    return {r: _kineto(rt, world, step, begin_ns) for r, rt in built.items()}, left_out


def _kineto(rt: _RankTrace, world_size: int, step: int, begin_ns: int) -> dict:
    """The file's content: Kineto's top-level keys, then the events."""
    for device, streams in sorted(rt.devices.items()):
        rt.metadata("process", device, 0, f"GPU {device}", -1)
        for stream in sorted(streams):
            rt.metadata("thread", device, stream, f"stream {stream}", stream)
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": rt.rank, "world_size": world_size, "backend": "rlscope-ray"},
        "baseTimeNanoseconds": begin_ns,
        "displayTimeUnit": "ms",
        "traceName": f"rlscope-ray step {step} rank {rt.rank}",
        "deviceProperties": [{"id": d} for d in sorted(rt.devices)],
        "rlscopeProcesses": rt.labels,
        "traceEvents": rt.meta + sorted(rt.events, key=lambda e: (e["ts"], e["ph"] != "X")),
    }


def write_rank_trace(path: str, content: dict) -> None:
    """One file: the top-level keys first, one per line ("rank": R early,
    where HTA's rank detection reads it), then one event a line."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in content.items():
            if key != "traceEvents":
                f.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        f.write('  "traceEvents": [\n')
        events = content.get("traceEvents", [])
        for i, e in enumerate(events):
            f.write("    " + json.dumps(e, separators=(",", ":")) + (",\n" if i + 1 < len(events) else "\n"))
        f.write("  ]\n}\n")
    os.replace(tmp, path)


def export_hta(run_dir: str, step: int, out_dir: str) -> Tuple[List[str], List[str]]:
    """Writes OUT_DIR/rank_<r>.json for each rank of the step; returns the
    paths written and the labels of the processes left out."""
    trace, summary = load_step(run_dir, step)
    traces, left_out = build_rank_traces(trace, summary, step)
    if not traces:
        raise HtaExportError(f"step {step} of {run_dir} has no process with a rank (nothing for HTA)")
    try:
        os.makedirs(out_dir, exist_ok=True)
        paths = []
        for rank, content in sorted(traces.items()):
            path = os.path.join(out_dir, f"rank_{rank}.json")
            write_rank_trace(path, content)
            paths.append(path)
    except OSError as e:
        raise HtaExportError(f"cannot write {e.filename or out_dir}: {e.strerror or e}") from e
    return paths, left_out

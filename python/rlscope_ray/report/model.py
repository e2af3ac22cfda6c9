"""What the report page shows, built from run.json and the step summaries.

``load(run_dir)`` reads the files and returns a ``Page`` (page.py: the
blocks a section is made of, every value already formatted).

Reading is defensive: a missing or malformed section becomes a "none"
paragraph, a malformed value an en dash; nothing in the data makes this
module raise. Only a directory that is not an output directory at all raises
``ReportError``.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .. import _native
from .. import figures as _figures
from .page import (
    Block,
    Cell,
    Chart,
    Details,
    Facts,
    Heading,
    Items,
    Page,
    Para,
    Part,
    ReportError,
    Step,
    StepLink,
    Table,
)

_names = _native.names

# (key in a breakdown row, legend label, CSS class suffix). Overhead is drawn
# as its own hatched segment after the four that add up to the window.
SEGMENTS: Tuple[Tuple[str, str, str], ...] = (
    ("cpu_only_ms", "CPU only", "cpu_only"),
    ("gpu_only_ms", "GPU only", "gpu_only"),
    ("cpu_gpu_ms", "CPU + GPU", "cpu_gpu"),
    ("idle_ms", "idle", "idle"),
    ("overhead_ms", "profiler overhead (removed)", "overhead"),
)
# Cross-stack attribution (a breakdown row's "attribution"): (category,
# legend label, CSS class suffix); the row's key is "<category>_ms", and the
# CPU categories (native/names.h) also key its shares and error_ms. The CPU
# categories are thread CPU time, GPU the process's GPU busy time, idle the
# window time with neither; the profiler's own share is drawn hatched, as the
# overhead above.
CATEGORIES: Tuple[Tuple[str, str, str], ...] = (
    (_names.CPU_PYTHON, "Python", "cat-python"),
    (_names.CPU_BACKEND, "ML backend", "cat-backend"),
    (_names.CPU_CUDA_API, "CUDA API", "cat-cuda_api"),
    (_names.CPU_SIMULATOR, "simulator", "cat-simulator"),
    (_names.CPU_OTHER, "other native", "cat-other"),
    ("gpu", "GPU busy", "cat-gpu"),
    ("idle", "idle", "idle"),
    (_names.CPU_PROFILER, "profiler (removed)", "overhead"),
)
# Off CPU (a breakdown row's attribution "off_cpu_ms"): why the recording
# threads waited (reason, legend label, CSS class suffix), wall time summed
# over threads, drawn beside the CPU categories in the same chart.
OFF_CPU: Tuple[Tuple[str, str, str], ...] = (
    ("gil", "off CPU: GIL", "off-gil"),
    ("lock", "off CPU: lock", "off-lock"),
    ("poll", "off CPU: poll / socket", "off-poll"),
    ("io", "off CPU: I/O", "off-io"),
    ("sleep", "off CPU: sleep", "off-sleep"),
    ("cpu_wait", "off CPU: run queue", "off-cpu_wait"),
    ("cuda_sync", "off CPU: CUDA sync", "off-cuda_sync"),
    ("other", "off CPU: other", "off-other"),
)
STRAGGLER_RATIO = 1.2  # stragglers above this slowest/median ratio are highlighted
# The timeline picture (summary.json `timeline`): at most this many process
# lanes per step; the processes past it are drawn aggregated, one lane per
# node (and one for their GPUs), and the page says so. Sub-tasks take the
# palette's colours in turn (CSS classes sub-0 .. sub-9).
MAX_LANES = 64
MAX_MERGED_BOXES = 1024  # boxes drawn in one merged lane: its longest
PALETTE = 10

_STEP_DIR = re.compile(r"step_(\d+)")
_DASH = "\u2013"  # a missing value


# --- reading ----------------------------------------------------------------

def _read_json(path: Path) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(object, None) or (None, why). A missing file is (None, "missing")."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "missing"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
        return None, f"unreadable: {e}"
    if not isinstance(data, dict):
        return None, "unreadable: not a JSON object"
    return data, None


def _num(v: Any) -> Optional[float]:
    """A finite number, or None (bools and strings are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _nonneg(v: Any) -> float:
    n = _num(v)
    return n if n is not None and n > 0 else 0.0


def _dicts(v: Any) -> List[Dict[str, Any]]:
    """The dict entries of a list; anything else is empty."""
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _dict(v: Any) -> Dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _steps(run_dir: Path) -> List[Tuple[int, Path]]:
    found = []
    for p in run_dir.iterdir():
        m = _STEP_DIR.fullmatch(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


# --- formatting -------------------------------------------------------------

def fmt(v: Any) -> str:
    """The text of one value; missing values are an en dash."""
    if v is None:
        return _DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt(x) for x in v) if v else "none"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def _ms(v: Any) -> str:
    return fmt(_num(v))


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str,
           row_classes: Optional[Sequence[str]] = None) -> Table:
    """A table of raw values, formatted by fmt; numbers (int/float) are right-aligned."""
    cells = [[Cell(fmt(c), isinstance(c, (int, float)) and not isinstance(c, bool)) for c in row] for row in rows]
    classes = list(row_classes) if row_classes else [""] * len(cells)
    return Table(cls, list(headers), cells, classes)


def _none(what: str) -> Para:
    return Para(f"{what}: none", "none")


def _rank_text(rank: Any) -> str:
    return f"rank {rank}" if _num(rank) is not None else "rank ?"


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _who(r: Dict[str, Any], process: str) -> str:
    """A row's bar label: its rank, else its role, else its process."""
    return _rank_text(r["rank"]) if _num(r.get("rank")) is not None else str(r.get("role") or process)


# --- one step ---------------------------------------------------------------

class _Charts:
    """Collects the data of every chart container on the page, keyed by id."""

    def __init__(self) -> None:
        self.data: Dict[str, Any] = {}

    def add(self, kind: str, chart_id: str, data: Dict[str, Any], legend: List[Tuple[str, str]]) -> Chart:
        self.data[chart_id] = data
        return Chart(kind, chart_id, legend)


def _stacked(kinds: Sequence[Tuple[str, str, str]],
             rows: List[Dict[str, Any]]) -> Tuple[Dict[str, Any], List[Tuple[str, str]]]:
    """A stacked-bar chart's data and legend over (key, label, class) kinds."""
    return ({"kinds": [{"key": c, "label": t} for _, t, c in kinds], "rows": rows},
            [(f"seg-{c}", t) for _, t, c in kinds])


def _breakdown(step: int, s: Dict[str, Any], charts: _Charts) -> List[Block]:
    rows = _dicts(s.get("breakdown"))
    if not rows:
        return [_none("breakdown")]
    bars = []
    table = []
    for r in rows:
        subtask = str(r.get("subtask", "?"))
        process = str(r.get("process") or r.get("role") or "?")
        vals = [_nonneg(r.get(k)) for k, _, _ in SEGMENTS]
        bars.append({"label": _short(f"{subtask} \u00b7 {_who(r, process)}"),
                     "title": f"{subtask} / {process}; window {_nonneg(r.get('window_ms')):.3f} ms",
                     "values": vals})
        table.append([subtask, r.get("rank"), process, r.get("occurrences"), _num(r.get("window_ms"))]
                     + [_num(r.get(k)) for k, _, _ in SEGMENTS])
    data, legend = _stacked(SEGMENTS, bars)
    headers = ["sub-task", "rank", "process", "occurrences", "window ms"] + [f"{t} ms" for _, t, _ in SEGMENTS]
    return [charts.add("breakdown-chart", f"step{step}-breakdown", data, legend),
            _table(headers, table, "breakdown-table")]


def _attribution_cells(a: Dict[str, Any]) -> List[str]:
    """Per category: ms, its share of the job's CPU time and its sampling error."""
    shares, errors = _dict(a.get("shares")), _dict(a.get("error_ms"))
    cells = []
    for cat, _, _ in CATEGORIES:
        v = _num(a.get(f"{cat}_ms"))
        share, err = _num(shares.get(cat)), _num(errors.get(cat))
        text = f"{v:,.3f}" if v is not None else _DASH
        if share is not None and share > 0:
            text += f" ({100 * share:.0f} %)"
        if err is not None and err > 0 and v:
            text += f" \u00b1 {err:,.3f}"
        cells.append(text)
    return cells


_ATTRIBUTION_NOTE = (
    "CPU categories are thread CPU time of every thread of the process, from samples driven by each thread's own "
    "CPU clock, native code named by the first object of its stack that a category names (share of the job's "
    "CPU time, \u00b1 one standard deviation of sampling); coverage is that sampled CPU time over the process's "
    "own CPU time in the window. Off CPU is the wall time the recording threads spent not running, by why they "
    "waited, from looks at their state. GPU busy and idle are wall time (idle: neither a sampled thread on a CPU "
    "nor the GPU busy). A bar may exceed the window where threads ran in parallel, waited, or the CPU overlapped "
    "the GPU.")


def _off_cpu_cells(a: Dict[str, Any]) -> List[str]:
    off = _dict(a.get("off_cpu_ms"))
    return [f"{v:,.3f}" if (v := _num(off.get(r))) is not None else _DASH for r, _, _ in OFF_CPU]


def _coverage_cell(a: Dict[str, Any]) -> str:
    c = _num(a.get("coverage"))
    return f"{100 * c:.0f} %" if c is not None else _DASH


def _attribution(step: int, s: Dict[str, Any], charts: _Charts) -> List[Block]:
    rows = [r for r in _dicts(s.get("breakdown")) if _dict(r.get("attribution"))]
    if not rows:
        why = sorted({str(p.get("cpu_sampling")) for p in _dicts(s.get("processes")) if p.get("cpu_sampling")})
        return [_none("CPU samples")] + ([Para(f"CPU sampling: {'; '.join(why)}", "note")] if why else [])
    bars = []
    table = []
    for r in rows:
        a = _dict(r.get("attribution"))
        subtask = str(r.get("subtask", "?"))
        process = str(r.get("process") or r.get("role") or "?")
        top = max(_dict(a.get("shares")).items(), key=lambda kv: _nonneg(kv[1]), default=("", 0))
        bars.append({"label": _short(f"{subtask} \u00b7 {_who(r, process)}"),
                     "title": (f"{subtask} / {process}; {_nonneg(a.get('cpu_ms')):.3f} ms CPU in "
                               f"{fmt(a.get('samples'))} samples"
                               + (f", {100 * _nonneg(top[1]):.0f} % {top[0]}" if top[0] else "")),
                     "values": [_nonneg(a.get(f"{cat}_ms")) for cat, _, _ in CATEGORIES]
                     + [_nonneg(_dict(a.get("off_cpu_ms")).get(r)) for r, _, _ in OFF_CPU]})
        table.append([subtask, r.get("rank"), process, a.get("samples"), a.get("threads"), _num(a.get("cpu_ms")),
                      _coverage_cell(a)] + _attribution_cells(a) + _off_cpu_cells(a))
    data, legend = _stacked(CATEGORIES + OFF_CPU, bars)
    headers = (["sub-task", "rank", "process", "samples", "threads", "CPU ms", "coverage"]
               + [f"{t} ms" for _, t, _ in CATEGORIES] + [f"{t} ms" for _, t, _ in OFF_CPU])
    return [charts.add("attribution-chart", f"step{step}-attribution", data, legend),
            Para(_ATTRIBUTION_NOTE, "note"), _table(headers, table, "attribution-table")]


def _critical_path(step: int, s: Dict[str, Any], charts: _Charts) -> List[Block]:
    cp = _dict(s.get("critical_path"))
    segs = _dicts(cp.get("segments"))
    if not segs:
        return [_none("critical path")]
    counts: Dict[str, int] = {}
    for g in segs:
        counts[str(g.get("subtask", "?"))] = counts.get(str(g.get("subtask", "?")), 0) + 1
    bars, table = [], []
    for g in segs:
        subtask = str(g.get("subtask", "?"))
        name = subtask + (f" #{g.get('occurrence')}" if counts[subtask] > 1 and "occurrence" in g else "")
        rank = g.get("critical_rank")
        crit = _rank_text(rank) if _num(rank) is not None else (
            "no worker" if g.get("critical_process") is None else str(g.get("critical_process")))
        bars.append({"label": _short(f"{name} \u2192 {crit}", 48),
                     "title": (f"{name}: begin {_nonneg(g.get('begin_ms')):.3f} ms, "
                               f"{_nonneg(g.get('duration_ms')):.3f} ms; critical {crit} "
                               f"({g.get('critical_process') or 'none'})"),
                     "begin": _nonneg(g.get("begin_ms")), "duration": _nonneg(g.get("duration_ms")),
                     "critical": _num(rank) is not None or g.get("critical_process") is not None})
        table.append([name, _num(g.get("begin_ms")), _num(g.get("duration_ms")), rank,
                      g.get("critical_process"), _num(g.get("critical_ms")), _num(g.get("median_ms"))])
    out: List[Block] = [
        charts.add("critical-path-chart", f"step{step}-critical-path",
                   {"step_ms": _nonneg(cp.get("step_ms")), "segments": bars},
                   [("cp-seg", "sub-task, labelled with its critical rank"), ("cp-nocrit", "no worker busy in it")]),
        Para(f'Step (corrected): {_ms(cp.get("step_ms"))} ms; controller only (not in any segment): '
             f'{_ms(cp.get("controller_ms"))} ms.')]
    omitted = _num(cp.get("segments_omitted"))
    if omitted:
        out.append(Para(f"{int(omitted)} shorter sub-task occurrences are not listed (the breakdown and straggler "
                        "tables count them).", "omitted"))
    out.append(_table(["sub-task", "begin ms", "duration ms", "critical rank", "critical process", "critical ms",
                       "median ms"], table, "critical-path-table"))
    return out


def _stragglers(s: Dict[str, Any]) -> List[Block]:
    rows = _dicts(s.get("stragglers"))
    if not rows:
        return [_none("stragglers")]
    table, classes = [], []
    for r in rows:
        ratio = _num(r.get("ratio"))
        table.append([r.get("subtask"), r.get("ranks"), r.get("slowest_rank"), r.get("slowest_process"),
                      _num(r.get("slowest_ms")), _num(r.get("median_ms")), _num(r.get("fastest_ms")), ratio])
        classes.append("hot" if ratio is not None and ratio > STRAGGLER_RATIO else "")
    return [_table(["sub-task", "ranks", "slowest rank", "slowest process", "slowest ms", "median ms",
                    "fastest ms", "ratio"], table, "straggler-table", classes),
            Para(f"Highlighted: slowest / median > {STRAGGLER_RATIO}.", "note")]


def _gpu(step: int, s: Dict[str, Any], charts: _Charts) -> List[Block]:
    rows = _dicts(s.get("gpu_utilization"))
    if not rows:
        return [Para("no GPU records", "none")]
    bars, table = [], []
    for r in rows:
        process = str(r.get("process") or "?")
        who = _rank_text(r["rank"]) if _num(r.get("rank")) is not None else process
        busy, naive = _nonneg(r.get("gpu_busy_pct")), _nonneg(r.get("naive_util_pct"))
        bars.append({"label": _short(who), "title": process, "busy": busy, "naive": naive})
        table.append([process, r.get("rank"), _num(r.get("gpu_busy_ms")), _num(r.get("gpu_busy_pct")),
                      _num(r.get("naive_util_pct")), _num(r.get("sample_ms"))])
    legend = [("gpu-busy", "GPU busy (union of kernels and copies)"),
              ("gpu-naive", "naive, nvidia-smi style (share of sample bins with a kernel)")]
    return [charts.add("gpu-util-chart", f"step{step}-gpu", {"rows": bars}, legend),
            _table(["process", "rank", "GPU busy ms", "GPU busy %", "naive %", "sample ms"], table, "gpu-table")]


def _process_table(s: Dict[str, Any]) -> Block:
    procs = _dicts(s.get("processes"))
    if not procs:
        return _none("processes")
    rows = []
    for p in procs:
        overhead = _dict(p.get("overhead"))
        memory = _dict(p.get("memory"))
        gpu_peak = [_nonneg(g.get("allocated_peak_mb")) for g in _dicts(memory.get("gpu"))]
        rows.append([p.get("label"), p.get("role"), p.get("rank"), p.get("spans"), p.get("instants"),
                     p.get("gpu_records"), p.get("dropped_total"), p.get("late"), _num(p.get("unarmed_ms")),
                     _dict(p.get("clock")).get("aligned"),
                     _num(overhead.get("subtracted_ms")), _num(overhead.get("waits_ms")),
                     _num(memory.get("rss_peak_mb")), _num(memory.get("rss_change_mb")),
                     max(gpu_peak) if gpu_peak else None])
    return _table(["process", "role", "rank", "spans", "instants", "gpu records", "dropped", "late",
                   "not recorded ms", "clock aligned", "overhead ms", "of it waiting on workers ms",
                   "RSS peak MiB", "RSS change MiB", "GPU allocated peak MiB"], rows, "process-table")


def _count_facts(s: Dict[str, Any]) -> Facts:
    totals = _dict(s.get("totals"))
    facts: List[Tuple[str, str]] = []
    if totals:
        facts.append(("totals", fmt(totals)))
    late = s.get("late_processes")
    facts.append(("late processes", fmt(late) if isinstance(late, list) and late else "none"))
    caus = _dict(s.get("causality"))
    facts.append(("causality violations",
                  f"{fmt(caus.get('violations'))} (checked {fmt(caus.get('checked'))}, max "
                  f"{fmt(caus.get('max_violation_ns'))} ns)" if caus else "none (not checked)"))
    corr = _dict(s.get("correction"))
    sure = _num(corr.get("uncertainty_ms"))
    facts.append(("overhead correction",
                  f"{'on' if corr.get('enabled') else 'off'}, scale {fmt(_num(corr.get('scale')))}, "
                  f"subtracted {_ms(corr.get('subtracted_ms'))} ms, corrected step "
                  f"{_ms(corr.get('duration_ms'))} ms"
                  + (f" \u00b1 {fmt(sure)} ms (one standard deviation: the measured costs' sampling error, "
                     "the caller side's model, the flush threads' CPU not removed)" if sure is not None else "")
                  if corr else "none"))
    return Facts(facts)


def _counts(s: Dict[str, Any]) -> List[Block]:
    out: List[Block] = [_process_table(s), _count_facts(s)]
    corr = _dict(s.get("correction"))
    waits = _dicts(corr.get("waits"))
    if waits:  # the controller's waits on other processes, linked or not (docs/summary_format.md)
        rows = [[w.get("subtask") if w.get("subtask") is not None else "(outside sub-tasks)",
                 _dict(w.get("linked")).get("ray"), _dict(w.get("linked")).get("key"),
                 _dict(w.get("unlinked")).get("ray"), _dict(w.get("unlinked")).get("key"), _num(w.get("removed_ms"))]
                for w in waits]
        out += [Heading("controller waits on other processes"),
                _table(["sub-task", "linked Ray calls", "linked keys", "unlinked Ray calls", "unlinked keys",
                        "wait removed ms"], rows, "waits-table")]
    for key, title, items in (("capture_warnings", "capture warnings", s.get("capture_warnings")),
                              ("clock_warnings", "clock warnings", s.get("clock_warnings")),
                              ("not_profiled", "not profiled", s.get("not_profiled")),
                              ("correction_notes", "correction notes", corr.get("notes"))):
        if isinstance(items, list) and items:
            out += [Heading(title), Items(f"warn {key}", [fmt(x) for x in items])]
        else:
            out.append(_none(title))
    return out


def _step(step: int, s: Optional[Dict[str, Any]], why: Optional[str], charts: _Charts) -> Step:
    if s is None:
        return Step(step, [Para(f"summary.json {why}; nothing to show for this step.", "warn")])
    corrected = _num(_dict(s.get("correction")).get("duration_ms"))
    duration = Para(f'Duration {_ms(s.get("duration_ms"))} ms (raw)'
                    + (f", {fmt(corrected)} ms after overhead correction" if corrected is not None else "")
                    + f'; reason: {fmt(s.get("reason"))}.')
    return Step(step, [duration], timeline=_timeline(step, s, charts), parts=[
        Part("breakdown", "Resource breakdown per sub-task and rank", _breakdown(step, s, charts)),
        Part("attribution", "Where the time went: CPU by category on every thread, off CPU by why (sampled)",
             _attribution(step, s, charts)),
        Part("critical-path", "Critical path", _critical_path(step, s, charts)),
        Part("stragglers", "Stragglers", _stragglers(s)),
        Part("gpu", "GPU utilisation: true busy vs naive", _gpu(step, s, charts)),
        Part("counts", "Processes, counts and warnings", _counts(s))])


# --- the timeline picture and the trend -------------------------------------

def _boxes(v: Any, subtasks: int) -> List[List[Any]]:
    """A lane's well-formed boxes: [begin_ms, duration_ms, name, subtask, critical]
    (a sub-task index out of range is none, -1)."""
    out = []
    for b in v if isinstance(v, list) else []:
        if not isinstance(b, list) or len(b) != 5:
            continue
        begin, dur, sub = _num(b[0]), _num(b[1]), _num(b[3])
        if begin is None or dur is None or sub is None:
            continue
        out.append([max(begin, 0.0), max(dur, 0.0), str(b[2]), int(sub) if 0 <= sub < subtasks else -1,
                    1 if b[4] else 0])
    return out


def _memory_text(p: Dict[str, Any]) -> str:
    m = _dict(p.get("memory"))
    if _num(m.get("rss_peak_mb")) is None:
        return ""
    text = f"RSS peak {_nonneg(m['rss_peak_mb']):,.1f} MiB ({_num(m.get('rss_change_mb')) or 0:+,.1f})"
    for g in _dicts(m.get("gpu")):
        text += (f"; GPU {fmt(g.get('device'))} allocated peak {_nonneg(g.get('allocated_peak_mb')):,.1f} MiB "
                 f"({_num(g.get('allocated_change_mb')) or 0:+,.1f})")
    return text


def _aggregate(lanes: List[Dict[str, Any]], count: int) -> Tuple[List[Dict[str, Any]], int, int]:
    """The first MAX_LANES process lanes (with their GPU lanes) as they are;
    the others merged per node (their ranges in one lane, their GPUs in
    another). Returns (lanes, processes aggregated, aggregate lanes)."""
    if count <= MAX_LANES:
        return lanes, 0, 0
    kept: List[Dict[str, Any]] = []
    merged: Dict[Tuple[str, bool], Dict[str, Any]] = {}
    seen = 0
    for lane in lanes:
        if not lane["gpu"]:
            seen += 1
        if seen <= MAX_LANES:
            kept.append(lane)
            continue
        key = (lane["node"], lane["gpu"])
        agg = merged.setdefault(key, {"label": f"node {_short(lane['node'], 12)}: more" + (" GPUs" if lane["gpu"] else ""),
                                      "title": "", "node": lane["node"], "gpu": lane["gpu"], "aggregate": True,
                                      "processes": 0, "boxes": []})
        agg["processes"] += 0 if lane["gpu"] else 1
        agg["boxes"].extend(lane["boxes"])
    for agg in merged.values():  # at most MAX_MERGED_BOXES, the longest
        agg["omitted"] = max(0, len(agg["boxes"]) - MAX_MERGED_BOXES)
        agg["boxes"] = sorted(sorted(agg["boxes"], key=lambda b: -b[1])[:MAX_MERGED_BOXES], key=lambda b: b[0])
        n = agg["processes"]
        agg["label"] += f" ({n} aggregated)" if n else " (aggregated)"
        agg["title"] = f"{agg['label']}: every box of these processes, merged"
    return kept + list(merged.values()), count - MAX_LANES, len(merged)


def _timeline(step: int, s: Dict[str, Any], charts: _Charts) -> List[Block]:
    tl = _dict(s.get("timeline"))
    raw_lanes = _dicts(tl.get("lanes"))
    if not raw_lanes:
        return [_none("timeline (an older summary, or no processes)")]
    subtasks = [str(x) for x in tl.get("subtasks") or [] if isinstance(x, str)] if isinstance(
        tl.get("subtasks"), list) else []
    memory = {str(p.get("label")): _memory_text(p) for p in _dicts(s.get("processes"))}
    lanes, omitted = [], 0
    for r in raw_lanes:
        process = str(r.get("process") or "?")
        gpu = r.get("gpu") is True
        who = _rank_text(r["rank"]) if _num(r.get("rank")) is not None else str(r.get("role") or "?")
        omitted += int(_nonneg(r.get("omitted")))
        lanes.append({"label": _short(("GPU \u00b7 " if gpu else "") + who, 30), "process": process, "gpu": gpu,
                      "node": str(r.get("node") or "?"), "aggregate": False,
                      "title": process + ("" if gpu or not memory.get(process) else "; " + memory[process]),
                      "boxes": _boxes(r.get("boxes"), len(subtasks))})
    count = sum(1 for lane in lanes if not lane["gpu"])
    lanes, aggregated, agg_lanes = _aggregate(lanes, count)
    omitted += sum(lane.get("omitted", 0) for lane in lanes if lane["aggregate"])
    cp = _dict(s.get("critical_path"))
    band = [{"begin": _nonneg(g.get("begin_ms")), "duration": _nonneg(g.get("duration_ms")),
             "sub": subtasks.index(str(g.get("subtask"))) if str(g.get("subtask")) in subtasks else -1,
             "label": (f"{g.get('subtask')}: critical {_rank_text(g.get('critical_rank'))}"
                       if _num(g.get("critical_rank")) is not None else f"{g.get('subtask')}: no worker busy")}
            for g in _dicts(cp.get("segments"))]
    step_ms = max([_nonneg(cp.get("step_ms")), _nonneg(s.get("duration_ms"))]
                  + [b[0] + b[1] for lane in lanes for b in lane["boxes"]])
    legend = [(f"seg-sub-{i % PALETTE}", name) for i, name in enumerate(subtasks)]
    legend += [("seg-sub-none", "outside every sub-task"), ("seg-gpu-lane", "GPU busy"),
               ("seg-critical", "on the critical path (outlined)")]
    out: List[Block] = [charts.add("timeline-chart", f"step{step}-timeline",
                                   {"step_ms": step_ms, "subtasks": subtasks, "lanes": lanes, "band": band},
                                   legend)]
    if aggregated:
        out.append(Para(f"{aggregated} processes past the first {MAX_LANES} lanes are drawn aggregated, "
                        f"in {agg_lanes} lane{'' if agg_lanes == 1 else 's'} by node.", "note aggregated"))
    if omitted:
        out.append(Para(f"{omitted} shorter boxes are not drawn (each lane keeps its "
                        f"{fmt(tl.get('max_boxes_per_lane'))} longest, a merged lane its {MAX_MERGED_BOXES}).",
                        "note omitted"))
    out.append(Para("One lane per process (the controller's sub-task windows, each worker's outermost ranges), "
                    "a GPU lane where its GPU was busy; times corrected, from the step's begin. Hover for figures.",
                    "note"))
    return out


def _subtask_ms(s: Dict[str, Any]) -> Dict[str, float]:
    """The controller's time per sub-task in a step (its critical-path segments, summed by name)."""
    out: Dict[str, float] = {}
    for g in _dicts(_dict(s.get("critical_path")).get("segments")):
        name = str(g.get("subtask", "?"))
        out[name] = out.get(name, 0.0) + _nonneg(g.get("duration_ms"))
    return out


def _rss_peak(s: Dict[str, Any]) -> Optional[float]:
    peaks = [_num(_dict(p.get("memory")).get("rss_peak_mb")) for p in _dicts(s.get("processes"))]
    known = [p for p in peaks if p is not None]
    return max(known) if known else None


def _trend(steps: List[Tuple[int, Optional[Dict[str, Any]], Optional[str]]], charts: _Charts) -> List[Block]:
    written = [(n, s) for n, s, _ in steps if s is not None]
    if not written:
        return [_none("steps to show over time")]
    names: List[str] = []
    points, rows = [], []
    for n, s in written:
        parts = _subtask_ms(s)
        names += [k for k in parts if k not in names]
        raw, corrected = _num(s.get("duration_ms")), _num(_dict(s.get("correction")).get("duration_ms"))
        points.append({"step": n, "raw": raw if raw is not None else 0.0, "corrected": corrected, "parts": parts})
        rows.append((n, raw, corrected, parts, _rss_peak(s)))
    for p in points:
        p["parts"] = [p["parts"].get(k, 0.0) for k in names]
    legend = [(f"seg-sub-{i % PALETTE}", name) for i, name in enumerate(names)]
    legend += [("trend-raw", "step time, raw"), ("trend-corrected", "step time, corrected")]
    table = _table(["step", "raw ms", "corrected ms"] + [f"{k} ms" for k in names] + ["largest RSS peak MiB"],
                   [[n, raw, corrected] + [parts.get(k) for k in names] + [rss] for n, raw, corrected, parts, rss in rows],
                   "trend-table")
    return [charts.add("trend-chart", "trend", {"names": names, "steps": points}, legend),
            Para("Per written step: the controller's sub-task time stacked (its critical-path segments), the step "
                 "time raw and after overhead correction as lines.", "note"), table]


# --- losses -----------------------------------------------------------------

def loss_line(run: Dict[str, Any]) -> str:
    """Every loss run.json records, in one line ("" when nothing was lost):
    what rlscope_ray.shutdown prints on the driver's console and the report's
    overview shows."""
    procs = _dicts(run.get("processes"))
    parts = []
    dropped = sum(int(_nonneg(p.get("dropped"))) for p in procs)
    if dropped:
        parts.append(f"{dropped} events dropped in {sum(1 for p in procs if _nonneg(p.get('dropped')))} processes "
                     "(each step's summary counts its own)")
    lost = [p for p in procs if p.get("lost")]
    if lost:
        parts.append(f"{len(lost)} processes gone without a goodbye ({', '.join(str(p.get('label')) for p in lost)})")
    not_prof = run.get("not_profiled")
    if isinstance(not_prof, list) and not_prof:
        parts.append(f"{len(not_prof)} expected processes never connected")
    for key, what in (("late_events", "events arrived after their step was written"),
                      ("decode_errors", "frames were not the wire format"),
                      ("refused_frames", "frames refused (no hello with the run's secret on their connection)")):
        if _nonneg(run.get(key)):
            parts.append(f"{int(_nonneg(run.get(key)))} {what}")
    resumes = _dict(run.get("resume")).get("resumes")
    if _nonneg(resumes):
        parts.append(f"the aggregator was restarted {int(_nonneg(resumes))} times (collectors replayed what it missed)")
    return "; ".join(parts)


# --- the page ---------------------------------------------------------------

def _overview(run_dir: Path, run: Optional[Dict[str, Any]], why: Optional[str]) -> List[Block]:
    out: List[Block] = []
    if run is None:
        out.append(Para(f"run.json {why}.", "warn"))
        run = {}
    facts = [("directory", str(run_dir)), ("final", fmt(run.get("final"))),
             ("steps seen", fmt(run.get("steps_seen"))), ("steps written", fmt(run.get("steps_written")))]
    if _nonneg(run.get("steps_figures_only")):  # always on
        facts += [("steps with figures only", fmt(run.get("steps_figures_only"))),
                  ("written in full by a trigger", fmt(run.get("steps_triggered") or "none"))]
    facts += [("late events", fmt(run.get("late_events"))), ("decode errors", fmt(run.get("decode_errors")))]
    if run.get("last_decode_error"):
        facts.append(("last decode error", fmt(run.get("last_decode_error"))))
    facts.append(("losses", loss_line(run) or "none"))
    not_prof = run.get("not_profiled")
    facts.append(("not profiled", fmt(not_prof) if isinstance(not_prof, list) and not_prof else "none"))
    out.append(Facts(facts))
    raw_notes = run.get("config_notes")
    notes = [n for n in raw_notes if isinstance(n, str)] if isinstance(raw_notes, list) else []
    if notes:  # the run's own notes: a run that wrote nothing says why here
        out.append(Items("warn run-notes", notes))
    procs = _dicts(run.get("processes"))
    if procs:
        out.append(_table(["process", "role", "rank", "selected", "events received", "dropped", "said bye", "lost"],
                          [[p.get("label"), p.get("role"), p.get("rank"), p.get("selected"),
                            p.get("events_received"), p.get("dropped"), p.get("said_bye"), p.get("lost")]
                           for p in procs],
                          "run-process-table"))
    else:
        out.append(_none("processes"))
    if isinstance(run.get("config_yaml"), str) and run["config_yaml"]:
        out.append(Details("configuration", run["config_yaml"]))
    return out


def load(run_dir: Path) -> Page:
    """The page of run_dir. Raises ReportError when run_dir is not a directory
    or holds neither run.json nor any step_<N> directory."""
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: {'not a directory' if run_dir.exists() else 'no such directory'}")
    run, run_why = _read_json(run_dir / "run.json")
    try:
        step_dirs = _steps(run_dir)
    except OSError as e:
        raise ReportError(f"{run_dir}: cannot list: {e.strerror or e}") from e
    if run is None and not step_dirs:
        raise ReportError(f"{run_dir}: not an rlscope-ray output directory (run.json {run_why}, "
                          "no step_<N>/summary.json)")
    steps = [(n, *_read_json(d / "summary.json")) for n, d in step_dirs]
    links = [StepLink(n, f'{_ms(s.get("duration_ms"))} ms, {fmt(s.get("reason"))}' if s is not None
                      else f"summary.json {w}") for n, s, w in steps]
    from .changes import changes_section  # it reads this module's helpers

    charts = _Charts()
    # Always on: every step's figures (figures.jsonl), the last TREND_STEPS of them.
    figs = _figures.load(str(run_dir))
    every = [(n, _figures.as_summary(f), None) for n, f in sorted(figs.items())][-TREND_STEPS:]
    trend = _trend(every if every else steps, charts)
    return Page(title=f"rlscope-ray report: {run_dir.resolve().name}", overview=_overview(run_dir, run, run_why),
                links=links, steps=[_step(n, s, w, charts) for n, s, w in steps], charts=charts.data, trend=trend,
                changes=changes_section(run_dir))


# The steps-over-time chart's most steps (always on: the last of figures.jsonl).
TREND_STEPS = 2000

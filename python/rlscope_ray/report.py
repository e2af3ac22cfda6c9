"""The self-contained HTML report of a run (``rlscope-ray report DIR``).

``write_report(run_dir)`` reads ``<run_dir>/run.json`` and every
``<run_dir>/step_<N>/summary.json`` (docs/summary_format.md) and writes one
HTML file: inline CSS and JS, no network, no external fonts or images. The data
the charts need is embedded as JSON in a ``<script type="application/json">``
tag; the inline script draws the charts as SVG. Everything else (overview,
tables, warnings) is plain HTML written here, so the numbers are readable with
JavaScript off.

Summaries only ever gain keys, and older runs or steps without GPU records or
sub-tasks lack whole sections: any missing or malformed section renders as
"none"; nothing in the data makes this module raise. Every string taken from
the data (process labels come from user programs) is escaped.

Page contract (used by tests/test_report.py): each chart container has
``class="chart <kind>"`` with kind one of ``breakdown-chart``,
``attribution-chart``, ``critical-path-chart``, ``gpu-util-chart``; when the script is done,
``document.body.dataset.rendered`` holds the number of charts drawn; script
errors and unhandled rejections are appended to ``<pre id="errors">``.
"""
from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

__all__ = ["ReportError", "write_report", "render_report"]

# (key in a breakdown row, legend label, CSS class suffix). Overhead is drawn
# as its own hatched segment after the four that add up to the window.
SEGMENTS: Tuple[Tuple[str, str, str], ...] = (
    ("cpu_only_ms", "CPU only", "cpu_only"),
    ("gpu_only_ms", "GPU only", "gpu_only"),
    ("cpu_gpu_ms", "CPU + GPU", "cpu_gpu"),
    ("idle_ms", "idle", "idle"),
    ("overhead_ms", "profiler overhead (removed)", "overhead"),
)
# Cross-stack attribution (a breakdown row's "attribution"): (key, legend
# label, CSS class suffix). The CPU categories are thread CPU time, GPU the
# process's GPU busy time, idle the window time with neither; the profiler's
# own share is drawn hatched, as the overhead above.
CATEGORIES: Tuple[Tuple[str, str, str], ...] = (
    ("python_ms", "Python", "cat-python"),
    ("backend_ms", "ML backend", "cat-backend"),
    ("cuda_api_ms", "CUDA API", "cat-cuda_api"),
    ("simulator_ms", "simulator", "cat-simulator"),
    ("other_ms", "other native", "cat-other"),
    ("gpu_ms", "GPU busy", "cat-gpu"),
    ("idle_ms", "idle", "idle"),
    ("profiler_ms", "profiler (removed)", "overhead"),
)
STRAGGLER_RATIO = 1.2  # stragglers above this slowest/median ratio are highlighted

_STEP_DIR = re.compile(r"step_(\d+)")


class ReportError(Exception):
    """The directory cannot be reported on. The message is one line and names the path."""


# --- reading ----------------------------------------------------------------

def _read_json(path: Path) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(object, None) or (None, why). A missing file is (None, "missing")."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "missing"
    except (OSError, UnicodeDecodeError, ValueError) as e:
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

def _esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _fmt(v: Any, unit: str = "") -> str:
    """Escaped text for one value; missing values are an en dash."""
    if v is None:
        return "&ndash;"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        text = f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
        return _esc(text + unit)
    if isinstance(v, int):
        return _esc(f"{v:,}{unit}")
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v) if v else "none"
    if isinstance(v, dict):
        return _esc(", ".join(f"{k}={x}" for k, x in v.items()))
    return _esc(v)


def _ms(v: Any) -> str:
    n = _num(v)
    return _fmt(n) if n is not None else "&ndash;"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "",
           row_classes: Optional[Sequence[str]] = None) -> str:
    """A table; cells are raw values, formatted and escaped by _fmt. Numeric
    cells (int/float) are right-aligned."""
    out = [f'<table class="{_esc(cls)}"><thead><tr>']
    out += [f"<th>{_esc(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for i, row in enumerate(rows):
        rc = row_classes[i] if row_classes and row_classes[i] else ""
        out.append(f'<tr class="{_esc(rc)}">' if rc else "<tr>")
        for c in row:
            num = isinstance(c, (int, float)) and not isinstance(c, bool)
            out.append(f'<td class="num">{_fmt(c)}</td>' if num else f"<td>{_fmt(c)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _none(what: str) -> str:
    return f'<p class="none">{_esc(what)}: none</p>'


def _rank_text(rank: Any) -> str:
    return f"rank {rank}" if _num(rank) is not None else "rank ?"


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


# --- one step ---------------------------------------------------------------

class _Charts:
    """Collects the data of every chart container on the page, keyed by id."""

    def __init__(self) -> None:
        self.data: Dict[str, Any] = {}

    def add(self, kind: str, chart_id: str, data: Dict[str, Any], legend: str = "") -> str:
        self.data[chart_id] = data
        return (f'<div class="chart {kind}" data-chart="{_esc(chart_id)}" role="img"></div>'
                f"{legend}")


def _legend(items: Sequence[Tuple[str, str]]) -> str:
    spans = "".join(f'<span><i class="sw {_esc(c)}"></i>{_esc(t)}</span>' for c, t in items)
    return f'<div class="legend">{spans}</div>'


def _breakdown(step: int, s: Dict[str, Any], charts: _Charts) -> str:
    rows = _dicts(s.get("breakdown"))
    if not rows:
        return _none("breakdown")
    bars = []
    table = []
    for r in rows:
        subtask = str(r.get("subtask", "?"))
        process = str(r.get("process") or r.get("role") or "?")
        who = _rank_text(r["rank"]) if _num(r.get("rank")) is not None else str(r.get("role") or process)
        vals = [_nonneg(r.get(k)) for k, _, _ in SEGMENTS]
        bars.append({"label": _short(f"{subtask} \u00b7 {who}"),
                     "title": f"{subtask} / {process}; window {_nonneg(r.get('window_ms')):.3f} ms",
                     "values": vals})
        table.append([subtask, r.get("rank"), process, r.get("occurrences"), _num(r.get("window_ms"))]
                     + [_num(r.get(k)) for k, _, _ in SEGMENTS])
    legend = _legend([(f"seg-{c}", t) for _, t, c in SEGMENTS])
    chart = charts.add("breakdown-chart", f"step{step}-breakdown",
                       {"kinds": [{"key": c, "label": t} for _, t, c in SEGMENTS], "rows": bars}, legend)
    headers = ["sub-task", "rank", "process", "occurrences", "window ms"] + [f"{t} ms" for _, t, _ in SEGMENTS]
    return chart + _table(headers, table, "breakdown-table")


def _attribution(step: int, s: Dict[str, Any], charts: _Charts) -> str:
    rows = [r for r in _dicts(s.get("breakdown")) if _dict(r.get("attribution"))]
    if not rows:
        why = sorted({str(p.get("cpu_sampling")) for p in _dicts(s.get("processes")) if p.get("cpu_sampling")})
        return _none("CPU samples") + (f'<p class="note">CPU sampling: {_esc("; ".join(why))}</p>' if why else "")
    bars = []
    table = []
    for r in rows:
        a = _dict(r.get("attribution"))
        subtask = str(r.get("subtask", "?"))
        process = str(r.get("process") or r.get("role") or "?")
        who = _rank_text(r["rank"]) if _num(r.get("rank")) is not None else str(r.get("role") or process)
        shares = _dict(a.get("shares"))
        errors = _dict(a.get("error_ms"))
        top = max(shares.items(), key=lambda kv: _nonneg(kv[1]), default=("", 0))
        bars.append({"label": _short(f"{subtask} \u00b7 {who}"),
                     "title": (f"{subtask} / {process}; {_nonneg(a.get('cpu_ms')):.3f} ms CPU in "
                               f"{_fmt(a.get('samples'))} samples"
                               + (f", {100 * _nonneg(top[1]):.0f} % {top[0]}" if top[0] else "")),
                     "values": [_nonneg(a.get(k)) for k, _, _ in CATEGORIES]})
        cells = []
        for k, _, _ in CATEGORIES:
            cat = k[:-3]
            v = _num(a.get(k))
            share, err = _num(shares.get(cat)), _num(errors.get(cat))
            text = f"{v:,.3f}" if v is not None else "\u2013"
            if share is not None and share > 0:
                text += f" ({100 * share:.0f} %)"
            if err is not None and err > 0 and v:
                text += f" \u00b1 {err:,.3f}"
            cells.append(text)
        table.append([subtask, r.get("rank"), process, a.get("samples"), _num(a.get("cpu_ms"))] + cells)
    legend = _legend([(f"seg-{c}", t) for _, t, c in CATEGORIES])
    chart = charts.add("attribution-chart", f"step{step}-attribution",
                       {"kinds": [{"key": c, "label": t} for _, t, c in CATEGORIES], "rows": bars}, legend)
    headers = (["sub-task", "rank", "process", "samples", "CPU ms"]
               + [f"{t} ms" for _, t, _ in CATEGORIES])
    note = ('<p class="note">CPU categories are thread CPU time from samples driven by each thread\'s own CPU '
            'clock (share of the job\'s CPU time, &plusmn; one standard deviation of sampling); GPU busy and idle '
            'are wall time (idle: neither a sampled thread on a CPU nor the GPU busy). A bar may exceed the '
            'window where threads ran in parallel or the CPU overlapped the GPU.</p>')
    return chart + note + _table(headers, table, "attribution-table")


def _critical_path(step: int, s: Dict[str, Any], charts: _Charts) -> str:
    cp = _dict(s.get("critical_path"))
    segs = _dicts(cp.get("segments"))
    if not segs:
        return _none("critical path")
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
    chart = charts.add("critical-path-chart", f"step{step}-critical-path",
                       {"step_ms": _nonneg(cp.get("step_ms")), "segments": bars},
                       _legend([("cp-seg", "sub-task, labelled with its critical rank"),
                                ("cp-nocrit", "no worker busy in it")]))
    summary = (f'<p>Step (corrected): {_ms(cp.get("step_ms"))} ms; controller only (not in any '
               f'segment): {_ms(cp.get("controller_ms"))} ms.</p>')
    omitted = _num(cp.get("segments_omitted"))
    if omitted:
        summary += (f'<p class="omitted">{int(omitted)} shorter sub-task occurrences are not listed '
                    f'(the breakdown and straggler tables count them).</p>')
    return chart + summary + _table(
        ["sub-task", "begin ms", "duration ms", "critical rank", "critical process", "critical ms", "median ms"],
        table, "critical-path-table")


def _stragglers(s: Dict[str, Any]) -> str:
    rows = _dicts(s.get("stragglers"))
    if not rows:
        return _none("stragglers")
    table, classes = [], []
    for r in rows:
        ratio = _num(r.get("ratio"))
        table.append([r.get("subtask"), r.get("ranks"), r.get("slowest_rank"), r.get("slowest_process"),
                      _num(r.get("slowest_ms")), _num(r.get("median_ms")), _num(r.get("fastest_ms")), ratio])
        classes.append("hot" if ratio is not None and ratio > STRAGGLER_RATIO else "")
    note = f'<p class="note">Highlighted: slowest / median &gt; {STRAGGLER_RATIO}.</p>'
    return _table(["sub-task", "ranks", "slowest rank", "slowest process", "slowest ms", "median ms",
                   "fastest ms", "ratio"], table, "straggler-table", classes) + note


def _gpu(step: int, s: Dict[str, Any], charts: _Charts) -> str:
    rows = _dicts(s.get("gpu_utilization"))
    if not rows:
        return '<p class="none">no GPU records</p>'
    bars, table = [], []
    for r in rows:
        process = str(r.get("process") or "?")
        who = _rank_text(r["rank"]) if _num(r.get("rank")) is not None else process
        busy, naive = _nonneg(r.get("gpu_busy_pct")), _nonneg(r.get("naive_util_pct"))
        bars.append({"label": _short(who), "title": process, "busy": busy, "naive": naive})
        table.append([process, r.get("rank"), _num(r.get("gpu_busy_ms")), _num(r.get("gpu_busy_pct")),
                      _num(r.get("naive_util_pct")), _num(r.get("sample_ms"))])
    chart = charts.add("gpu-util-chart", f"step{step}-gpu", {"rows": bars},
                       _legend([("gpu-busy", "GPU busy (union of kernels and copies)"),
                                ("gpu-naive", "naive, nvidia-smi style (share of sample bins with a kernel)")]))
    return chart + _table(["process", "rank", "GPU busy ms", "GPU busy %", "naive %", "sample ms"], table,
                          "gpu-table")


def _counts(s: Dict[str, Any]) -> str:
    procs = _dicts(s.get("processes"))
    parts = []
    if procs:
        rows = []
        for p in procs:
            clock = _dict(p.get("clock"))
            rows.append([p.get("label"), p.get("role"), p.get("rank"), p.get("spans"), p.get("instants"),
                         p.get("gpu_records"), p.get("dropped_total"), p.get("late"),
                         clock.get("aligned"), _num(_dict(p.get("overhead")).get("subtracted_ms")),
                         _num(_dict(p.get("overhead")).get("waits_ms"))])
        parts.append(_table(["process", "role", "rank", "spans", "instants", "gpu records", "dropped", "late",
                             "clock aligned", "overhead ms", "of it waiting on workers ms"], rows,
                            "process-table"))
    else:
        parts.append(_none("processes"))
    totals = _dict(s.get("totals"))
    facts: List[Tuple[str, str]] = []
    if totals:
        facts.append(("totals", _fmt(totals)))
    late = s.get("late_processes")
    facts.append(("late processes", _fmt(late) if isinstance(late, list) and late else "none"))
    caus = _dict(s.get("causality"))
    facts.append(("causality violations",
                  f"{_fmt(caus.get('violations'))} (checked {_fmt(caus.get('checked'))}, max "
                  f"{_fmt(caus.get('max_violation_ns'))} ns)" if caus else "none (not checked)"))
    corr = _dict(s.get("correction"))
    sure = _num(corr.get("uncertainty_ms"))
    facts.append(("overhead correction",
                  f"{'on' if corr.get('enabled') else 'off'}, scale {_fmt(_num(corr.get('scale')))}, "
                  f"subtracted {_ms(corr.get('subtracted_ms'))} ms, corrected step "
                  f"{_ms(corr.get('duration_ms'))} ms"
                  + (f" &plusmn; {_fmt(sure)} ms (sampling error of the measured costs)" if sure is not None else "")
                  if corr else "none"))
    parts.append("<dl>" + "".join(f"<dt>{_esc(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    waits = _dicts(corr.get("waits"))
    if waits:  # the controller's waits on other processes, linked or not (docs/summary_format.md)
        rows = [[w.get("subtask") if w.get("subtask") is not None else "(outside sub-tasks)",
                 _dict(w.get("linked")).get("ray"), _dict(w.get("linked")).get("key"),
                 _dict(w.get("unlinked")).get("ray"), _dict(w.get("unlinked")).get("key"), _num(w.get("removed_ms"))]
                for w in waits]
        parts.append("<h4>controller waits on other processes</h4>" + _table(
            ["sub-task", "linked Ray calls", "linked keys", "unlinked Ray calls", "unlinked keys", "wait removed ms"],
            rows, "waits-table"))
    for key, title, items in (("clock_warnings", "clock warnings", s.get("clock_warnings")),
                              ("not_profiled", "not profiled", s.get("not_profiled")),
                              ("correction_notes", "correction notes", corr.get("notes"))):
        if isinstance(items, list) and items:
            lis = "".join(f"<li>{_fmt(x)}</li>" for x in items)
            parts.append(f'<h4>{_esc(title)}</h4><ul class="warn {key}">{lis}</ul>')
        else:
            parts.append(_none(title))
    return "".join(parts)


def _step_section(step: int, s: Optional[Dict[str, Any]], why: Optional[str], charts: _Charts) -> str:
    out = [f'<section class="step" id="step-{step}"><h2>Step {step}</h2>']
    if s is None:
        out.append(f'<p class="warn">summary.json {_esc(why)}; nothing to show for this step.</p></section>')
        return "".join(out)
    corrected = _num(_dict(s.get("correction")).get("duration_ms"))
    out.append(f'<p>Duration {_ms(s.get("duration_ms"))} ms (raw)'
               + (f", {_fmt(corrected)} ms after overhead correction" if corrected is not None else "")
               + f'; reason: {_fmt(s.get("reason"))}.</p>')
    for part, title, body in (
            ("breakdown", "Resource breakdown per sub-task and rank", _breakdown(step, s, charts)),
            ("attribution", "Where the CPU time went: Python, ML backend, CUDA API, simulator (sampled)",
             _attribution(step, s, charts)),
            ("critical-path", "Critical path", _critical_path(step, s, charts)),
            ("stragglers", "Stragglers", _stragglers(s)),
            ("gpu", "GPU utilisation: true busy vs naive", _gpu(step, s, charts)),
            ("counts", "Processes, counts and warnings", _counts(s))):
        out.append(f'<div class="part part-{part}"><h3>{_esc(title)}</h3>{body}</div>')
    out.append("</section>")
    return "".join(out)


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

def _overview(run_dir: Path, run: Optional[Dict[str, Any]], why: Optional[str],
              steps: List[Tuple[int, Optional[Dict[str, Any]], Optional[str]]]) -> str:
    out = ['<section id="overview"><h2>Run</h2>']
    if run is None:
        out.append(f'<p class="warn">run.json {_esc(why)}.</p>')
        run = {}
    facts = [("directory", _esc(str(run_dir))), ("final", _fmt(run.get("final"))),
             ("steps seen", _fmt(run.get("steps_seen"))), ("steps written", _fmt(run.get("steps_written"))),
             ("late events", _fmt(run.get("late_events"))), ("decode errors", _fmt(run.get("decode_errors")))]
    if run.get("last_decode_error"):
        facts.append(("last decode error", _fmt(run.get("last_decode_error"))))
    facts.append(("losses", _esc(loss_line(run)) or "none"))
    not_prof = run.get("not_profiled")
    facts.append(("not profiled", _fmt(not_prof) if isinstance(not_prof, list) and not_prof else "none"))
    out.append("<dl>" + "".join(f"<dt>{_esc(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    notes = [n for n in run.get("config_notes") or [] if isinstance(n, str)]
    if notes:  # the run's own notes: a run that wrote nothing says why here
        out.append('<ul class="warn run-notes">' + "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul>")
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
        out.append(f'<details><summary>configuration</summary><pre>{_esc(run["config_yaml"])}</pre></details>')
    out.append("</section>")
    out.append('<nav id="steps"><h2>Steps</h2>')
    if steps:
        items = []
        for n, s, w in steps:
            detail = (f'{_ms(s.get("duration_ms"))} ms, {_fmt(s.get("reason"))}' if s is not None
                      else f"summary.json {_esc(w)}")
            items.append(f'<li><a href="#step-{n}">step {n}</a> &mdash; {detail}</li>')
        out.append("<ul>" + "".join(items) + "</ul>")
    else:
        out.append(_none("captured steps"))
    out.append("</nav>")
    return "".join(out)


def _json_for_script(data: Any) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' survive raw."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_report(run_dir: Union[str, Path]) -> str:
    """The report page for run_dir as a string. Raises ReportError when run_dir
    is not a directory or holds neither run.json nor any step_<N> directory."""
    run_dir = Path(run_dir)
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
    charts = _Charts()
    body = [_overview(run_dir, run, run_why, steps)]
    body += [_step_section(n, s, w, charts) for n, s, w in steps]
    parts = {"TITLE": _esc(f"rlscope-ray report: {run_dir.resolve().name}"), "CSS": _CSS, "JS": _JS,
             "DATA": _json_for_script({"charts": charts.data}), "BODY": "".join(body)}
    # One pass over the template: text from the data is never rescanned for placeholders.
    return re.sub(r"@(TITLE|CSS|JS|DATA|BODY)@", lambda m: parts[m.group(1)], _PAGE)


def write_report(run_dir: Union[str, Path], out: Union[str, Path, None] = None) -> Path:
    """Write the report of run_dir to out (default <run_dir>/report.html) and
    return its path. Raises ReportError (see render_report) or OSError when the
    file cannot be written."""
    page = render_report(Path(run_dir))
    path = Path(out) if out is not None else Path(run_dir) / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style>
<script>
// First, so that errors in the drawing script below are visible on the page.
(function () {
  function show(msg) {
    var pre = document.getElementById("errors");
    if (pre) pre.appendChild(document.createTextNode(String(msg) + "\\n"));
  }
  window.onerror = function (msg, src, line, col) { show(msg + " (line " + line + ":" + col + ")"); };
  window.addEventListener("unhandledrejection", function (e) {
    var r = e.reason; show("unhandled rejection: " + (r && r.message ? r.message : r));
  });
  window.rlsShowError = show;
})();
</script>
</head><body>
<h1>@TITLE@</h1>
<pre id="errors"></pre>
<noscript><p class="warn">Charts need JavaScript; the tables below hold every value.</p></noscript>
@BODY@
<script type="application/json" id="report-data">@DATA@</script>
<script>@JS@</script>
</body></html>
"""

_CSS = """
body { font: 14px/1.45 "DejaVu Sans", system-ui, sans-serif; color: #222; margin: 1.5em auto; max-width: 1100px;
       padding: 0 1em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; margin-top: 2em; }
h3 { font-size: 1.05em; margin: 1.4em 0 .4em; } h4 { font-size: 1em; margin: .8em 0 .2em; }
table { border-collapse: collapse; margin: .4em 0; font-size: 12.5px; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.hot td { background: #fde2e0; font-weight: bold; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
dt { color: #555; } dd { margin: 0; }
.none { color: #777; font-style: italic; } .warn { color: #a33; } .note { color: #555; font-size: 12px; }
#errors { color: #a00; background: #fff0f0; border: 1px solid #e99; padding: .5em; white-space: pre-wrap; }
#errors:empty { display: none; }
.chart svg { display: block; max-width: 100%; height: auto; }
.chart text { font: 11px "DejaVu Sans", sans-serif; fill: #222; }
.chart .axis text { fill: #666; } .chart .grid { stroke: #e6e6e6; }
.legend { font-size: 12px; margin: 2px 0 6px; } .legend span { margin-right: 14px; white-space: nowrap; }
.legend .sw { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -2px;
              border: 1px solid #999; }
.seg-cpu_only { background: #4e79a7; fill: #4e79a7; } .seg-gpu_only { background: #59a14f; fill: #59a14f; }
.seg-cpu_gpu { background: #b07aa1; fill: #b07aa1; } .seg-idle { background: #e9e9e9; fill: #e9e9e9; }
.seg-overhead { background: repeating-linear-gradient(45deg, #999 0 2px, #ddd 2px 5px); }
.seg-cat-python { background: #4e79a7; fill: #4e79a7; } .seg-cat-backend { background: #f28e2b; fill: #f28e2b; }
.seg-cat-cuda_api { background: #e15759; fill: #e15759; } .seg-cat-simulator { background: #76b7b2; fill: #76b7b2; }
.seg-cat-other { background: #edc948; fill: #edc948; } .seg-cat-gpu { background: #59a14f; fill: #59a14f; }
.cp-seg { background: #f28e2b; fill: #f28e2b; } .cp-nocrit { background: #bbb; fill: #bbb; }
.gpu-busy { background: #59a14f; fill: #59a14f; } .gpu-naive { background: #c9d7e8; fill: #c9d7e8; }
section.step { margin-bottom: 2.5em; }
"""

# Draws every .chart[data-chart] from the JSON blob. DOM APIs only (textContent,
# setAttribute), never innerHTML, so data strings cannot become markup.
_JS = r"""
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var W = 960, LABEL = 250, RIGHT = 20;
  var data = JSON.parse(document.getElementById("report-data").textContent);

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var t = el("text", attrs || {}, parent); t.setAttribute("x", x); t.setAttribute("y", y);
    t.textContent = s; return t;
  }
  function title(parent, s) { el("title", {}, parent).textContent = s; }
  function ms(v) { return v.toFixed(3) + " ms"; }
  function svg(container, height) {
    return el("svg", {width: W, height: height, viewBox: "0 0 " + W + " " + height}, container);
  }
  function ticks(max) {
    if (!(max > 0)) return [0];
    var raw = max / 5, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    var step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p, out = [];
    for (var i = 0; i * step <= max * 1.0001; i++) out.push(i * step);
    return out;
  }
  // Vertical grid lines and labels at the top; returns the x of a value.
  function axis(s, max, top, bottom, unit) {
    var scale = max > 0 ? (W - LABEL - RIGHT) / max : 0, g = el("g", {"class": "axis"}, s);
    ticks(max).forEach(function (v) {
      var x = LABEL + v * scale;
      el("line", {x1: x, x2: x, y1: top - 4, y2: bottom, "class": "grid"}, g);
      text(g, x, top - 8, +v.toPrecision(6) + unit, {"text-anchor": "middle"});
    });
    return function (v) { return v * scale; };
  }

  function breakdown(c, d) {
    var rowH = 18, gap = 7, top = 26, h = top + d.rows.length * (rowH + gap) + 4;
    var s = svg(c, h), max = 0;
    var defs = el("defs", {}, s), hatch = "hatch-" + c.getAttribute("data-chart");
    var pat = el("pattern", {id: hatch, width: 5, height: 5, patternUnits: "userSpaceOnUse",
                             patternTransform: "rotate(45)"}, defs);
    el("rect", {width: 5, height: 5, fill: "#ddd"}, pat);
    el("rect", {width: 2, height: 5, fill: "#999"}, pat);
    d.rows.forEach(function (r) {
      var sum = r.values.reduce(function (a, b) { return a + b; }, 0); if (sum > max) max = sum;
    });
    var x = axis(s, max, top, h - 4, " ms");
    d.rows.forEach(function (r, i) {
      var y = top + i * (rowH + gap), at = LABEL, g = el("g", {"class": "bar"}, s);
      title(text(g, LABEL - 6, y + rowH - 5, r.label, {"text-anchor": "end"}), r.title);
      r.values.forEach(function (v, k) {
        if (!(v > 0)) return;
        var kind = d.kinds[k], w = Math.max(x(v), 0.5);
        var rect = el("rect", {x: at, y: y, width: w, height: rowH, "class": "seg seg-" + kind.key}, g);
        if (kind.key === "overhead") rect.setAttribute("fill", "url(#" + hatch + ")");
        if (kind.key === "idle") rect.setAttribute("stroke", "#ccc");
        title(rect, kind.label + ": " + ms(v) + " (" + r.title + ")");
        at += w;
      });
    });
  }

  function criticalPath(c, d) {
    var rowH = 16, gap = 6, top = 26, h = top + d.segments.length * (rowH + gap) + 4;
    var s = svg(c, h), max = d.step_ms;
    d.segments.forEach(function (g) { if (g.begin + g.duration > max) max = g.begin + g.duration; });
    var x = axis(s, max, top, h - 4, " ms");
    d.segments.forEach(function (g, i) {
      var y = top + i * (rowH + gap), x0 = LABEL + x(g.begin), w = Math.max(x(g.duration), 1);
      var grp = el("g", {"class": "segment"}, s);
      var rect = el("rect", {x: x0, y: y, width: w, height: rowH,
                             "class": g.critical ? "cp-seg" : "cp-nocrit"}, grp);
      title(rect, g.title);
      // The label goes right of the bar when it fits, else left of it.
      var right = x0 + w + 4 + g.label.length * 6.3 <= W;
      text(grp, right ? x0 + w + 4 : x0 - 4, y + rowH - 4, g.label,
           right ? {} : {"text-anchor": "end"});
    });
  }

  function gpuUtil(c, d) {
    var barH = 10, gap = 12, top = 26, h = top + d.rows.length * (2 * barH + gap) + 4;
    var s = svg(c, h), x = axis(s, 100, top, h - 4, "%");
    d.rows.forEach(function (r, i) {
      var y = top + i * (2 * barH + gap), g = el("g", {"class": "pair"}, s);
      title(text(g, LABEL - 6, y + barH + 4, r.label, {"text-anchor": "end"}), r.title);
      [["gpu-busy", r.busy, "GPU busy"], ["gpu-naive", r.naive, "naive"]].forEach(function (b, k) {
        var rect = el("rect", {x: LABEL, y: y + k * barH, width: Math.max(x(Math.min(b[1], 100)), 0.5),
                               height: barH - 1, "class": b[0]}, g);
        title(rect, b[2] + ": " + b[1].toFixed(1) + "% (" + r.title + ")");
        text(g, LABEL + x(Math.min(b[1], 100)) + 4, y + k * barH + barH - 2, b[1].toFixed(1) + "%");
      });
    });
  }

  var draw = {"breakdown-chart": breakdown, "attribution-chart": breakdown, "critical-path-chart": criticalPath,
              "gpu-util-chart": gpuUtil};
  var drawn = 0;
  Array.prototype.forEach.call(document.querySelectorAll(".chart[data-chart]"), function (c) {
    var id = c.getAttribute("data-chart"), d = data.charts[id], fn = null;
    for (var cls in draw) if (c.classList.contains(cls)) fn = draw[cls];
    try {
      if (!fn || !d) throw new Error("no drawer or data for chart " + id);
      fn(c, d);
      drawn++;
    } catch (e) {
      window.rlsShowError("chart " + id + ": " + (e && e.message ? e.message : e));
    }
  });
  document.body.dataset.rendered = String(drawn);
})();
"""

"""The self-contained HTML report of a run (``rlscope-ray report DIR``).

``write_report(run_dir)`` reads ``<run_dir>/run.json`` and every
``<run_dir>/step_<N>/summary.json`` (docs/summary_format.md) and writes one
HTML file: inline CSS and JS, no network, no external fonts or images. The data
the charts need is embedded as JSON in a ``<script type="application/json">``
tag; the inline script draws the charts as SVG. Everything else (overview,
tables, warnings) is plain HTML, so the numbers are readable with JavaScript
off.

Summaries only ever gain keys, and older runs or steps without GPU records or
sub-tasks lack whole sections: any missing or malformed section renders as
"none"; nothing in the data makes this package raise. Every string taken from
the data (process labels come from user programs) is escaped.

Layout: ``model.py`` reads the files into the page model (``page.py``: what the page
shows, as text and chart data), ``render.py`` renders it with the Jinja2
templates in ``templates/`` (autoescaping on) and inlines ``static/``:
``report.css``, ``show_errors.js`` (first, in the head) and ``report.js``
(draws the charts).

Page contract (used by tests/test_report.py and by scripts and links): each
chart container has ``class="chart <kind>"`` with kind one of
``breakdown-chart``, ``attribution-chart``, ``critical-path-chart``,
``gpu-util-chart``, ``timeline-chart``, ``trend-chart``; when the script is
done, ``document.body.dataset.rendered`` holds the number of charts drawn;
script errors and unhandled rejections are appended to ``<pre id="errors">``.
Each written step's timeline picture is in ``<section id="timeline-step-N">``:
an SVG with one ``<g class="lane" data-process="LABEL">`` per process (up to
64; past that, ``class="lane aggregate"`` lanes merge the rest per node and a
``p.aggregated`` note says so), ``class="gpu-lane"`` lanes for GPU busy time,
and per range a ``rect.box``. The steps-over-time chart is in
``<section id="trend">``: per written step a ``<g class="trend-step"
data-step="N">`` holding its ``circle.point`` marks (raw, corrected).
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

from .model import ReportError, load, loss_line

__all__ = ["ReportError", "write_report", "render_report"]


def render_report(run_dir: Union[str, Path]) -> str:
    """The report page for run_dir as a string. Raises ReportError when run_dir
    is not a directory or holds neither run.json nor any step_<N> directory."""
    # Jinja2 is imported on the first render: loss_line, which shutdown
    # prints, needs only the model.
    from .render import render

    return render(load(Path(run_dir)))


def write_report(run_dir: Union[str, Path], out: Union[str, Path, None] = None) -> Path:
    """Write the report of run_dir to out (default <run_dir>/report.html) and
    return its path. Raises ReportError (see render_report) or OSError when the
    file cannot be written."""
    page = render_report(Path(run_dir))
    path = Path(out) if out is not None else Path(run_dir) / "report.html"
    path.write_text(page, encoding="utf-8")
    return path

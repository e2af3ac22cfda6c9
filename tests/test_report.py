"""The HTML report (`rlscope-ray report DIR`), rendered by a real headless
Chromium: the page's own script draws the charts, and what we check is the DOM
after it ran, the page's error element and Chromium's console log.

Console detection: Chromium (156 on Debian 12) logs every page console message
as `INFO:CONSOLE:<line>] "<message>", source: ...` whatever its level, so
console.error cannot be told from console.log there; uncaught exceptions read
`"Uncaught ..."`. The report script writes nothing to the console, so any
CONSOLE line is a failure. test_error_detectors_catch_a_deliberate_error
proves the detectors fire.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from conftest import ROOT

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed; scripts/install_deps.sh installs it")
ARTIFACTS = ROOT / "build" / "test-artifacts"
SEGMENT_KINDS = ("cpu_only", "gpu_only", "cpu_gpu", "idle", "overhead")
CHART_CLASSES = ("breakdown-chart", "attribution-chart", "critical-path-chart", "gpu-util-chart")
# Outside the step's parts: its timeline (section timeline-step-N) and the run's trend (section trend).
PICTURE_CLASSES = ("timeline-chart", "trend-chart")
CATEGORY_KINDS = ("cat-python", "cat-backend", "cat-cuda_api", "cat-simulator", "cat-other", "cat-gpu")
# summary key -> (part of the step section, chart class or None for a table-only part);
# "attribution" is the breakdown rows' attribution (present when a row has one).
PARTS = {"breakdown": ("part-breakdown", "breakdown-chart"),
         "attribution": ("part-attribution", "attribution-chart"),
         "critical_path": ("part-critical-path", "critical-path-chart"),
         "stragglers": ("part-stragglers", None),
         "gpu_utilization": ("part-gpu", "gpu-util-chart")}
HOSTILE_LABEL = 'evil <img src=x onerror="throw 1"></script><script>throw new Error("injected")</script>'


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlscope_ray.cli", *args], capture_output=True, text=True,
                          timeout=60)


class Element:
    def __init__(self, tag: str, attrs: Dict[str, str], section: Optional[str], part: Optional[str]):
        self.tag, self.attrs, self.section, self.part = tag, attrs, section, part
        self.classes = set(attrs.get("class", "").split())
        self.text = ""


class Page(HTMLParser):
    """The DOM Chromium dumped, flattened: every element with the step section
    and part it sits in, and its own text (direct text children only)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, dom: str):
        super().__init__(convert_charrefs=True)
        self.elements: List[Element] = []
        self._stack: List[Element] = []
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        parent = self._stack[-1] if self._stack else None
        section = a["id"] if tag == "section" and "id" in a else (parent.section if parent else None)
        part = next((c for c in a.get("class", "").split() if c.startswith("part-")),
                    parent.part if parent else None)
        e = Element(tag, a, section, part)
        self.elements.append(e)
        if tag not in self.VOID:
            self._stack.append(e)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self._stack.pop()

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i].tag == tag:
                del self._stack[i:]
                return

    def handle_data(self, data):
        if self._stack:
            self._stack[-1].text += data

    def find(self, tag: Optional[str] = None, cls: Optional[str] = None, **where) -> List[Element]:
        return [e for e in self.elements if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
                and all(getattr(e, k) == v for k, v in where.items())]

    def by_id(self, id_: str) -> Element:
        (e,) = [e for e in self.elements if e.attrs.get("id") == id_]
        return e

    @property
    def rendered(self) -> Optional[str]:
        (body,) = self.find("body")
        return body.attrs.get("data-rendered")


def _chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp}",
                           "--virtual-time-budget=2000", *extra, url], capture_output=True, text=True, timeout=60)


def render(html_path: Path, tmp: Path) -> Tuple[Page, List[str]]:
    """The DOM after the page's scripts ran, and Chromium's console lines."""
    r = _chromium(html_path.resolve().as_uri(), tmp / "chromium-profile", "--enable-logging=stderr", "--v=0",
                  "--dump-dom")
    assert r.returncode == 0 and "<body" in r.stdout, f"chromium failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return Page(r.stdout), console_lines(r.stderr)


def console_lines(stderr: str) -> List[str]:
    """Every page console message or uncaught exception Chromium logged."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def assert_clean(page: Page, console: List[str]) -> None:
    errors = page.by_id("errors").text.strip()
    assert errors == "", f"the page reported errors:\n{errors}"
    assert console == [], "chromium console:\n" + "\n".join(console)


# --- a summary with every section -------------------------------------------

def _proc(label: str, role: str, rank: Optional[int], gpu: int) -> dict:
    return {"session": f"s-{label[:4]}", "label": label, "host": "vm", "pid": 100 + (rank or 0), "rank": rank,
            "role": role, "name": "app.py", "selected": True, "labels": {}, "spans": 12, "instants": 1,
            "gpu_records": gpu, "events_received_total": 40, "dropped_total": 0, "unmatched_total": 0,
            "late": False, "clock": {"aligned": True, "offset_ns": 10, "drift_ppm": 0.1, "bound_ns": 500,
                                     "probes": 8, "bursts": 2},
            "overhead": {"events": 13, "subtracted_ms": 0.05, "waits_ms": 0.04, "costs_ns": {"push": 8.9, "pop": 8.7}},
            "memory": {"rss_peak_mb": 512.5 + (rank or 0), "rss_begin_mb": 500.0, "rss_end_mb": 510.0,
                       "rss_change_mb": 10.0, "samples": 4,
                       "gpu": [{"device": 0, "allocated_peak_mb": 2048.0, "allocated_begin_mb": 1024.0,
                                "allocated_end_mb": 1536.0, "allocated_change_mb": 512.0}] if gpu else []}}


def full_summary(step: int) -> dict:
    """A summary with every section of docs/summary_format.md filled in."""
    workers = {0: "node 10.0.0.1 / PPOWorker (rank 0) / pid 100", 1: HOSTILE_LABEL}
    breakdown = []
    for subtask, window in (("generate", 40.0), ("update_actor", 25.0)):
        for rank, label in workers.items():
            cpu, gpu, both = 0.3 * window, 0.2 * window + rank, 0.25 * window
            # Where the CPU time went: 60 % Python, the rest spread, every category non-zero.
            cats = {"python": 0.6, "backend": 0.2, "cuda_api": 0.1, "simulator": 0.05, "other": 0.05}
            cpu_ms = cpu + both
            attribution = {"cpu_ms": cpu_ms + 0.1, "samples": 40, "profiler_ms": 0.1, "gpu_ms": gpu + both,
                           "idle_ms": window - cpu - gpu - both, "cuda_api_wall_ms": 3.0, "max_sample_ms": 1.0,
                           "shares": cats, "error_ms": {c: 0.5 for c in list(cats) + ["profiler"]},
                           **{f"{c}_ms": share * cpu_ms for c, share in cats.items()}}
            breakdown.append({"subtask": subtask, "occurrences": 1, "rank": rank, "process": label,
                              "session": f"s{rank}", "role": "worker", "window_ms": window, "cpu_only_ms": cpu,
                              "gpu_only_ms": gpu, "cpu_gpu_ms": both, "idle_ms": window - cpu - gpu - both,
                              "overhead_ms": 0.4 + rank, "attribution": attribution})
    return {
        "step": step, "begin_ns": 1_000_000, "end_ns": 81_000_000, "duration_ms": 80.0, "reason": "complete",
        "processes": [_proc("node 10.0.0.1 / driver.py (controller) / pid 99", "controller", None, 0)]
                     + [_proc(label, "worker", rank, 300) for rank, label in workers.items()],
        "late_processes": [], "not_profiled": [{"class_name": "PPOWorker", "pid": "777"}],
        "clock_warnings": ["rank 1: clock bound 2.1 ms is wider than the 1 ms tolerance"],
        "causality": {"checked": 120, "violations": 2, "max_violation_ns": 1500},
        "totals": {"processes": 3, "spans": 36, "instants": 3, "dropped": 0},
        "correction": {"enabled": True, "scale": 1.0, "duration_ms": 79.2, "subtracted_ms": 0.8,
                       "uncertainty_ms": 0.05,
                       "notes": ["rank 0: push costs drifted during the step: 20 ns in its first half, 41 ns in "
                                 "its second"],
                       "waits": [{"subtask": "generate", "linked": {"ray": 2, "key": 0},
                                  "unlinked": {"ray": 0, "key": 1}, "removed_ms": 0.3}]},
        "breakdown": breakdown,
        "gpu_utilization": [{"process": label, "rank": rank, "session": f"s{rank}", "gpu_busy_ms": 30.0 + rank,
                             "gpu_busy_pct": 38.0 + rank, "naive_util_pct": 90.0, "sample_ms": 10.0}
                            for rank, label in workers.items()],
        "critical_path": {"step_ms": 79.2, "controller_ms": 9.2, "segments": [
            {"subtask": "generate", "occurrence": 0, "begin_ms": 2.0, "duration_ms": 40.0, "critical_rank": 1,
             "critical_process": HOSTILE_LABEL, "critical_ms": 39.0, "median_ms": 30.0},
            {"subtask": "compute_advantage", "occurrence": 0, "begin_ms": 42.0, "duration_ms": 3.0,
             "critical_rank": None, "critical_process": None, "critical_ms": None, "median_ms": None},
            {"subtask": "update_actor", "occurrence": 0, "begin_ms": 45.0, "duration_ms": 25.0,
             "critical_rank": 0, "critical_process": workers[0], "critical_ms": 25.0, "median_ms": 24.0}]},
        "timeline": {"subtasks": ["generate", "compute_advantage", "update_actor"], "max_boxes_per_lane": 256,
                     "lanes": [
            {"rank": None, "process": "node 10.0.0.1 / driver.py (controller) / pid 99", "role": "controller",
             "node": "n1", "gpu": False, "omitted": 0,
             "boxes": [[2.0, 40.0, "generate", 0, 0], [42.0, 3.0, "compute_advantage", 1, 0],
                       [45.0, 25.0, "update_actor", 2, 0]]},
            {"rank": 0, "process": workers[0], "role": "worker", "node": "n1", "gpu": False, "omitted": 0,
             "boxes": [[3.0, 30.0, "generate_sequences", 0, 0], [46.0, 24.0, "update_actor", 2, 1]]},
            {"rank": 0, "process": workers[0], "role": "worker", "node": "n1", "gpu": True, "omitted": 0,
             "boxes": [[5.0, 10.0, "GPU busy", 0, 0]]},
            {"rank": 1, "process": HOSTILE_LABEL, "role": "worker", "node": "n2", "gpu": False, "omitted": 3,
             "boxes": [[3.0, 39.0, "generate_sequences", 0, 1], [4.0, 5.0, "prefetch", 0, 0],
                       [46.0, 20.0, "update_actor", 2, 0]]}]},
        "stragglers": [
            {"subtask": "generate", "ranks": 2, "slowest_rank": 1, "slowest_process": HOSTILE_LABEL,
             "slowest_ms": 39.0, "median_ms": 26.0, "ratio": 1.5, "fastest_ms": 13.0},
            {"subtask": "update_actor", "ranks": 2, "slowest_rank": 0, "slowest_process": workers[0],
             "slowest_ms": 25.0, "median_ms": 24.0, "ratio": 1.04, "fastest_ms": 23.0}],
    }


def make_run_dir(tmp: Path) -> Path:
    """Step 1: every section. Step 2: an older summary without any analysis
    section. Step 3: a summary.json cut short (unreadable)."""
    run = tmp / "run"
    for n in (1, 2, 3):
        (run / f"step_{n}").mkdir(parents=True)
    (run / "step_1" / "summary.json").write_text(json.dumps(full_summary(1)))
    old = {k: v for k, v in full_summary(2).items()
           if k in ("step", "begin_ns", "end_ns", "duration_ms", "reason", "processes", "late_processes",
                    "not_profiled", "totals")}
    (run / "step_2" / "summary.json").write_text(json.dumps(old))
    (run / "step_3" / "summary.json").write_text('{"step": 3, "dura')
    (run / "run.json").write_text(json.dumps({
        "format": "rlscope-ray run v1", "final": True, "config_yaml": "steps: [1, 2, 3]\n",
        "processes": [{"label": HOSTILE_LABEL, "role": "worker", "rank": 1, "selected": True,
                       "events_received": 99, "dropped": 0, "said_bye": True}],
        "steps_written": [1, 2, 3], "not_profiled": [], "steps_seen": 3, "late_events": 4, "decode_errors": 0,
        "last_decode_error": ""}))
    return run


@pytest.fixture
def full_report(tmp_path) -> Path:
    run = make_run_dir(tmp_path)
    r = _cli("report", str(run))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(run / "report.html")
    return run / "report.html"


# --- tests ------------------------------------------------------------------

@needs_chromium
def test_report_with_every_section_renders_all_charts(full_report, tmp_path):
    page, console = render(full_report, tmp_path)
    assert_clean(page, console)

    charts = {c: page.find(cls=c) for c in CHART_CLASSES}
    assert {c: len(v) for c, v in charts.items()} == {c: 1 for c in CHART_CLASSES}
    assert all(e.section == "step-1" and "chart" in e.classes for v in charts.values() for e in v)
    assert page.rendered == "6"  # the four, the step's timeline and the trend

    # The timeline picture: a lane per process, a GPU lane, a box per range,
    # coloured by sub-task, the critical one outlined, the band above.
    assert len(page.find(cls="timeline-chart", section="timeline-step-1")) == 1
    lanes = page.find("g", "lane", section="timeline-step-1")
    assert [e.attrs["data-process"] for e in lanes] == [
        "node 10.0.0.1 / driver.py (controller) / pid 99", "node 10.0.0.1 / PPOWorker (rank 0) / pid 100",
        HOSTILE_LABEL]
    assert len(page.find("g", "gpu-lane", section="timeline-step-1")) == 1
    boxes = page.find("rect", "box", section="timeline-step-1")
    assert len(boxes) == 3 + 3 + 2 + 1 + 3  # the band's 3 segments, then the lanes' boxes
    assert len(page.find("rect", "critical", section="timeline-step-1")) == 2
    assert len(page.find("rect", "seg-sub-1", section="timeline-step-1")) == 2  # compute_advantage: band, controller
    titles = [e.text for e in page.find("title", section="timeline-step-1")]
    assert any(t.startswith("update_actor (in update_actor): begins at 46.000 ms, lasts 24.000 ms; on the critical "
                            "path") for t in titles), titles
    assert any("RSS peak 512.5 MiB (+10.0); GPU 0 allocated peak 2,048.0 MiB (+512.0)" in t for t in titles), titles
    assert any(e.text.startswith("3 shorter boxes are not drawn") for e in page.find("p", "omitted"))
    assert [e.text for e in page.find("text", "node-label", section="timeline-step-1")] == ["node n1", "node n2"]
    # Step 2's older summary has no timeline: its section says so, with no chart.
    assert page.find("p", "none", section="timeline-step-2") and not page.find("svg", section="timeline-step-2")
    # The trend: a step's point per readable summary (steps 1 and 2), raw and corrected where known.
    steps = page.find("g", "trend-step", section="trend")
    assert [e.attrs["data-step"] for e in steps] == ["1", "2"]
    assert len(page.find("circle", "raw", section="trend")) == 2
    assert len(page.find("circle", "corrected", section="trend")) == 1  # step 2's summary has no correction
    trend_cells = [e.text for e in page.find("td", section="trend")]
    assert trend_cells[:3] == ["1", "80.000", "79.200"] and "513.500" in trend_cells, trend_cells
    # Memory in the step's process table.
    cells = [e.text for e in page.find("td", section="step-1", part="part-counts")]
    assert "512.500" in cells and "2,048.000" in cells, cells
    for kind in SEGMENT_KINDS:  # 2 sub-tasks x 2 ranks, every segment non-zero
        rects = page.find("rect", f"seg-{kind}", section="step-1", part="part-breakdown")
        assert len(rects) == 4, (kind, len(rects))
    for kind in CATEGORY_KINDS:  # the attribution's bars: every category of every row
        rects = page.find("rect", f"seg-{kind}", section="step-1", part="part-attribution")
        assert len(rects) == 4, (kind, len(rects))
    titles = [e.text for e in page.find("title", section="step-1", part="part-attribution")]
    assert any(t.startswith("Python: 13.200 ms") for t in titles), titles[:5]  # 60 % of generate's 22 ms of CPU
    assert any("60 % python" in t for t in titles), titles[:5]
    cells = [e.text for e in page.find("td", section="step-1", part="part-attribution")]
    assert "13.200 (60 %) ± 0.500" in cells, cells[:20]  # update_actor, rank 0: 60 % of 22 ms
    assert len(page.find("rect", "cp-seg")) == 2 and len(page.find("rect", "cp-nocrit")) == 1
    assert len(page.find("rect", "gpu-busy")) == 2 and len(page.find("rect", "gpu-naive")) == 2
    # Hover values: every segment carries its value in ms in an SVG <title>.
    titles = [e.text for e in page.find("title", section="step-1", part="part-breakdown")]
    assert any(t.startswith("profiler overhead (removed): 1.400 ms") for t in titles), titles[:5]
    labels = [e.text for e in page.find("text", part="part-critical-path")]
    assert "generate \u2192 rank 1" in labels and "compute_advantage \u2192 no worker" in labels, labels

    hot = page.find("tr", "hot", part="part-stragglers")
    assert len(hot) == 1 and "generate" in [e.text for e in page.find("td", part="part-stragglers")]
    warn = page.find("ul", "clock_warnings", section="step-1")
    assert warn and "clock bound 2.1 ms" in page.find("li", section="step-1", part="part-counts")[0].text
    # The correction: its uncertainty, its notes, which waits were linked.
    facts = [e.text for e in page.find("dd", section="step-1", part="part-counts")]
    assert any("corrected step 79.200 ms \u00b1 0.050 ms" in f for f in facts), facts
    assert page.find("ul", "correction_notes", section="step-1")
    assert any("push costs drifted" in e.text for e in page.find("li", section="step-1", part="part-counts"))
    waits = page.find("table", "waits-table", section="step-1")
    assert len(waits) == 1
    cells = [e.text for e in page.find("td", section="step-1", part="part-counts")]
    assert cells[cells.index("generate"):cells.index("generate") + 6] == ["generate", "2", "0", "0", "1", "0.300"], cells

    # Step 2 (an older summary): every analysis section says none, no charts.
    for key, (part, chart) in PARTS.items():
        assert page.find("p", "none", section="step-2", part=part), key
    assert not [e for c in CHART_CLASSES for e in page.find(cls=c, section="step-2")]
    # Step 3 (unreadable summary) is listed, with the reason.
    assert any("unreadable" in e.text for e in page.find("p", "warn", section="step-3"))
    assert [e.attrs["href"] for e in page.find("a", section=None) if e.attrs.get("href", "").startswith("#")] \
        == ["#step-1", "#step-2", "#step-3"]

    # Labels from user programs stay text: no injected element, the label readable.
    assert not page.find("img")
    assert any(HOSTILE_LABEL in e.text for e in page.find("td"))

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTIFACTS / "report.png"
    png.unlink(missing_ok=True)
    r = _chromium(full_report.resolve().as_uri(), tmp_path / "chromium-shot", f"--screenshot={png}",
                  "--window-size=1400,2400", "--hide-scrollbars")
    assert r.returncode == 0, r.stderr[-3000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000, len(data)


@needs_chromium
def test_a_step_of_more_processes_than_the_lane_limit_draws_the_rest_merged_per_node_and_says_so(tmp_path):
    """70 workers on two nodes: the controller and the first 63 workers get a
    lane each (64), the other 7 are merged into one lane per node they are
    on, with their boxes, and a note says how many and into how many lanes."""
    from rlscope_ray.report.model import MAX_LANES

    summary = full_summary(1)
    lanes = [summary["timeline"]["lanes"][0]]  # the controller's
    for r in range(70):
        lanes.append({"rank": r, "process": f"node {r % 2} / W (rank {r}) / pid {r}", "role": "worker",
                      "node": f"n{r % 2}", "gpu": False, "omitted": 0,
                      "boxes": [[1.0 + r * 0.1, 5.0, "generate_sequences", 0, 0]]})
    summary["timeline"]["lanes"] = sorted(lanes, key=lambda lane: (lane["rank"] is not None, lane["node"]))
    run = tmp_path / "run"
    (run / "step_1").mkdir(parents=True)
    (run / "step_1" / "summary.json").write_text(json.dumps(summary))
    r = _cli("report", str(run))
    assert r.returncode == 0, r.stderr
    page, console = render(run / "report.html", tmp_path)
    assert_clean(page, console)
    own = [e for e in page.find("g", "lane", section="timeline-step-1") if "aggregate" not in e.classes]
    merged = page.find("g", "aggregate", section="timeline-step-1")
    assert len(own) == MAX_LANES == 64
    assert len(merged) == 1  # the last 7 workers are all on node n1 (sorted by node)
    labels = [e.text for e in page.find("text", section="timeline-step-1") if "aggregated" in e.text]
    assert labels == ["node n1: more (7 aggregated)"], labels
    boxes = [e for e in page.find("rect", "box", section="timeline-step-1")]
    assert len(boxes) == 3 + 3 + 70  # the band, the controller's windows, every worker's box (merged ones too)
    (note,) = page.find("p", "aggregated", section="timeline-step-1")
    assert note.text == "7 processes past the first 64 lanes are drawn aggregated, in 1 lane by node."


@needs_chromium
def test_error_detectors_catch_a_deliberate_error(full_report, tmp_path):
    """The checks above can fail: a broken chart and a thrown error show up in
    the page's error element, the counter and Chromium's console log."""
    page_html = full_report.read_text()
    assert '"step1-gpu":' in page_html
    broken = tmp_path / "broken.html"
    broken.write_text(page_html.replace('"step1-gpu":', '"step1-gpu-renamed":').replace(
        "</body>", '<script>console.error("deliberate console error");'
                   'throw new Error("deliberate failure");</script></body>'))
    page, console = render(broken, tmp_path)
    errors = page.by_id("errors").text
    assert "chart step1-gpu: no drawer or data" in errors and "deliberate failure" in errors, errors
    assert page.rendered == "5"  # of the six
    assert any("Uncaught" in line and "deliberate failure" in line for line in console), console
    assert any("deliberate console error" in line for line in console), console
    with pytest.raises(AssertionError, match="the page reported errors"):
        assert_clean(page, console)


@needs_chromium
def test_report_of_a_real_run(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory(grace_ms=500)
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "2", "--step-ms", "5"],
                   env=agg.env(role="controller"), check=True, timeout=60)
    log = agg.wait()
    run = json.loads((agg.out / "run.json").read_text())
    assert run["steps_written"] == [1, 2], log
    out = tmp_path / "elsewhere.html"
    r = _cli("report", str(agg.out), "--out", str(out))
    assert r.returncode == 0 and r.stdout.strip() == str(out), r.stderr
    page, console = render(out, tmp_path)
    assert_clean(page, console)

    expected_charts = 0
    for n in run["steps_written"]:
        summary = json.loads((agg.out / f"step_{n}" / "summary.json").read_text())
        section = f"step-{n}"
        assert page.find("section", section=section), section
        assert any("nvtx_app" in e.text for e in page.find("td", section=section, part="part-counts"))
        for key, (part, chart) in PARTS.items():
            if key == "attribution":
                present = any(r.get("attribution") for r in summary.get("breakdown", []))
            else:
                present = bool(summary.get(key)) and (key != "critical_path" or summary[key].get("segments"))
            if present and chart:
                assert len(page.find(cls=chart, section=section)) == 1, (section, key)
                expected_charts += 1
            elif not present:
                assert page.find("p", "none", section=section, part=part), (section, key)
        # Its timeline: a lane per process of the step.
        lanes = page.find("g", "lane", section=f"timeline-step-{n}")
        assert sorted(e.attrs["data-process"] for e in lanes) == sorted(p["label"] for p in summary["processes"])
        expected_charts += 1
    assert [e.attrs["data-step"] for e in page.find("g", "trend-step", section="trend")] == ["1", "2"]
    expected_charts += 1  # the trend
    assert page.rendered == str(expected_charts)


def test_missing_directory_is_a_one_line_error(tmp_path):
    r = _cli("report", "/nonexistent")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "rlscope-ray report: /nonexistent: no such directory"
    (tmp_path / "file").write_text("x")
    r = _cli("report", str(tmp_path / "file"))
    assert r.returncode == 2 and r.stderr.strip() == f"rlscope-ray report: {tmp_path / 'file'}: not a directory"
    r = _cli("report", str(tmp_path))  # a directory, but not an output directory
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert str(tmp_path) in r.stderr and "not an rlscope-ray output directory" in r.stderr


def test_the_loss_line_names_every_kind_of_loss_and_is_empty_without_one():
    from rlscope_ray.report import loss_line

    assert loss_line({"processes": [{"dropped": 0, "lost": False}], "late_events": 0}) == ""
    line = loss_line({
        "processes": [{"label": "a", "dropped": 5, "lost": False}, {"label": "w / pid 9", "dropped": 0, "lost": True}],
        "not_profiled": [{"pid": "3"}], "late_events": 2, "decode_errors": 1, "refused_frames": 4,
        "resume": {"resumes": 1}})
    for part in ("5 events dropped in 1 processes", "1 processes gone without a goodbye (w / pid 9)",
                 "1 expected processes never connected", "2 events arrived after", "1 frames were not",
                 "4 frames refused", "restarted 1 times"):
        assert part in line, (part, line)

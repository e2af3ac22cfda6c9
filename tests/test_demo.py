"""`make demo` in a reduced form: examples/verl/mini_ppo.py on a local two-node
Ray cluster, checked the way a user reads its output (run dir, Perfetto, summaries).

One run (3 steps, steps 2 and 3 captured, ranks 0 and 1 profiled) serves every test.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, Trace, clean_env

CAPTURED = [2, 3]
# The controller's sub-task ranges (verl's marked_timer names) and the worker method each dispatches.
SUBTASKS = [("gen", "generate_sequences"), ("reward", "compute_rm_score"), ("old_log_prob", "compute_log_prob"),
            ("ref", "compute_ref_log_prob"), ("values", "compute_values"), ("adv", None),
            ("update_critic", "update_critic"), ("update_actor", "update_actor")]


@pytest.fixture(scope="module")
def demo(build_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    env = clean_env("RAY_ADDRESS", "RANK")
    env["RLSCOPE_BUILD_DIR"] = str(build_dir)
    r = subprocess.run([sys.executable, str(ROOT / "examples/verl/mini_ppo.py"), "--steps", "3",
                        "--capture", ",".join(map(str, CAPTURED)), "--ranks", "0,1", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return out, r.stdout


def span(e: dict) -> tuple:
    return float(e["ts"]), float(e["ts"]) + float(e["dur"])


def inside(inner: dict, outer: dict) -> bool:
    (a0, a1), (b0, b1) = span(inner), span(outer)
    return b0 <= a0 and a1 <= b1


def test_only_the_captured_steps_are_written(demo):
    out, stdout = demo
    assert sorted(p.name for p in out.glob("step_*")) == [f"step_{n}" for n in CAPTURED]
    run = json.loads((out / "run.json").read_text())
    assert run["steps_written"] == CAPTURED
    for n in CAPTURED:
        assert (out / f"step_{n}" / "trace.json").is_file() and (out / f"step_{n}" / "summary.json").is_file()
    # The user is told where the output is and sees a summary per step.
    assert str(out) in stdout
    for n in CAPTURED:
        assert f"step {n}:" in stdout and str(out / f"step_{n}" / "trace.json") in stdout


@pytest.mark.parametrize("n", CAPTURED)
def test_profiled_ranks_are_there_on_both_nodes(demo, n):
    out, _ = demo
    trace = Trace(out / f"step_{n}" / "trace.json")
    trace.pid_of("(controller)")
    run = json.loads((out / "run.json").read_text())
    by_label = {p["label"]: p for p in run["processes"]}
    nodes = set()
    for rank in (0, 1):  # ranks 0 and 1 run on different nodes; the labels and run.json say which
        label = trace.process_names[trace.pid_of(f"PPOWorker (rank {rank})")]
        proc = by_label[label]
        assert proc["rank"] == rank and proc["role"] == "worker" and proc["labels"]["actor_class"] == "PPOWorker"
        node_id = proc["labels"]["node_id"]
        assert f"[{node_id[:8]}]" in label
        nodes.add(node_id)
    assert len(nodes) == 2, f"ranks 0 and 1 should be on two nodes: {nodes}"


@pytest.mark.parametrize("n", CAPTURED)
def test_unselected_ranks_are_not_in_the_trace(demo, n):
    out, _ = demo
    trace = Trace(out / f"step_{n}" / "trace.json")
    names = list(trace.process_names.values())
    for rank in (2, 3):  # loaded and running, but not selected by `ranks: [0, 1]`
        assert not [l for l in names if f"(rank {rank})" in l], f"rank {rank} is in the trace: {names}"


@pytest.mark.parametrize("n", CAPTURED)
def test_worker_methods_sit_inside_the_controller_ranges_that_asked_for_them(demo, n):
    out, _ = demo
    trace = Trace(out / f"step_{n}" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    (step,) = trace.slices(ctrl, "step")
    ranges = {}
    last_end = span(step)[0]
    for name, _ in SUBTASKS:  # verl's order, one range each, all inside the step
        (r,) = trace.slices(ctrl, name)
        assert inside(r, step), f"{name} is not inside the step slice"
        assert span(r)[0] >= last_end, f"{name} starts before the previous sub-task ended"
        last_end = span(r)[1]
        ranges[name] = r
    for rank in (0, 1):
        pid = trace.pid_of(f"PPOWorker (rank {rank})")
        for name, method in SUBTASKS:
            if method is None:
                continue
            (m,) = trace.slices(pid, method)
            assert inside(m, ranges[name]), f"rank {rank} {method} {span(m)} not inside {name} {span(ranges[name])}"
        # NVTX ranges inside the actor's method are captured and nested in it.
        (update,) = trace.slices(pid, "update_actor")
        for name in ("backward", "optimizer_step"):
            during = [e for e in trace.slices(pid, name) if inside(e, ranges["update_actor"])]
            assert len(during) == 2 and all(inside(e, update) for e in during), (name, during)  # 2 PPO epochs


@pytest.mark.parametrize("n", CAPTURED)
def test_summary_has_no_late_processes_and_no_drops(demo, n):
    out, _ = demo
    summary = json.loads((out / f"step_{n}" / "summary.json").read_text())
    assert summary["step"] == n and summary["duration_ms"] > 0
    assert summary["late_processes"] == []
    assert summary["totals"]["dropped"] == 0
    assert summary["not_profiled"] == []
    spans = {p["rank"]: p["spans"] for p in summary["processes"] if p["role"] == "worker"}
    assert spans.get(0, 0) > 0 and spans.get(1, 0) > 0


@pytest.mark.parametrize("n", CAPTURED)
def test_critical_path_names_the_worker_that_finished_last(demo, n):
    out, _ = demo
    summary = json.loads((out / f"step_{n}" / "summary.json").read_text())
    trace = Trace(out / f"step_{n}" / "trace.json")
    segments = {g["subtask"]: g for g in summary["critical_path"]["segments"]}
    assert list(segments) == [name for name, _ in SUBTASKS]
    for name, method in SUBTASKS:
        g = segments[name]
        if method is None:  # the controller computes advantages itself
            assert g["critical_rank"] is None, g
            continue
        # The rank whose dispatched method ended last (the trace is corrected, as the summary).
        ends = {rank: span(trace.slices(trace.pid_of(f"PPOWorker (rank {rank})"), method)[0])[1] for rank in (0, 1)}
        assert g["critical_rank"] == max(ends, key=ends.get), (name, ends, g)
        assert 0 < g["critical_ms"] <= g["duration_ms"]
    stragglers = {t["subtask"] for t in summary["stragglers"]}
    assert stragglers == {name for name, method in SUBTASKS if method}


@pytest.mark.parametrize("n", CAPTURED)
def test_ray_workers_and_the_driver_are_cpu_sampled_with_their_python_frames(demo, n):
    out, _ = demo
    summary = json.loads((out / f"step_{n}" / "summary.json").read_text())
    for p in summary["processes"]:
        # Ray workers import rlscope_ray (the plugin's setup hook), so their
        # Python frames are read; the driver is the controller.
        assert p["cpu_sampling"].startswith("on: "), (p["label"], p["cpu_sampling"])
        assert "python frames: CPython" in p["cpu_sampling"], (p["label"], p["cpu_sampling"])
    rows = [r for r in summary["breakdown"] if r["attribution"]]
    assert rows, summary["breakdown"]  # the workers' sampled methods have their attribution
    for r in rows:  # what there is adds up, and leaves the profiler's share out of the shares
        a = r["attribution"]
        parts = sum(a[f"{c}_ms"] for c in ("python", "backend", "cuda_api", "simulator", "other", "profiler"))
        assert parts == pytest.approx(a["cpu_ms"], abs=0.01), a
        assert sum(a["shares"].values()) == pytest.approx(1.0, abs=1e-4) or a["cpu_ms"] == a["profiler_ms"]


def test_unselected_ranks_send_zero_events(demo):
    out, _ = demo
    run = json.loads((out / "run.json").read_text())
    by_rank = {p["rank"]: p for p in run["processes"] if p["role"] == "worker"}
    for rank in (2, 3):  # Ray actors that connected (so they are counted) and recorded nothing
        assert by_rank[rank]["selected"] is False and by_rank[rank]["events_received"] == 0
    for rank in (0, 1):
        assert by_rank[rank]["selected"] is True and by_rank[rank]["events_received"] > 0


def test_discrete_captures_of_the_ray_demo(build_dir, tmp_path):
    """Discrete mode on real Ray actors: one capture per sub-task occurrence,
    each holding only that sub-task's events (the controller's range and the
    worker methods it dispatched)."""
    out = tmp_path / "out"
    env = clean_env("RAY_ADDRESS", "RANK")
    r = subprocess.run([sys.executable, str(ROOT / "examples/verl/mini_ppo.py"), "--steps", "2", "--capture", "2",
                        "--ranks", "0", "--subtasks", "gen,update_actor", "--discrete", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "step_2" / "summary.json").read_text())
    assert summary["captures"] == ["gen", "update_actor"]
    for name, method, other in (("gen", "generate_sequences", "update_actor"),
                                ("update_actor", "update_actor", "generate_sequences")):
        trace = Trace(out / "step_2" / name / "trace.json")
        ctrl = trace.pid_of("(controller)")
        (own,) = trace.slices(ctrl, name)
        worker = trace.pid_of("PPOWorker (rank 0)")
        (call,) = trace.slices(worker, method)
        assert inside(call, own)
        assert not trace.slices(worker, other)


def test_the_demo_on_three_nodes_through_a_relay(build_dir, tmp_path):
    """relays="on": a relay per host (one here: the three nodes share this
    machine), a Ray actor pinned to a node; every profiled worker's collector
    reaches the aggregator through it, the driver straight; the step is
    written with every rank and the relay is stopped with the session."""
    out = tmp_path / "out"
    env = clean_env("RAY_ADDRESS", "RANK")
    r = subprocess.run([sys.executable, str(ROOT / "examples/verl/mini_ppo.py"), "--steps", "2", "--capture", "2",
                        "--ranks", "all", "--nodes", "3", "--relays", "on", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rlscope: 1 relay(s), one per host" in r.stderr
    run = json.loads((out / "run.json").read_text())
    workers = [p for p in run["processes"] if p["role"] == "worker"]
    assert sorted(p["rank"] for p in workers) == [0, 1, 2, 3]
    assert all(p["via_relay"] for p in workers)
    assert [p["via_relay"] for p in run["processes"] if p["role"] == "controller"] == [False]
    assert run["steps_written"] == [2]
    summary = json.loads((out / "step_2" / "summary.json").read_text())
    assert sorted(p["rank"] for p in summary["processes"] if p["role"] == "worker") == [0, 1, 2, 3]
    nodes = {p["labels"].get("node_id") for p in workers}
    assert len(nodes) == 3  # ranks on all three nodes, one relay for the host


def test_the_demos_report_shows_a_timeline_per_step_the_trend_and_memory(demo, tmp_path):
    """The report the demo wrote, rendered by headless Chromium: no script
    error; each captured step's timeline has a lane per process of the step
    and a box per sub-task range (the controller's sub-tasks, the workers'
    methods they dispatched); the trend a point per written step; memory
    figures present and positive for every process."""
    from test_report import CHROMIUM, assert_clean, render

    if CHROMIUM is None:
        pytest.skip("chromium is not installed; scripts/install_deps.sh installs it")
    out, _ = demo
    page, console = render(out / "report.html", tmp_path)
    assert_clean(page, console)
    for n in CAPTURED:
        summary = json.loads((out / f"step_{n}" / "summary.json").read_text())
        section = f"timeline-step-{n}"
        lanes = {e.attrs["data-process"]: e for e in page.find("g", "lane", section=section)}
        assert sorted(lanes) == sorted(p["label"] for p in summary["processes"]), section
        trace = Trace(out / f"step_{n}" / "trace.json")
        titles = [e.text for e in page.find("title", section=section)]
        for label in lanes:
            pid = trace.pid_of(label)
            for controller_name, worker_name in SUBTASKS:
                name = controller_name if "(controller)" in label else worker_name
                if name is None:
                    continue
                spans = trace.slices(pid, name)
                drawn = [t for t in titles if t.startswith(f"{name} (in ") and f"\u2014 {label}" in t]
                assert len(drawn) == len(spans) >= 1, (n, label, name, len(drawn), len(spans))
        for p in summary["processes"]:
            assert p["memory"]["rss_peak_mb"] > 0 and p["memory"]["rss_begin_mb"] > 0, p["label"]
    steps = page.find("g", "trend-step", section="trend")
    assert [e.attrs["data-step"] for e in steps] == [str(n) for n in CAPTURED]
    assert len(page.find("circle", "raw", section="trend")) == len(CAPTURED)

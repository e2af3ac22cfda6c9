"""Capture control with real processes: which steps, which ranks, which
sub-tasks, discrete captures and each capture trigger."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from conftest import ROOT, Trace

EVENTS_PER_WORKER_ITERATION = 7  # nvtx_worker.py: 2 push/pop pairs, a mark, a start/end pair


def _controller(agg, tmp_path, *args, config=None, rank=None):
    report = tmp_path / "controller.json"
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/step_controller.py"), "--report", str(report), *args],
                       env=agg.env(role="controller", config=config), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(report.read_text())


def _start_worker(agg, tmp_path, config, rank=0, duration=30.0):
    ready = tmp_path / f"worker{rank}.ready"
    report = tmp_path / f"worker{rank}.json"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", str(duration),
                             "--report", str(report), "--ready", str(ready)],
                            env=agg.env(role="worker", rank=rank, config=config))
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    return proc, report


def _run_json(agg):
    return json.loads((agg.out / "run.json").read_text())


def test_workers_record_only_in_the_windows_of_selected_steps(aggregator_factory, tmp_path):
    config = "{steps: [3]}"
    agg = aggregator_factory(config="steps: [3]\n")
    worker, worker_report = _start_worker(agg, tmp_path, config, duration=2.6)
    time.sleep(0.2)  # the worker runs before the first step too
    _controller(agg, tmp_path, "--steps", "5", "--step-ms", "300", "--gap-ms", "100", config=config)
    assert worker.wait(timeout=30) == 0
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_3"], log
    iterations = json.loads(worker_report.read_text())["iterations"]
    (w,) = [p for p in _run_json(agg)["processes"] if p["role"] == "worker"]
    whole_run = EVENTS_PER_WORKER_ITERATION * iterations
    # Armed from the beginning of step 2 to the end of step 3 (+ slack): ~0.72 s of ~2.6 s.
    assert 0 < w["events_received"] <= 0.45 * whole_run, (w["events_received"], whole_run)
    trace = Trace(agg.out / "step_3" / "trace.json")
    wpid = trace.pid_of("(worker, rank 0)")
    iters = trace.slices(wpid, "py_iter")
    (step,) = trace.slices(trace.pid_of("(controller)"), "step")
    # Nothing at the step's start was lost to arming latency: the worker's
    # first iteration begins with the step (clipped to it), or within one
    # iteration (~10 ms) of it.
    first = min(iters, key=lambda e: float(e["ts"]))
    assert float(first["ts"]) - float(step["ts"]) <= 12000, (first, step)
    covered = sum(float(e["dur"]) for e in iters)
    assert covered >= 0.75 * float(step["dur"]), (covered, step["dur"])


def test_range_opened_just_before_a_selected_step_is_clipped_not_lost(aggregator_factory, tmp_path):
    config = "{steps: [3]}"
    agg = aggregator_factory(config="steps: [3]\n")
    _controller(agg, tmp_path, "--steps", "4", "--step-ms", "30", "--gap-ms", "20", "--prep-before", "3",
                config=config)
    agg.wait()
    trace = Trace(agg.out / "step_3" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    (step,) = trace.slices(ctrl, "step")
    (prep,) = trace.slices(ctrl, "prep")  # once: neither lost nor duplicated
    assert prep["args"]["clipped_begin"] is True
    assert float(prep["ts"]) == float(step["ts"])
    assert _run_json(agg)["processes"][0]["unmatched"] == 0


def test_subtask_filter_keeps_only_those_intervals(aggregator_factory, tmp_path):
    agg = aggregator_factory(config="steps: [2]\nsubtasks: [update_actor]\n")
    worker, _ = _start_worker(agg, tmp_path, None, duration=1.2)
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "200", "--gap-ms", "50", "--subtasks", "gen,update_actor")
    assert worker.wait(timeout=30) == 0
    agg.wait()
    trace = Trace(agg.out / "step_2" / "trace.json")
    cpid = trace.pid_of("(controller)")
    (upd,) = trace.slices(cpid, "update_actor")
    u0, u1 = float(upd["ts"]), float(upd["ts"]) + float(upd["dur"])
    assert not trace.slices(cpid, "gen")
    assert not trace.instants(cpid, "before_subtasks")  # outside update_actor
    wpid = trace.pid_of("(worker")
    wslices = trace.slices(wpid)
    assert wslices
    for e in wslices:  # every worker slice lies within the sub-task (clipped to it)
        assert u0 - 0.001 <= float(e["ts"]) and float(e["ts"]) + float(e["dur"]) <= u1 + 0.001


def test_discrete_mode_writes_one_capture_per_occurrence(aggregator_factory, tmp_path):
    agg = aggregator_factory(config="steps: [2]\ndiscrete: true\nsubtasks: [gen, update_actor]\n")
    worker, _ = _start_worker(agg, tmp_path, None, duration=1.5)
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "240", "--gap-ms", "50",
                "--subtasks", "gen,update_actor,update_actor")
    assert worker.wait(timeout=30) == 0
    agg.wait()
    step_dir = agg.out / "step_2"
    summary = json.loads((step_dir / "summary.json").read_text())
    assert summary["captures"] == ["gen", "update_actor", "update_actor_2"]
    assert not (step_dir / "trace.json").exists()
    bounds = {}
    for capture in summary["captures"]:
        trace = Trace(step_dir / capture / "trace.json")
        assert trace.data["otherData"]["capture"] == capture
        c0, c1 = trace.data["otherData"]["begin_ns"] / 1000, trace.data["otherData"]["end_ns"] / 1000
        bounds[capture] = (c0, c1)
        cpid = trace.pid_of("(controller)")
        name = capture.split("_2")[0]
        (own,) = trace.slices(cpid, name)  # exactly this occurrence of the sub-task
        assert abs(float(own["ts"]) - c0) < 0.002
        others = {"gen", "update_actor"} - {name}
        assert not any(trace.slices(cpid, o) for o in others)
        for e in trace.slices(trace.pid_of("(worker")):  # only this occurrence's events
            assert c0 - 0.001 <= float(e["ts"]) and float(e["ts"]) + float(e["dur"]) <= c1 + 0.001
    assert bounds["gen"][1] <= bounds["update_actor"][0] <= bounds["update_actor"][1] <= bounds["update_actor_2"][0]


def test_nvtx_range_trigger_opens_and_closes_the_capture(aggregator_factory, tmp_path):
    agg = aggregator_factory()
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "30", "--gap-ms", "10", "--trigger-range", "2",
                config="{capture_range: 'nvtx:capture'}")
    agg.wait()
    recorded = {n: {e["name"] for e in Trace(agg.out / f"step_{n}" / "trace.json").events if e["ph"] in "Xi"}
                for n in (1, 2, 3)}
    # The controller's step ranges are always recorded (they number the
    # steps); everything else only inside the "capture" range.
    assert recorded == {1: {"step"}, 2: {"step", "capture", "gen", "update_actor"}, 3: {"step"}}
    run = _run_json(agg)
    assert run["processes"][0]["events_received"] == 3 * 2 + 3 * 2  # steps; capture, gen, update_actor


def test_api_trigger_records_between_start_and_stop(aggregator_factory, tmp_path):
    agg = aggregator_factory()
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "30", "--gap-ms", "10", "--api-window", "2",
                config="{capture_range: api}")
    agg.wait()
    names = {n: {e["name"] for e in Trace(agg.out / f"step_{n}" / "trace.json").events if e["ph"] in "Xi"}
             for n in (1, 2, 3)}
    assert names == {1: {"step"}, 2: {"step", "before_subtasks", "gen", "update_actor"}, 3: {"step"}}
    run = _run_json(agg)
    # The steps' ranges, and gen, update_actor and a mark between start() and stop().
    assert run["processes"][0]["events_received"] == 3 * 2 + 2 * 2 + 1


def test_ranges_keep_their_pairs_when_the_capture_opens_or_closes_inside_them(aggregator_factory, tmp_path):
    """A range open when the capture closes still gets its end; a range opened
    before the capture opened is not recorded, and neither is its end (which
    must not be taken for the end of another range)."""
    agg = aggregator_factory()
    script = (
        "import rlscope_ray, time, threading\n"
        "with rlscope_ray.step(1):\n"
        "    rlscope_ray.start()\n"
        "    with rlscope_ray.range('A'):\n"
        "        time.sleep(0.02)\n"
        "        rlscope_ray.stop()\n"
        "        time.sleep(0.01)\n"
        "    with rlscope_ray.range('X'):\n"
        "        rlscope_ray.start()\n"
        "        with rlscope_ray.range('B'):\n"
        "            time.sleep(0.005)\n"
        "    h = rlscope_ray._native.range_start('C')\n"   # started while capturing...
        "    rlscope_ray.stop()\n"
        "    t = threading.Thread(target=lambda: (time.sleep(0.005), rlscope_ray._native.range_end(h)))\n"
        "    t.start(); t.join()\n")                        # ...ended on another thread after stop()
    r = subprocess.run([sys.executable, "-c", script], env=agg.env(role="controller", inject=False,
                                                                   config="{capture_range: api}"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    agg.wait()
    trace = Trace(agg.out / "step_1" / "trace.json")
    cpid = trace.pid_of("(controller)")
    (a,) = trace.slices(cpid, "A")
    assert float(a["dur"]) >= 28000 and not a["args"].get("open")  # its end came after stop()
    (b,) = trace.slices(cpid, "B")
    assert 4000 <= float(b["dur"]) <= 15000
    assert not trace.slices(cpid, "X")
    (c,) = trace.asyncs(cpid, "C")
    assert c["dur"] >= 4000 and c["b"]["args"]["end_tid"] != c["b"]["tid"]
    assert _run_json(agg)["processes"][0]["unmatched"] == 0

"""Capture control with real processes: which steps, which ranks, which
sub-tasks, discrete captures and each capture trigger."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from conftest import ROOT, Trace

EVENTS_PER_WORKER_ITERATION = 7  # nvtx_worker.py: 2 push/pop pairs, a mark, a start/end pair


def _controller(agg, tmp_path, *args, config=None, rank=None):
    report = tmp_path / "controller.json"
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/step_controller.py"), "--report", str(report), *args],
                       env=agg.env(role="controller", config=config), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(report.read_text())


class Worker:
    """tests/apps/nvtx_worker.py, running until stop(). `armed` is the file it
    creates once its collector records: a controller started with
    --wait-before N <armed> begins step N only then, so what the worker
    records in that step does not depend on how fast the window's broadcast
    travelled on a busy machine (make bench times that)."""

    def __init__(self, agg, tmp_path, config, rank=0):
        self.ready = tmp_path / f"worker{rank}.ready"
        self.armed = tmp_path / f"worker{rank}.armed"
        self.report = tmp_path / f"worker{rank}.json"
        self.stop_file = tmp_path / f"worker{rank}.stop"
        self.stderr = tmp_path / f"worker{rank}.err"
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "120", "--stop-file",
             str(self.stop_file), "--armed-file", str(self.armed), "--report", str(self.report), "--ready",
             str(self.ready)], env=agg.env(role="worker", rank=rank, config=config), stderr=open(self.stderr, "w"))
        deadline = time.monotonic() + 60  # a hang guard
        while not self.ready.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)

    def stop(self) -> dict:
        self.stop_file.touch()
        assert self.proc.wait(timeout=60) == 0
        return json.loads(self.report.read_text())


def _ns(us) -> int:
    """A trace time (microseconds, three decimals) in ns, exactly."""
    return int(Decimal(str(us)) * 1000)


def _run_json(agg):
    return json.loads((agg.out / "run.json").read_text())


def test_workers_record_only_in_the_windows_of_selected_steps(aggregator_factory, tmp_path):
    config = "{steps: [3]}"
    agg = aggregator_factory(config="steps: [3]\n")
    worker = Worker(agg, tmp_path, config)
    controller = _controller(agg, tmp_path, "--steps", "5", "--step-ms", "300", "--gap-ms", "100",
                             "--wait-before", "3", str(worker.armed), config=config)
    own = worker.stop()
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_3"], log
    steps = {s["step"]: s for s in controller["steps"]}
    iters = [r for r in own["ranges"] if r["name"] == "py_iter"]
    assert len(iters) == own["iterations"]
    # The window opens when step 2 (the one before the selected step)
    # begins, never earlier: an iteration over before that recorded nothing
    # (the worker's and controller's readings are of one clock).
    (w,) = [p for p in _run_json(agg)["processes"] if p["role"] == "worker"]
    could_record = sum(1 for r in iters if r["end_ns"] >= steps[2]["begin_ns"])
    assert could_record < len(iters)  # the worker ran before step 2 (it was ready first)
    assert 0 < w["events_received"] <= EVENTS_PER_WORKER_ITERATION * could_record, \
        (w["events_received"], could_record, len(iters))

    # Armed before step 3 began: every iteration overlapping step 3 is in its
    # trace, clipped to the step where it straddles an edge, found by its
    # payload (the iteration's index).
    trace = Trace(agg.out / "step_3" / "trace.json")
    summary = json.loads((agg.out / "step_3" / "summary.json").read_text())
    slack = sum(p["clock"]["bound_ns"] for p in summary["processes"]) + 1_000_000
    traced = {int(e["args"]["payload"]): e for e in trace.slices(trace.pid_of("(worker, rank 0)"), "py_iter")}
    s3 = steps[3]
    inside = 0
    for i, r in enumerate(iters):
        if r["begin_ns"] > s3["end_ns"] + slack or r["end_ns"] < s3["begin_ns"] - slack:
            assert i not in traced, (i, r, s3)  # cut to the step exactly
        elif r["begin_ns"] > s3["begin_hi_ns"] + slack and r["end_ns"] < s3["end_lo_ns"] - slack:
            assert i in traced and not traced[i]["args"].get("clipped_begin"), (i, r, s3)
            inside += 1
        elif r["begin_ns"] < s3["begin_ns"] - slack and r["end_ns"] > s3["begin_hi_ns"] + slack:
            assert i in traced and traced[i]["args"]["clipped_begin"], (i, r, s3)  # clipped, not lost
    assert inside > 0, (s3, len(iters))  # the step held whole iterations: what was checked is not empty
    (step,) = trace.slices(trace.pid_of("(controller)"), "step")
    for e in traced.values():
        assert _ns(step["ts"]) <= _ns(e["ts"]) and _ns(e["ts"]) + _ns(e["dur"]) <= _ns(step["ts"]) + _ns(step["dur"])
    # Armed all through step 3, by its own word; nothing to warn of.
    (ws,) = [p for p in summary["processes"] if p["role"] == "worker"]
    assert ws["unarmed_ms"] == 0 and summary["capture_warnings"] == [], summary["capture_warnings"]


def test_a_worker_armed_after_the_step_began_says_how_much_of_it_is_missing(aggregator_factory, tmp_path):
    """A worker that starts inside a selected step arms only once its
    collector is up and has the aggregator's word (calibration, connection):
    its summary entry says how much of its time in the step it did not
    record and the step's capture warnings name it, rather than showing a
    quietly short worker."""
    config = "{steps: [2]}"
    agg = aggregator_factory(config="steps: [2]\n")
    began, go = tmp_path / "began", tmp_path / "go"
    report = tmp_path / "controller.json"
    controller = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/step_controller.py"), "--report", str(report), "--steps", "3",
         "--step-ms", "200", "--gap-ms", "50", "--wait-inside", "2", str(began), str(go)],
        env=agg.env(role="controller", config=config), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # a hang guard
    while not began.exists():
        assert controller.poll() is None and time.monotonic() < deadline, controller.stderr.read()
        time.sleep(0.01)
    worker = Worker(agg, tmp_path, config)  # started inside step 2
    while not worker.armed.exists():
        assert worker.proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    go.touch()
    assert controller.wait(timeout=120) == 0, controller.stderr.read()
    worker.stop()
    log = agg.wait()
    summary = _summary(agg, 2)
    (w,) = [p for p in summary["processes"] if p["role"] == "worker"]
    (c,) = [p for p in summary["processes"] if p["role"] == "controller"]
    step = json.loads(report.read_text())["steps"][1]
    step_ms = (step["end_ns"] - step["begin_ns"]) / 1e6
    # It missed the part of the step before it started: more than nothing, less than the step.
    assert 0 < w["unarmed_ms"] < step_ms, (w["unarmed_ms"], step_ms, log)
    assert c["unarmed_ms"] == 0  # the controller arms from the end of the step before
    # Named in the warnings from 0.1 ms up (the aggregator's floor), whatever
    # this machine's speed made the gap.
    warnings = summary["capture_warnings"]
    if w["unarmed_ms"] >= 0.1:
        (warning,) = warnings
        assert warning.startswith(w["label"] + ": did not record ") and "missing" in warning
    else:
        assert warnings == [], warnings
    # What it did record lies in the part it says it recorded.
    trace = Trace(agg.out / "step_2" / "trace.json")
    (s2,) = trace.slices(trace.pid_of("(controller)"), "step")
    iters = trace.slices(trace.pid_of("(worker, rank 0)"), "py_iter")
    assert iters  # armed before `go`, with the rest of the step to record in
    for e in iters:
        assert _ns(e["ts"]) >= _ns(s2["ts"]) + w["unarmed_ms"] * 1e6 - 1e6, (e, w["unarmed_ms"])


def _summary(agg, n):
    return json.loads((agg.out / f"step_{n}" / "summary.json").read_text())


def test_the_programs_own_selection_is_the_runs(aggregator_factory, tmp_path):
    """README's by-hand recipe: an aggregator with no --config, and the
    selection in the programs' RLSCOPE_CONFIG. The aggregator takes the
    controller's config as the run's: exactly steps 2 and 4 are written (it
    used to write every step, knowing only its own config), with rank 0 and
    without rank 1, which records nothing."""
    config = "{steps: [2, 4], ranks: [0]}"
    agg = aggregator_factory()
    rank0, rank1 = Worker(agg, tmp_path, config, rank=0), Worker(agg, tmp_path, config, rank=1)
    _controller(agg, tmp_path, "--steps", "5", "--step-ms", "150", "--gap-ms", "50",
                "--wait-before", "2", str(rank0.armed), config=config)
    rank0.stop()
    rank1.stop()
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_2", "step_4"], log
    for n in (2, 4):
        assert sorted((p["role"], p["rank"]) for p in _summary(agg, n)["processes"]) == \
            [("controller", None), ("worker", 0)]
    run = _run_json(agg)
    workers = {p["rank"]: p for p in run["processes"] if p["role"] == "worker"}
    assert workers[0]["selected"] and workers[0]["events_received"] > 0
    assert not workers[1]["selected"] and workers[1]["events_received"] == 0
    assert "steps: [2, 4]" in run["config_yaml"] and run["config_source"] == "controller"
    assert "disagree" not in log and "disagree" not in rank0.stderr.read_text()


def test_aggregator_and_controller_disagree_the_run_says_so_once_and_uses_the_controllers(aggregator_factory,
                                                                                           tmp_path):
    agg = aggregator_factory(config="steps: [3]\n")
    _controller(agg, tmp_path, "--steps", "4", "--step-ms", "30", "--gap-ms", "20", config="{steps: [2, 4]}")
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_2", "step_4"], log
    lines = [line for line in log.splitlines() if "disagree" in line]
    assert len(lines) == 1, log
    assert "steps: [3] vs [2, 4]" in lines[0] and "using the controller's" in lines[0], lines[0]
    run = _run_json(agg)
    assert run["config_source"] == "controller" and run["config_notes"] == [lines[0].split(": ", 1)[1]]


def test_a_controller_config_without_run_keys_leaves_the_aggregators(aggregator_factory, tmp_path):
    """As under rlscope_ray.init(config=None, aggregator=...): the driver's
    config sets no run key, so the aggregator's --config selects, silently."""
    agg = aggregator_factory(config="steps: [3]\n")
    _controller(agg, tmp_path, "--steps", "4", "--step-ms", "30", "--gap-ms", "20",
                config='{"buffers": {"per_thread_kb": 2048}}')
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_3"], log
    assert "disagree" not in log and _run_json(agg)["config_source"] == "aggregator"


def test_a_worker_takes_the_runs_selection_over_its_own_and_says_so(aggregator_factory, tmp_path):
    """A worker whose own config leaves its rank out is profiled all the same
    when the run's config (the controller's) selects it, and says why."""
    agg = aggregator_factory()
    worker = Worker(agg, tmp_path, "{ranks: [1]}", rank=0)
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "150", "--gap-ms", "50",
                "--wait-before", "2", str(worker.armed), config="{steps: [2], ranks: [0]}")
    own = worker.stop()
    agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_2"]
    (w,) = [p for p in _summary(agg, 2)["processes"] if p["role"] == "worker"]
    assert w["rank"] == 0 and w["spans"] > 0, w
    assert own["iterations"] > 0
    lines = [line for line in worker.stderr.read_text().splitlines() if "disagrees" in line]
    assert len(lines) == 1 and "ranks: [1] vs [0]" in lines[0] and "using the run's" in lines[0], lines


def test_start_end_ranges_as_verls_marked_timer_opens_them_are_subtasks(aggregator_factory, tmp_path):
    """verl's controller opens "step" and its sub-tasks with the nvtx
    package's start_range/end_range: they are the step's sub-tasks in the
    breakdown, the critical path and discrete captures."""
    agg = aggregator_factory(config="steps: [2]\ndiscrete: true\n")
    _controller(agg, tmp_path, "--steps", "2", "--step-ms", "60", "--gap-ms", "20",
                "--subtasks", "gen,adv,update_actor", "--start-end")
    agg.wait()
    summary = _summary(agg, 2)
    assert summary["captures"] == ["gen", "adv", "update_actor"]
    assert [s["subtask"] for s in summary["critical_path"]["segments"]] == ["gen", "adv", "update_actor"]
    assert {"gen", "adv", "update_actor"} <= {r["subtask"] for r in summary["breakdown"]}
    trace = Trace(agg.out / "step_2" / "adv" / "trace.json")
    assert len(trace.asyncs(trace.pid_of("(controller)"), "adv")) == 1


@pytest.mark.parametrize("kind", [["--start-end"], []], ids=["start_end", "push_pop"])
def test_a_step_ranges_payload_is_its_number(aggregator_factory, tmp_path, kind):
    """A resumed run numbers its own steps: the payload of its `step` ranges
    (start/end ranges too, whose value on the wire is their id) is the step's
    number, for the selection and the files."""
    agg = aggregator_factory(config="steps: [202]\n")
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "30", "--gap-ms", "10", "--first-payload", "201", *kind)
    agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_202"]
    assert _summary(agg, 202)["step"] == 202
    run = _run_json(agg)
    assert run["steps_seen"] == 3 and run["steps_written"] == [202]


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
    worker = Worker(agg, tmp_path, None)
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "400", "--gap-ms", "50", "--subtasks", "gen,update_actor",
                "--wait-before", "2", str(worker.armed))
    worker.stop()
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
    worker = Worker(agg, tmp_path, None)
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "240", "--gap-ms", "50",
                "--subtasks", "gen,update_actor,update_actor", "--wait-before", "2", str(worker.armed))
    worker.stop()
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
        wslices = trace.slices(trace.pid_of("(worker"))
        assert wslices, capture  # the worker worked in each occurrence
        for e in wslices:  # only this occurrence's events
            assert c0 - 0.001 <= float(e["ts"]) and float(e["ts"]) + float(e["dur"]) <= c1 + 0.001
    assert bounds["gen"][1] <= bounds["update_actor"][0] <= bounds["update_actor"][1] <= bounds["update_actor_2"][0]


def test_nvtx_range_trigger_opens_and_closes_the_capture(aggregator_factory, tmp_path):
    agg = aggregator_factory()
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "30", "--gap-ms", "10", "--trigger-range", "2",
                config="{capture_range: 'nvtx:capture'}")
    agg.wait()
    traces = {n: Trace(agg.out / f"step_{n}" / "trace.json").events for n in (1, 2, 3)}
    recorded = {n: {e["name"] for e in events if e["ph"] in "Xi" and e.get("cat") not in ("cpu_samples", "off_cpu")}
                for n, events in traces.items()}
    # The controller's step ranges are always recorded (they number the
    # steps); everything else only inside the "capture" range, CPU samples too.
    assert recorded == {1: {"step"}, 2: {"step", "capture", "gen", "update_actor"}, 3: {"step"}}
    assert not any(e.get("cat") in ("cpu_samples", "off_cpu") for n in (1, 3) for e in traces[n])
    run = _run_json(agg)
    assert run["processes"][0]["events_received"] == 3 * 2 + 3 * 2  # steps; capture, gen, update_actor


def test_api_trigger_records_between_start_and_stop(aggregator_factory, tmp_path):
    agg = aggregator_factory()
    _controller(agg, tmp_path, "--steps", "3", "--step-ms", "30", "--gap-ms", "10", "--api-window", "2",
                config="{capture_range: api}")
    agg.wait()
    traces = {n: Trace(agg.out / f"step_{n}" / "trace.json").events for n in (1, 2, 3)}
    names = {n: {e["name"] for e in events if e["ph"] in "Xi" and e.get("cat") not in ("cpu_samples", "off_cpu")}
             for n, events in traces.items()}
    assert names == {1: {"step"}, 2: {"step", "before_subtasks", "gen", "update_actor"}, 3: {"step"}}
    assert not any(e.get("cat") in ("cpu_samples", "off_cpu") for n in (1, 3) for e in traces[n])  # nor samples
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
    assert float(b["dur"]) >= 4000  # it slept 5 ms inside
    assert not trace.slices(cpid, "X")
    (c,) = trace.asyncs(cpid, "C")
    assert c["dur"] >= 4000 and c["b"]["args"]["end_tid"] != c["b"]["tid"]
    assert _run_json(agg)["processes"][0]["unmatched"] == 0

"""End to end: real NVTX programs (C++ with the official NVTX3 headers, Python
with the `nvtx` package) under the collector, a real aggregator over ZeroMQ,
and the merged per-step trace.json a user would open."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, Trace


def _run_pair(build_dir, agg, tmp_path, steps=3, step_ms=40.0):
    """A Python `nvtx` worker (rank 1) runs while a C++ controller runs steps."""
    worker_report = tmp_path / "worker.json"
    ready = tmp_path / "worker.ready"
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "2.5",
         "--report", str(worker_report), "--ready", str(ready)],
        env=agg.env(role="worker", rank=1))
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert worker.poll() is None, "worker exited early"
        assert time.monotonic() < deadline, "worker never started"
        time.sleep(0.02)
    app_report = tmp_path / "app.json"
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", str(steps), "--step-ms", str(step_ms),
                    "--report", str(app_report)], env=agg.env(role="controller"), check=True, timeout=60)
    assert worker.wait(timeout=30) == 0
    log = agg.wait(timeout=30)
    return json.loads(app_report.read_text()), json.loads(worker_report.read_text()), log


def _close(measured_us: float, traced_us: float) -> bool:
    # The program times around its own NVTX calls, so the traced range lies
    # inside what it measured (up to clock conversion, 50 us), and is shorter
    # only by the NVTX calls and clock reads, plus any preemption between
    # them on a loaded 2-core machine: allow 10 % + 1 ms that way.
    return measured_us - (0.10 * measured_us + 1000) <= traced_us <= measured_us + 50


def test_cpp_and_python_programs_merge_into_step_traces(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory()
    app, worker, log = _run_pair(build_dir, agg, tmp_path)
    for n in (1, 2, 3):
        assert (agg.out / f"step_{n}" / "trace.json").exists(), log
    assert not (agg.out / "step_4").exists()
    run = json.loads((agg.out / "run.json").read_text())
    assert run["final"] and run["steps_written"] == [1, 2, 3]
    assert sorted(p["role"] for p in run["processes"]) == ["controller", "worker"]

    trace = Trace(agg.out / "step_2" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    wrk = trace.pid_of("(worker, rank 1)")
    assert ctrl == app["pid"]
    assert trace.thread_names[(ctrl, app["main_tid"])] == "app-main"

    # The controller's step, and everything of the controller nested inside it.
    (step,) = trace.slices(ctrl, "step")
    s0, s1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    assert trace.data["otherData"]["step"] == 2
    (outer,) = trace.slices(ctrl, "outer")
    (inner,) = trace.slices(ctrl, "inner")
    assert outer["tid"] == inner["tid"] == app["main_tid"]
    assert float(outer["ts"]) <= float(inner["ts"])
    assert float(inner["ts"]) + float(inner["dur"]) <= float(outer["ts"]) + float(outer["dur"])
    assert s0 <= float(outer["ts"]) and float(outer["ts"]) + float(outer["dur"]) <= s1
    (scoped,) = trace.slices(ctrl, "cpp_scoped")
    assert scoped["cat"] == "app_domain"  # nvtx3.hpp domain + registered string
    (helper_work,) = trace.slices(ctrl, "helper_work")
    assert trace.thread_names[(ctrl, helper_work["tid"])] == "helper"
    (handoff,) = trace.asyncs(ctrl, "handoff")
    assert handoff["b"]["tid"] == app["main_tid"]
    assert handoff["b"]["args"]["end_tid"] == helper_work["tid"]  # ended on the other thread
    (mark,) = trace.instants(ctrl, "checkpoint")
    assert mark["args"]["payload"] == 200 and s0 <= float(mark["ts"]) <= s1

    measured = {(r["name"]): r["us"] for r in app["ranges"] if r["step"] == 2}
    traced = {"step": float(step["dur"]), "outer": float(outer["dur"]), "inner": float(inner["dur"]),
              "cpp_scoped": float(scoped["dur"]), "helper_work": float(helper_work["dur"]),
              "handoff": handoff["dur"]}
    for name, us in traced.items():
        assert _close(measured[name], us), (name, measured[name], us)

    # The Python worker: its ranges during step 2, cut to the step.
    iters = trace.slices(wrk, "py_iter")
    assert len(iters) >= 3
    for e in trace.slices(wrk) + [x for x in trace.events if x["pid"] == wrk and x["ph"] in "bei"]:
        assert s0 - 0.001 <= float(e["ts"]) <= s1 + 0.001
        assert float(e["ts"]) + float(e.get("dur", 0)) <= s1 + 0.001
    annotated = trace.slices(wrk, "py_annotated")
    assert annotated and all(a["cat"] == "py_domain" for a in annotated)
    assert all(a["args"].get("category") == "compute" for a in annotated)
    asyncs = trace.asyncs(wrk, "py_async")
    closed = [a for a in asyncs if not a["b"]["args"].get("open")]
    assert closed and all(a["b"]["args"]["end_tid"] != a["b"]["tid"] for a in closed)
    assert trace.instants(wrk, "py_mark")
    # Unclipped worker ranges match what the worker measured (same clock).
    by_begin = {(r["name"], r["begin_ns"] // 1000): r["us"] for r in worker["ranges"]}
    checked = 0
    for a in annotated:
        if a["args"].get("clipped_begin") or a["args"].get("clipped_end"):
            continue
        begin_us = int(float(a["ts"]))
        match = [us for (n, b), us in by_begin.items() if n == "py_annotated" and abs(b - begin_us) <= 200]
        assert len(match) == 1, (a, begin_us)
        assert _close(match[0], float(a["dur"])), (match[0], a["dur"])
        checked += 1
    assert checked >= 2
    # A range that straddles the step start is clipped to it, not lost.
    first_iter = min(iters, key=lambda e: float(e["ts"]))
    if first_iter["args"].get("clipped_begin"):
        assert abs(float(first_iter["ts"]) - s0) < 0.002

    summary = json.loads((agg.out / "step_2" / "summary.json").read_text())
    assert summary["reason"] == "complete" and summary["late_processes"] == []
    procs = {p["role"]: p for p in summary["processes"]}
    assert procs["controller"]["spans"] == 6 and procs["controller"]["instants"] == 1
    assert procs["worker"]["rank"] == 1 and procs["worker"]["dropped_total"] == 0


def test_only_selected_steps_are_written(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory(config="steps: [2]\n")
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "3", "--step-ms", "5"],
                   env=agg.env(role="controller"), check=True, timeout=60)
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_2"], log
    assert json.loads((agg.out / "run.json").read_text())["steps_seen"] == 3


def test_program_without_aggregator_finishes_on_time(build_dir, tmp_path, rlscope):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    env = {"PATH": "/usr/bin:/bin", "RLSCOPE_AGGREGATOR": f"tcp://127.0.0.1:{port}", "RLSCOPE_ROLE": "controller",
           "RLSCOPE_CONFIG": "{flush: {exit_timeout_ms: 500}}", "NVTX_INJECTION64_PATH": rlscope.collector_path()}
    t0 = time.monotonic()
    r = subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "5", "--step-ms", "20"], env=env,
                       timeout=30)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0
    # 5 steps of ~21 ms of work, plus at most the 0.5 s exit timeout.
    assert elapsed < 0.11 + 0.5 + 1.0, elapsed


def test_python_api_steps_ranges_and_marks(aggregator_factory, tmp_path):
    agg = aggregator_factory()
    script = (
        "import rlscope_ray, time\n"
        "assert rlscope_ray.enabled()\n"
        "for n in (10, 11):\n"
        "    with rlscope_ray.step(n):\n"
        "        with rlscope_ray.range('gen'):\n"
        "            time.sleep(0.01)\n"
        "        rlscope_ray.mark('after_gen')\n"
        "        @rlscope_ray.range('update_actor')\n"
        "        def update():\n"
        "            time.sleep(0.005)\n"
        "        update()\n"
        "print(rlscope_ray.stats())\n")
    env = agg.env(role="controller", inject=False)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_10", "step_11"], log
    trace = Trace(agg.out / "step_11" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    (step,) = trace.slices(ctrl, "step")
    assert step["args"]["payload"] == 11
    (gen,) = trace.slices(ctrl, "gen")
    (upd,) = trace.slices(ctrl, "update_actor")
    assert 10000 * 0.9 <= float(gen["dur"]) <= 10000 * 3
    assert float(gen["ts"]) + float(gen["dur"]) <= float(upd["ts"])
    assert len(trace.instants(ctrl, "after_gen")) == 1


def test_bad_config_in_environment_leaves_program_unharmed(build_dir, aggregator_factory):
    agg = aggregator_factory(exit_when_done=False)
    env = agg.env(role="controller", config="{steps: \"5-2\"}")
    r = subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "2", "--step-ms", "5"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert 'steps: range "5-2" is empty' in r.stderr
    assert "profiling is off in this process" in r.stderr
    agg.stop()
    assert not list(agg.out.glob("step_*"))


def test_rank_selection_leaves_out_unselected_workers_not_the_controller(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory()
    config = "{ranks: [1]}"
    ready = tmp_path / "ready"
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "1.5",
         "--report", str(tmp_path / "w.json"), "--ready", str(ready)],
        env=agg.env(role="worker", rank=0, config=config))
    while not ready.exists():
        assert worker.poll() is None
        time.sleep(0.02)
    r = subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "2", "--step-ms", "10"],
                       env=agg.env(role="controller", config=config), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "treating it as rank 0" not in r.stderr
    assert worker.wait(timeout=30) == 0
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_1", "step_2"], log
    trace = Trace(agg.out / "step_2" / "trace.json")
    assert [n for n in trace.process_names.values() if "(controller)" in n]
    assert not [n for n in trace.process_names.values() if "worker" in n]
    run = json.loads((agg.out / "run.json").read_text())
    (w,) = [p for p in run["processes"] if p["role"] == "worker"]
    assert w["selected"] is False and w["events_received"] == 0  # connected, recorded nothing


def test_gpu_tracing_unavailable_is_reported_and_cpu_events_still_arrive(build_dir, aggregator_factory):
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this host has an NVIDIA driver: tests/gpu/run_gpu_checks.sh covers the GPU path")
    agg = aggregator_factory()
    env = agg.env(role="controller")
    env["CUDA_INJECTION64_PATH"] = env["NVTX_INJECTION64_PATH"]  # as the Ray plugin sets it
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "1", "--step-ms", "5"], env=env,
                   check=True, timeout=60)
    agg.wait()
    summary = json.loads((agg.out / "step_1" / "summary.json").read_text())
    (proc,) = summary["processes"]
    assert proc["labels"]["gpu_tracing"] == "unavailable: no NVIDIA driver on this host"
    assert proc["spans"] == 6  # the CPU side is complete

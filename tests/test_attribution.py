"""Cross-stack attribution end to end: the CPU sampler in real processes under
a real aggregator. The known answer: a program whose threads burn thread CPU
time in a test-only shared library, in a pure Python loop and in a module the
config calls the simulator (tests/apps/attribution_app.py); each phase's
window must go to its own category, which holds at any machine load because
samples follow each thread's own CPU clock (how many milliseconds, against
what each phase measured, is make bench's: section sampler). And the sampler's contract with its host
(tests/apps/sampler_app.py): never outside a window, in an unselected rank or
after shutdown; no interrupted system call; the host's own timers and
signal handlers come first."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, Trace

CONFIG = ('{"attribution": {"simulator": ["rlscope_test_sim"], "backend": ["librlscope_test_burn*"]}, '
          '"cpu": {"sampling_hz": 1000}}')


def _kernel_samples_safely() -> bool:
    release = os.uname().release.split("-")[0].split(".")
    major, minor = int(release[0]), int(release[1])
    return os.uname().machine == "x86_64" and (major, minor) >= (5, 11)


pytestmark = pytest.mark.skipif(not _kernel_samples_safely(),
                                reason="CPU sampling needs Linux >= 5.11 on x86_64 (it stays off elsewhere)")


@pytest.fixture(scope="module")
def attribution_run(build_dir, tmp_path_factory):
    from conftest import Aggregator

    tmp = tmp_path_factory.mktemp("attribution")
    agg = Aggregator(tmp, CONFIG, grace_ms=3000, exit_when_done=True)
    report = tmp / "app.json"
    lib = build_dir / "tests" / "apps" / "librlscope_test_burn.so"
    subprocess.run([sys.executable, str(ROOT / "tests/apps/attribution_app.py"), "--lib", str(lib), "--steps", "3",
                    "--report", str(report)], env=agg.env(role="controller", config=CONFIG), check=True, timeout=300)
    log = agg.wait(timeout=60)
    return agg, json.loads(report.read_text()), log


def _rows(summary: dict) -> dict:
    return {r["subtask"]: r for r in summary["breakdown"]}


@pytest.mark.parametrize("step", [2, 3])
def test_each_subtasks_cpu_time_goes_to_where_the_program_spent_it(attribution_run, step):
    """Each phase's own category holds most of its window's sampled CPU time:
    a phase burns 250 ms of its thread's CPU in one place, and only the
    samples at the window's two edges (a few ticks' worth) can fall
    elsewhere, at any load. How close the milliseconds come to what each
    phase measured is make bench's (section sampler)."""
    agg, app, log = attribution_run
    summary = json.loads((agg.out / f"step_{step}" / "summary.json").read_text())
    rows = _rows(summary)
    for subtask, category in (("native", "backend"), ("python", "python"), ("sim", "simulator")):
        a = rows[subtask]["attribution"]
        assert a is not None, (subtask, rows[subtask], log)
        got = a[f"{category}_ms"]
        others = sum(a[f"{c}_ms"] for c in ("python", "backend", "cuda_api", "simulator", "other")
                     if c != category)
        assert got > others, (subtask, category, a)
        # The sampler's own handler time is the profiler's: every sampled window has some.
        assert a["profiler_ms"] > 0 and a["gpu_ms"] == 0
        assert a["cuda_api_wall_ms"] is None  # no GPU traced
    # The sim window holds both threads' simulator time (the helper's too):
    # more than either phase alone could have, as the samples' weights are
    # each thread's own CPU time.
    sim, native = rows["sim"]["attribution"], rows["native"]["attribution"]
    assert sim["simulator_ms"] > native["backend_ms"], (sim, native)


def test_the_summary_says_how_it_sampled_and_the_trace_has_a_category_track(attribution_run):
    agg, app, log = attribution_run
    summary = json.loads((agg.out / "step_2" / "summary.json").read_text())
    (proc,) = summary["processes"]
    assert proc["cpu_sampling"].startswith("on: 1000 Hz of each thread's CPU time"), proc["cpu_sampling"]
    assert "python frames: CPython" in proc["cpu_sampling"]
    assert proc["cpu_samples"] > 0 and proc["overhead"]["cpu_samples"] == proc["cpu_samples"]
    assert proc["overhead"]["costs_ns"]["cpu_sample"] > 0  # the sampler's own cost, removed
    # Measured where it is paid: the handler's own time in place (one figure
    # a flush), plus the start-up figure's rest (the signal's delivery).
    overhead = proc["overhead"]
    assert overhead["cost_sources"]["cpu_sample"] == "run", overhead["cost_sources"]
    handler = overhead["measured_costs"]["cpu_sample"]
    assert handler["samples"] >= 4 and handler["mean_ns"] > 0, handler
    assert overhead["costs_ns"]["cpu_sample"] >= handler["mean_ns"], (overhead["costs_ns"], handler)
    assert app["stats"]["cpu_samples_dropped"] == 0
    trace = Trace(agg.out / "step_2" / "trace.json")
    pid = trace.pid_of("attribution_app.py")
    # The main thread and the helper, each beside its own (the collector's
    # own threads, sampled too, are the profiler's: tests/test_whole_process.py).
    sampled = {tid: name for (p, tid), name in trace.thread_names.items()
               if p == pid and name.endswith("\u00b7 CPU (sampled)")}
    # Its own threads (rlscope-flush, rlscope-watch, ZeroMQ's) hold
    # the profiler's time alone.
    own = {tid for tid, name in sampled.items() if name.startswith(("rlscope-", "ZMQbg"))}
    tracks = set(sampled) - own
    assert len(tracks) == 2, trace.thread_names
    by_track = {}
    for e in trace.slices(pid, samples=True):
        by_track.setdefault(e["tid"], set()).add(e["name"])
    assert all(by_track.get(t, set()) <= {"profiler"} for t in own), (by_track, sampled)
    main_track = max(tracks, key=lambda t: len(by_track.get(t, ())))
    (helper_track,) = tracks - {main_track}
    assert by_track[main_track] >= {"backend", "python", "simulator"}, by_track
    assert by_track[helper_track] >= {"simulator"}, by_track
    sim_slices = trace.slices(pid, "simulator", samples=True)
    assert any(e["args"].get("where") == "rlscope_test_sim" for e in sim_slices), sim_slices[:3]
    run = json.loads((agg.out / "run.json").read_text())
    assert run["processes"][0]["cpu_samples_received"] >= proc["cpu_samples"]
    report = (agg.out / "report.html")
    from rlscope_ray.report import write_report
    write_report(agg.out)
    assert "attribution-table" in report.read_text()


def _sampler_app(agg, mode: str, role: str = "worker", rank=None, config: str = "{}") -> dict:
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/sampler_app.py"), mode], capture_output=True, text=True,
                       env=agg.env(role=role, rank=rank, config=config), timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_sampler_fires_only_inside_windows_and_never_after_shutdown(aggregator_factory):
    agg = aggregator_factory(exit_when_done=False)
    out = _sampler_app(agg, "windows", role="controller", config='{"steps": [2]}')
    assert out["in_step_1"]["cpu_signals"] == 0 and out["in_step_1"]["cpu_timers"] == 0, out
    assert out["after_step_2"]["cpu_samples"] > 0, out  # armed from step 1's end through step 2
    assert out["after_step_3"]["cpu_signals"] == out["after_step_2"]["cpu_signals"], out
    assert out["after_shutdown"]["cpu_timers"] == 0, out
    assert out["end"]["cpu_signals"] == out["after_shutdown"]["cpu_signals"], out
    agg.stop()


def test_an_unselected_rank_is_never_sampled_and_a_selected_one_is(aggregator_factory):
    agg = aggregator_factory(exit_when_done=False)
    config = '{"capture_range": "api", "ranks": [1]}'
    unselected = _sampler_app(agg, "api", rank=0, config=config)
    assert unselected["captured"]["cpu_signals"] == 0 and unselected["captured"]["cpu_timers"] == 0, unselected
    assert unselected["end"]["cpu_signals"] == 0
    selected = _sampler_app(agg, "api", rank=1, config=config)
    assert selected["captured"]["cpu_samples"] > 0, selected
    assert selected["end"]["cpu_signals"] == selected["stopped"]["cpu_signals"], selected  # stop() disarms
    agg.stop()


def test_no_system_call_is_interrupted(aggregator_factory):
    agg = aggregator_factory(exit_when_done=False)
    out = _sampler_app(agg, "eintr", config='{"capture_range": "api", "cpu": {"sampling_hz": 10000}}')
    assert out["stats"]["cpu_samples"] > 0, out
    assert out["eintr"] == {"poll": 0, "nanosleep": 0}, out
    agg.stop()


def test_the_hosts_timers_and_handlers_come_first(aggregator_factory):
    agg = aggregator_factory(exit_when_done=False)
    out = _sampler_app(agg, "host", config='{"capture_range": "api"}')
    assert out["sigprof"] > 0 and out["sampled"]["cpu_samples"] > 0, out  # both profilers ran
    assert out["took_signal"]["cpu_signal"] == out["sampled"]["cpu_signal"] > 0
    assert out["took_signal"]["cpu_timers"] == 0, out  # stopped for good: every timer deleted
    assert out["end"]["cpu_signals"] == out["took_signal"]["cpu_signals"], out  # stopped: none of ours since
    assert out["host_handler_calls"] == 0, out
    agg.stop()

"""Whole-process attribution end to end (collector/cpu_sampler.h,
native_stack.h, thread_states.h), on a program with a known answer
(tests/apps/whole_process_app.py) under a real aggregator:

- threads the program starts inside a window, in native code, that never
  record an event, are sampled: the pool library's category holds their CPU,
  never more than they measured (how much of it: the bench's, below);
- native code is attributed by its stack: libm and libc called from a
  "simulator" library are the simulator's (by the interrupted instruction
  alone, they were "other");
- the recording thread's off-CPU time is split by why it waited: sleep, a
  lock, a socket poll, I/O, the GIL, each in its own window.
Every wait is a handshake with the collector's counters, never a timing, so
each holds at any machine load; how close the figures come, and what it
costs, is make bench's (section whole_process)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, Trace
from test_attribution import _kernel_samples_safely

CONFIG = ('{"attribution": {"simulator": ["librlscope_test_simlib*"], "backend": ["librlscope_test_pool*"]}, '
          '"cpu": {"sampling_hz": 1000, "off_cpu_hz": 50}}')
CATEGORIES = ("python", "backend", "cuda_api", "simulator", "other", "profiler")
REASONS = ("other", "gil", "lock", "poll", "io", "sleep", "cpu_wait", "cuda_sync")

pytestmark = pytest.mark.skipif(not _kernel_samples_safely(),
                                reason="CPU sampling needs Linux >= 5.11 on x86_64 (it stays off elsewhere)")


@pytest.fixture(scope="module")
def run(build_dir, tmp_path_factory):
    from conftest import Aggregator
    import rlscope_ray

    tmp = tmp_path_factory.mktemp("whole")
    agg = Aggregator(tmp, CONFIG, grace_ms=3000, exit_when_done=True)
    report = tmp / "app.json"
    apps = build_dir / "tests" / "apps"
    subprocess.run([sys.executable, str(ROOT / "tests/apps/whole_process_app.py"),
                    "--pool-lib", str(apps / "librlscope_test_pool.so"),
                    "--sim-lib", str(apps / "librlscope_test_simlib.so"),
                    "--collector", rlscope_ray.collector_path(), "--steps", "2", "--report", str(report)],
                   env=agg.env(role="controller", config=CONFIG), check=True, timeout=300)
    log = agg.wait(timeout=60)
    return agg, json.loads(report.read_text()), log


def _rows(agg, step: int) -> dict:
    summary = json.loads((agg.out / f"step_{step}" / "summary.json").read_text())
    return {r["subtask"]: r["attribution"] for r in summary["breakdown"]}


@pytest.mark.parametrize("step", [1, 2])
def test_threads_that_never_record_are_sampled_and_cover_the_process_cpu(run, step):
    """The pool's threads start inside the window and record nothing; they
    are sampled, their CPU is the pool library's (the backend, by the
    config), and never more than they measured (within three standard
    errors plus a tick per thread at each window edge).

    How much of it is sampled is the bench's (section whole_process), not
    asserted here: on a loaded host the kernel may deliver a thread's CPU
    timer signal as rarely as once per ~100 ms of its CPU (each sample then
    weighs what it stands for), and what a thread ran after its last sample
    is lost when it exits (seen in a soak: one pool thread sampled for 206
    of its 300 ms; the collector before idle flushes too)."""
    agg, app, log = run
    a = _rows(agg, step)["pool"]
    truth_ms = 1000 * sum(app["steps"][str(step)]["pool"])
    slack = 3 * a["error_ms"]["backend"] + 2 * 4 * len(app["steps"][str(step)]["pool"]) + 0.05 * truth_ms
    assert 0 < a["backend_ms"] <= truth_ms + slack, (a, truth_ms, slack)
    job = sum(a[f"{c}_ms"] for c in CATEGORIES if c != "profiler")
    # The window's CPU is the pool library's, within three standard errors:
    # a thread's late sample is spread over the wall time since its last
    # (breakdown.h SampleNsIn): under load 107 ms of 700 came in other
    # categories (the own window below: 20.8 ms of the main thread's Python,
    # carried from before it, where the process used 104 ms, 101 of them the
    # own thread's).
    assert a["backend_ms"] + 3 * a["error_ms"]["backend"] >= 0.85 * job, a
    assert a["threads"] >= len(app["steps"][str(step)]["pool"]), a  # the pool's (the main thread waits)
    assert a["coverage"] is not None and 0 < a["coverage"] <= 1.15, a
    # The main thread waited for them, off CPU in pthread_join (a futex).
    assert a["off_cpu_ms"]["lock"] > 0, a


@pytest.mark.parametrize("step", [1, 2])
def test_a_thread_that_works_for_the_collector_is_the_profilers(run, step):
    """A thread of the host that says it works for the collector
    (rlscope_ray's speed watch after its calibration) is sampled as the
    collector's own threads are: its Python CPU is the profiler's, not the
    program's: never more than the thread used, within a sample at each
    window edge (a sample weighs the CPU since the one before; on a loaded
    host one carried 23 ms, and the bound of two 4 ms ticks failed)."""
    agg, app, log = run
    a = _rows(agg, step)["own"]
    truth_ms = 1000 * app["steps"][str(step)]["own"]
    job = sum(a[f"{c}_ms"] for c in CATEGORIES if c != "profiler")
    assert a["profiler_ms"] + 3 * a["error_ms"]["profiler"] >= 0.85 * (job + a["profiler_ms"]), a  # as the pool's
    edges = 2 * min(25, max(4, a["max_sample_ms"]))  # capped: an inflated sample must not widen its own bound
    assert 0 < a["profiler_ms"] <= truth_ms + 3 * a["error_ms"]["profiler"] + edges + 0.05 * truth_ms, (a, truth_ms)


@pytest.mark.parametrize("step", [1, 2])
def test_native_code_is_attributed_by_its_stack(run, step):
    """sim_lib.c spends its time in libm's sin/exp/log1p and libc's memcpy:
    by the interrupted instruction alone "other", by the stack the
    simulator's; never more than the thread measured (within three standard
    errors, a tick and 5 %). How much of it is sampled is the bench's, as
    above (a soak's loaded kernel delivered samples for 264 of its 300 ms,
    coverage 0.87)."""
    agg, app, log = run
    a = _rows(agg, step)["sim"]
    job = sum(a[f"{c}_ms"] for c in CATEGORIES if c != "profiler")
    assert a["simulator_ms"] >= 0.85 * job, a
    truth_ms = 1000 * app["steps"][str(step)]["sim"]
    assert 0 < a["simulator_ms"] <= truth_ms + 3 * a["error_ms"]["simulator"] + 8 + 0.05 * truth_ms, (a, truth_ms)


@pytest.mark.parametrize("step", [1, 2])
@pytest.mark.parametrize("subtask,reason", [("sleep", "sleep"), ("lock", "lock"), ("poll", "poll"), ("io", "io"),
                                            ("gil", "gil")])
def test_off_cpu_time_is_split_by_why_the_thread_waited(run, step, subtask, reason):
    """Each wait lasts 8 looks of the off-CPU sampler: its reason holds most
    of the window's off-CPU time (the looks at its two edges may see the
    thread elsewhere)."""
    agg, app, log = run
    a = _rows(agg, step)[subtask]
    assert a is not None and a["off_cpu_looks"] >= 6, a
    off = a["off_cpu_ms"]
    waits = sum(off[r] for r in REASONS if r != "cpu_wait")  # run-queue time is exact, not sampled
    assert off[reason] > 0 and off[reason] >= 0.6 * waits, (subtask, off)


def test_the_summary_trace_and_stats_say_what_ran(run):
    agg, app, log = run
    summary = json.loads((agg.out / "step_2" / "summary.json").read_text())
    (proc,) = summary["processes"]
    assert "every thread (cpu.threads: all)" in proc["cpu_sampling"], proc["cpu_sampling"]
    assert "native stacks: frame pointers where they validate, else a scan" in proc["cpu_sampling"]
    stats = app["stats"]
    assert stats["cpu_walks_scan"] + stats["cpu_walks_fp"] > 0, stats
    assert stats["cpu_threads_unsampled"] == 0 and stats["cpu_samples_dropped"] == 0, stats
    assert stats["off_cpu_looks"] > 0 and stats["off_cpu_dropped"] == 0, stats
    trace = Trace(agg.out / "step_2" / "trace.json")
    pid = trace.pid_of("whole_process_app.py")
    names = [name for (p, _), name in trace.thread_names.items() if p == pid]
    # The pool's threads (named after the process; the main thread waits)
    # and the main thread's off-CPU track.
    pool_threads = len(app["steps"]["2"]["pool"])
    python_cpu = sum(n == "python \u00b7 CPU (sampled)" for n in names)
    assert python_cpu >= pool_threads, names
    assert any("off CPU (sampled)" in n for n in names), names
    # The flush thread (every thread has a timer: cpu_threads_unsampled
    # above) has a track of its own name when a sample of it landed in the
    # step: it runs ~15 ms a step, and a loaded kernel may deliver none of
    # its timer signals in that (a soak saw it), so its track is not
    # required.
    off = {e["name"] for e in trace.slices(pid, samples=True) if e.get("cat") == "off_cpu"}
    assert {"off CPU: sleep", "off CPU: gil", "off CPU: poll"} <= off, off

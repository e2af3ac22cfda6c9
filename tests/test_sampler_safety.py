"""The CPU sampler never crashes, hangs or changes its host: every read its
signal handler makes of memory the collector does not own is fault-proof
(collector/safe_read.h), a read that fails leaves the sample without the
part it could not read and is counted, and the host's own SIGSEGV handling
is as without the profiler.

- The collector's own frame reader (python/bindings/py_frame.c) meets a
  real CPython frame whose page went away (tests/apps/frame_fault.c points
  the thread's current frame at a copy, then makes it unreadable): every
  such sample is kept and counted unread, a fault the guard caught.
- Memory unmapped under a frame reader (tests/apps/fault_app.py with a
  reader of tests/apps/fault_lib.c, which unmaps the page it reads): before
  the reads were fault-proof, a check against a snapshot of the process's
  readable memory let such a read through and the process died with SIGSEGV
  every time. Now every such sample is kept, counted unread, in the
  process's counters and in the step's summary.
- The host's handler: installed before sampling starts or once it runs, it
  gets every fault of its own and nothing of ours; a crash in host code ends
  the process as without the profiler, with faulthandler's report where it
  is enabled.
- Frames and memory churned while sampled at 10 kHz in many short runs
  under CPU load (tests/apps/churn_app.py): no run crashes, and every read
  that failed is a fault the guard caught (whether one fails is the churn's
  luck: the frame test above makes it certain)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT, Trace, clean_env
from test_attribution import _kernel_samples_safely

pytestmark = pytest.mark.skipif(not _kernel_samples_safely(),
                                reason="CPU sampling needs Linux >= 5.11 on x86_64 (it stays off elsewhere)")

CONFIG = '{"steps": [2], "cpu": {"sampling_hz": 1000}}'


def _fault_lib(build_dir) -> str:
    return str(build_dir / "tests" / "apps" / "librlscope_test_fault.so")


def _fault_app(build_dir, env, mode: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tests/apps/fault_app.py"), mode, "--lib", _fault_lib(build_dir),
                           *flags], capture_output=True, text=True, env=env, timeout=300)


def _result(run: subprocess.CompletedProcess) -> dict:
    assert run.returncode == 0, (run.returncode, run.stderr[-3000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def _step_process(agg, step: int) -> dict:
    (proc,) = json.loads((agg.out / f"step_{step}" / "summary.json").read_text())["processes"]
    return proc


def test_a_frame_unmapped_under_the_reader_is_counted_and_never_a_crash(build_dir, aggregator_factory):
    agg = aggregator_factory(CONFIG)
    out = _result(_fault_app(build_dir, agg.env(role="controller", config=CONFIG), "unmapped"))
    log = agg.wait(timeout=60)
    stats = out["stats"]
    # Samples were read before the page went, failed while it was gone, and
    # were kept: each a fault the guard caught, none through the kernel.
    assert stats["cpu_frames_unread"] > 0, stats
    # (A stack walk's failed reads are faults too, counted apart.)
    assert stats["cpu_guard_faults"] == stats["cpu_frames_unread"] + stats["cpu_walk_faults"], stats
    assert stats["cpu_kernel_reads"] == 0, stats
    assert stats["cpu_samples"] > stats["cpu_frames_unread"], stats
    # Every unread sample fell inside step 2 (the page was gone only there):
    # the step's summary counts each of them, beside the samples kept.
    proc = _step_process(agg, 2)
    assert proc["cpu_frames_unread"] == stats["cpu_frames_unread"], (proc, log)
    assert proc["cpu_samples"] > proc["cpu_frames_unread"]
    assert "reads guarded" in proc["cpu_sampling"], proc["cpu_sampling"]
    # The trace's sample slices say how many of their frames were not read.
    trace = Trace(agg.out / "step_2" / "trace.json")
    slices = trace.slices(trace.pid_of("fault_app.py"), samples=True)
    assert sum(e["args"].get("frames_unread", 0) for e in slices) == stats["cpu_frames_unread"], slices
    run = json.loads((agg.out / "run.json").read_text())
    assert run["processes"][0]["labels"]["cpu_frames_unread"] == str(stats["cpu_frames_unread"])


def test_a_handler_preempted_inside_it_is_left_out_of_the_samples_cost(build_dir, aggregator_factory):
    """A CPU sample is charged its handler's time measured in place (the
    run's mean). A handler that took over 50 us was interrupted, as one
    preempted inside it is: left out of that mean, and counted. Here a frame
    reader spins 200 us of wall time in every sample for a third of step 2
    (every one of those handlers is over the ceiling, at any load), and
    reads at once otherwise: those samples are counted as interrupted, and
    the step is still charged a mean measured in place, from the others.
    The mean's size is a timing, not asserted here."""
    agg = aggregator_factory(CONFIG)
    out = _result(_fault_app(build_dir, agg.env(role="controller", config=CONFIG), "slow"))
    agg.wait(timeout=60)
    stats = out["stats"]
    assert stats["cpu_handlers_interrupted"] > 0, stats
    assert stats["cpu_samples"] > stats["cpu_handlers_interrupted"], stats
    assert stats["cpu_handler_ns"] > 0, stats  # from the samples that were not interrupted
    overhead = _step_process(agg, 2)["overhead"]
    handler = overhead["measured_costs"]["cpu_sample"]
    assert overhead["cost_sources"]["cpu_sample"] == "run", overhead["cost_sources"]
    assert handler["samples"] >= 4 and handler["mean_ns"] > 0, handler


def _frame_fault_extension(tmp_path) -> Path:
    """tests/apps/frame_fault.c built against this interpreter's headers
    (internal ones, as python/bindings/py_frame.c is); its directory."""
    include, suffix = sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX")
    if shutil.which("gcc") is None or not os.path.exists(os.path.join(include, "internal", "pycore_frame.h")):
        pytest.skip("building tests/apps/frame_fault.c needs gcc and this CPython's internal headers")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", f"-I{include}", str(ROOT / "tests/apps/frame_fault.c"),
                    "-o", str(tmp_path / f"rlscope_test_frame_fault{suffix}")], check=True, timeout=120)
    return tmp_path


def test_the_collectors_own_frame_reader_meets_a_frame_gone_and_counts_it(aggregator_factory, tmp_path):
    """Not a test reader: the frame the collector's reader (py_frame.c) reads
    is a real CPython frame whose page goes away under the sampler. While it
    is readable the samples name its module (the reader followed it there);
    while it is not, every sample is kept, counted unread, a fault caught."""
    ext_dir = _frame_fault_extension(tmp_path)
    # The module of the function that calls hold() is the config's simulator:
    # samples that name it were read from the copied frame.
    config = '{"steps": [2], "cpu": {"sampling_hz": 1000}, "attribution": {"simulator": ["rlscope_test.frames"]}}'
    agg = aggregator_factory(config)
    out = _result(subprocess.run([sys.executable, str(ROOT / "tests/apps/frame_fault_app.py"), str(ext_dir)],
                                 capture_output=True, text=True, env=agg.env(role="controller", config=config),
                                 timeout=300))
    log = agg.wait(timeout=60)
    assert out["python_frames"].startswith("CPython 3."), out["python_frames"]  # the real reader, installed
    s = out["stats"]
    delta = lambda a, b, key: s[b][key] - s[a][key]  # noqa: E731
    # The control (C code spinning, its caller's frame as it is): sampled, all read.
    assert delta("start", "control", "cpu_samples") > 0 and delta("start", "control", "cpu_frames_unread") == 0, s
    unread = delta("control", "hold", "cpu_frames_unread")
    assert unread > 0, s
    assert delta("control", "hold", "cpu_guard_faults") == unread + delta("control", "hold", "cpu_walk_faults"), s
    assert s["end"]["cpu_kernel_reads"] == 0, s
    proc = _step_process(agg, 2)
    assert proc["cpu_frames_unread"] == s["end"]["cpu_frames_unread"] == unread, (proc, log)
    # While the page was readable the reader read the copy: the module of
    # the function that called hold(), the config's simulator (the control's
    # frame is __main__'s). The first sample in hold may have come late (a
    # timer the kernel's tick saw after several periods): what it stood for
    # before it lies at the end of control, which counts it as the thread's
    # previous sample there says (breakdown.cc, sample_before_category): the
    # thread has one in control (its cpu_samples delta is asserted above),
    # so this holds at any load, with no timing.
    rows = {r["subtask"]: r["attribution"] for r in
            json.loads((agg.out / "step_2" / "summary.json").read_text())["breakdown"]}
    assert rows["hold"]["simulator_ms"] > 0 and rows["control"]["simulator_ms"] == 0, rows
    trace = Trace(agg.out / "step_2" / "trace.json")
    slices = trace.slices(trace.pid_of("frame_fault_app.py"), samples=True)
    assert sum(e["args"].get("frames_unread", 0) for e in slices) == unread


def test_under_a_host_handler_installed_after_the_guard_reads_go_through_the_kernel(build_dir, aggregator_factory):
    """The host's handler comes first once installed; the sampler never puts
    its guard above it again. Its reads then cannot fault at all: the host's
    handler is given nothing, and the unread samples are counted as before."""
    agg = aggregator_factory(CONFIG)
    out = _result(_fault_app(build_dir, agg.env(role="controller", config=CONFIG), "unmapped", "--host-after"))
    agg.wait(timeout=60)
    stats = out["stats"]
    assert stats["cpu_frames_unread"] > 0 and stats["cpu_kernel_reads"] >= stats["cpu_frames_unread"], stats
    assert stats["cpu_guard_faults"] == 0, stats
    assert out["host_seen"] == 0, out
    proc = _step_process(agg, 2)
    assert proc["cpu_frames_unread"] == stats["cpu_frames_unread"]
    assert "reads through the kernel" in proc["cpu_sampling"], proc["cpu_sampling"]


@pytest.mark.parametrize("order", ["before", "after"])
def test_the_hosts_segv_handler_gets_its_own_faults_and_nothing_else(build_dir, aggregator_factory, order):
    agg = aggregator_factory(CONFIG)
    flags = ["--before"] if order == "before" else []
    out = _result(_fault_app(build_dir, agg.env(role="controller", config=CONFIG), "host", *flags))
    agg.wait(timeout=60)
    assert out["host_faults"] == out["touches"] == 200, out
    assert out["host_seen"] == out["touches"], out
    assert out["stats"]["cpu_samples"] > 0, out


@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_crash_in_host_code_ends_the_process_as_without_the_profiler(build_dir, aggregator_factory, faulthandler):
    flags = ["--faulthandler"] if faulthandler else []
    bare = _fault_app(build_dir, clean_env(), "crash", *flags)
    agg = aggregator_factory(CONFIG)
    profiled = _fault_app(build_dir, agg.env(role="controller", config=CONFIG), "crash", *flags)
    agg.stop()
    assert bare.returncode == -signal.SIGSEGV, (bare.returncode, bare.stderr[-2000:])
    assert profiled.returncode == bare.returncode, (profiled.returncode, profiled.stderr[-2000:])
    assert "crashing" in profiled.stderr
    report = "Fatal Python error: Segmentation fault"
    assert (report in profiled.stderr) == (report in bare.stderr) == faulthandler, profiled.stderr[-2000:]


@pytest.fixture
def cpu_load():
    """Two busy processes for the test's duration (this machine's cores)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield
    for h in hogs:
        h.kill()
        h.wait()


def test_frames_and_memory_churned_under_load_never_crash_the_sampled_program(aggregator_factory, cpu_load):
    """Many short runs, each churning frames, chunks, arenas and threads while
    sampled at 10 kHz of each thread's CPU (every tick), on a machine whose
    cores are busy. No run may crash; a read that failed is a fault the guard
    caught, counted on its sample."""
    agg = aggregator_factory(exit_when_done=False)
    config = '{"capture_range": "api", "cpu": {"sampling_hz": 10000}}'
    runs = 8
    for i in range(runs):
        run = subprocess.run([sys.executable, str(ROOT / "tests/apps/churn_app.py"), "--seconds", "1.0"],
                             capture_output=True, text=True, env=agg.env(config=config), timeout=300)
        assert run.returncode == 0, (i, run.returncode, run.stderr[-3000:])
        out = json.loads(run.stdout.strip().splitlines()[-1])
        stats = out["stats"]
        assert out["boundaries"] > 0, out  # it found chunk boundaries to churn
        assert stats["cpu_samples"] >= 100, stats  # 10 kHz of its threads' CPU: sampled all along
        assert stats["cpu_kernel_reads"] == 0, stats  # Python code never blocks SIGSEGV: the guard read them all
        assert stats["cpu_guard_faults"] == stats["cpu_frames_unread"] + stats["cpu_walk_faults"], stats
    agg.stop()
    # Whether a fault happens here is the churn's luck (the frame test above
    # makes one happen): this test is that none of these runs crashed.

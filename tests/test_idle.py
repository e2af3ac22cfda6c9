"""An idle collector is close to silent: its work follows what there is to
do, not a fixed beat. Counted, not timed: tests/apps/idle_worker (one NVTX
mark, then only sleeps) reads its threads' wake-ups (voluntary context
switches, the kernel's count) over a few seconds of its own clock, and the
call counter preloaded into it (tests/apps/call_counter.c) counts its socket
sends and opens of /proc files. A busier machine can only lower these counts
(fewer wake-ups happen, none are added), so the bounds hold whatever the
load; before this design an idle collector's flush thread woke 57 times a
second and sent as many batches, and, armed, opened 290 /proc files a
second. (Its CPU cost is measured in make bench's idle section.)"""
from __future__ import annotations

import json
import subprocess
import sys
import time

CONTROLLER = r"""
import os, sys, time
import rlscope_ray
began, stop = sys.argv[1], sys.argv[2]
n = 0
deadline = time.monotonic() + 120  # a hang guard
while not os.path.exists(stop) and time.monotonic() < deadline:
    n += 1
    with rlscope_ray.step(n):
        if n == 1:
            open(began, "w").close()
        time.sleep(1.0)
"""


def _idle_worker(build_dir, agg, tmp_path, rank, measure_s, config=None, role="worker", extra=(), settle_s=1.5):
    """Runs idle_worker under the collector with the call counter; returns
    the calls it counted per second, and its report."""
    report = tmp_path / f"idle{rank}.json"
    env = agg.env(role=role, rank=rank, config=config)
    env["LD_PRELOAD"] = str(build_dir / "tests/apps/librlscope_test_call_counter.so")
    spawned = time.monotonic()
    r = subprocess.run([str(build_dir / "tests/apps/idle_worker"), "--report", str(report), "--settle-s", str(settle_s),
                        "--measure-s", str(measure_s), "--max-s", "100", *extra], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(report.read_text())
    out["life_s"] = time.monotonic() - spawned  # spawn to exit: the most its collector can have lived
    assert out["measured"] and "calls" in out, out  # the counter was preloaded and read
    seconds = out["wall_ns"] / 1e9  # rates over the worker's own measured span, whatever the load
    per_s = {k: v / seconds for k, v in out["calls"].items()}
    per_s.update({"wakeups " + k: v / seconds for k, v in out["wakeups"].items()})
    print(f"rank {rank}: {per_s}")
    return per_s, out


def _worker_beside_a_stepping_controller(build_dir, agg, tmp_path, **worker):
    """_idle_worker's rank 0 while CONTROLLER steps once a second."""
    began, stop = tmp_path / "began", tmp_path / "stop"
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(began), str(stop)],
                                  env=agg.env(role="controller"), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60  # a hang guard
        while not began.exists():
            assert controller.poll() is None and time.monotonic() < deadline, controller.stderr.read()
            time.sleep(0.02)
        per_s, out = _idle_worker(build_dir, agg, tmp_path, rank=0, measure_s=5, **worker)
    finally:
        stop.touch()
        controller.wait(timeout=60)
    assert controller.returncode == 0, controller.stderr.read()
    return per_s, out


def _process(agg, rank):
    run = json.loads((agg.out / "run.json").read_text())
    return next(p for p in run["processes"] if p["rank"] == rank)


def test_an_unselected_collector_wakes_about_once_a_second_and_reads_no_proc_files(build_dir, aggregator_factory,
                                                                                    tmp_path):
    # No controller: the worker's own config selects until a run's arrives.
    agg = aggregator_factory(config="ranks: [0]\n", exit_when_done=False)
    per_s, _ = _idle_worker(build_dir, agg, tmp_path, rank=1, measure_s=6, config="ranks: [0]")
    agg.stop()
    proc = _process(agg, 1)
    assert proc["selected"] is False
    # A heartbeat a second (flushes every 20 ms before: 50 a second), and a
    # probe burst (8 round trips) every 10 s at most while disarmed.
    assert per_s["wakeups rlscope-flush"] <= 1 + 8 / 6 + 0.5, per_s
    assert per_s["send"] <= 1 + 8 / 6 + 0.5, per_s  # one heartbeat batch a second (50 batches before)
    assert per_s["proc_opens"] == 0, per_s  # no thread listing, no off-CPU looks; memory is one pread
    assert per_s["timer_settime"] == 0, per_s
    # Clock bursts: the first at once, then every 10 s while disarmed (every second before).
    assert 1 <= proc["clock"]["bursts"] <= 2, proc["clock"]


def test_an_armed_collector_with_nothing_to_record_backs_off(build_dir, aggregator_factory, tmp_path):
    """Selected and armed (steps: all, a controller stepping all along) but
    recording nothing: flushes back off to one a second (20 ms before);
    each step's end still wakes it for the flush barrier; clock probes come
    every 10 s, as it records no events."""
    agg = aggregator_factory(config="steps: all\nranks: [0]\n")
    per_s, _ = _worker_beside_a_stepping_controller(build_dir, agg, tmp_path)
    log = agg.wait()
    proc = _process(agg, 0)
    assert proc["selected"] is True and proc["labels"]["cpu_sampling"].startswith("on:"), (proc, log)
    # Wake-ups: a flush a second of its own, one barrier a step (one a
    # second), a probe burst's 8 replies every 10 s: about 5 (58 a second
    # before).
    assert per_s["wakeups rlscope-flush"] < 25, per_s
    # /proc: per flush the thread listing and a look at the one recording
    # thread (3 reads: it wakes every 5 ms), the threads that block the
    # signal (ZeroMQ's two) once a second: about 10-20 (290 a second before).
    assert per_s["proc_opens"] < 40, per_s


def test_a_controller_between_selected_steps_backs_off(build_dir, aggregator_factory, tmp_path):
    """A controller watches for steps all run long, but between the steps
    chosen up front it is disarmed and records nothing: its flushes back off
    to one a second, as any idle collector's (it kept the 20 ms interval
    before: 50 a second). The step edges that move workers' windows wake it
    themselves (test_capture, test_always_on)."""
    agg = aggregator_factory(config="steps: [50]\n", exit_when_done=False)
    per_s, _ = _idle_worker(build_dir, agg, tmp_path, rank=None, measure_s=5, config="steps: [50]",
                            role="controller")
    agg.stop()
    proc = next(p for p in json.loads((agg.out / "run.json").read_text())["processes"] if p["role"] == "controller")
    assert proc["selected"] is True, proc
    # A flush a second (54 a second before; a probe burst's replies, when
    # they wake it, come on top).
    assert per_s["wakeups rlscope-flush"] < 25, per_s
    assert per_s["send"] < 25, per_s
    assert per_s["proc_opens"] == 0, per_s  # disarmed: no thread listing, no off-CPU looks


def test_always_on_a_working_process_flushes_a_figures_only_step_a_few_times_a_second(build_dir, aggregator_factory,
                                                                                        tmp_path):
    """Always on, in steps not chosen up front, a process at work (a sixth of
    a core inside ranges) flushes every 800 ms (forty times flush.interval_ms):
    a figures-only step is cut once every process's flushes passed its end,
    and most of a flush's cost, here and in the aggregator, is fixed. (Every
    400 ms before, and 100 ms before that: 2.5 and 10 a second; a chosen step
    keeps the 20 ms interval.)"""
    agg = aggregator_factory(config="always_on: {enabled: true}\nranks: [0]\n")
    # Measured from 3 s on: the first clock probe burst (at the hello) is
    # before it, the next 10 s later after it (8 sends each).
    per_s, out = _worker_beside_a_stepping_controller(build_dir, agg, tmp_path,
                                                      extra=("--period-ms", "5", "--range-us", "1000"), settle_s=3)
    agg.wait()
    proc = _process(agg, 0)
    assert proc["selected"] is True
    # A batch a flush: 1.25 a second (1.2 in one run; 2.5 at 400 ms).
    assert per_s["send"] < 2, (per_s, out)
    # Each batch sent wakes ZeroMQ's I/O thread, and so do the aggregator's
    # Controls: about 2 (4 at 400 ms, 11 at 100 ms).
    assert per_s["wakeups ZMQbg/IO/0"] < 7, (per_s, out)
    # On the aggregator's own clock its probes place nothing (same_clock):
    # bursts come every 10 s, the first at once (one a second before, while
    # it recorded: 6 in one run of this test). Its life as measured from
    # outside, spawn to exit: a slower machine lengthens it and the bound.
    life_s = out["life_s"]
    assert proc["clock"]["basis"] == "same_clock" and 1 <= proc["clock"]["bursts"] <= 2 + life_s // 10, (
        proc["clock"], life_s)


def test_an_aggregator_with_nothing_to_do_sleeps_until_something_is_due(aggregator_factory):
    """The aggregator's loop sleeps until a message or its next time-bound
    work (Aggregator::TickDueNs: at most 250 ms with nothing pending), not a
    fixed 50 ms poll: 20 wake-ups a second before, each tens of microseconds
    of its thread, most of an idle aggregator's CPU. Counted from the
    kernel's context switches of its main thread; a busier machine only
    lowers the count."""
    agg = aggregator_factory(exit_when_done=False)
    status = f"/proc/{agg.proc.pid}/task/{agg.proc.pid}/status"

    def switches():
        for line in open(status):
            if line.startswith("voluntary_ctxt_switches"):
                return int(line.split()[1])
        raise AssertionError(status)

    time.sleep(1.0)  # past its start
    before, t0 = switches(), time.monotonic()
    time.sleep(3.0)
    per_s = (switches() - before) / (time.monotonic() - t0)
    agg.stop()
    assert per_s < 8, per_s  # 4 a second, and the spool's look once a second

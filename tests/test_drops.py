"""Losses that never corrupt a step: a full per-thread ring drops whole ranges
(an open that was dropped drops its close) and keeps every step boundary (the
ring's reserve), and the drops are counted in the step's summary. A process
says once on its stderr when it starts dropping, and when no aggregator
answers. A late flush thread loses nothing at the defaults: the ring overflows
into reserved memory, by chunks, until buffers.max_mb."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

from conftest import ROOT, Trace, clean_env

STEPS = 8


def test_a_full_ring_drops_whole_ranges_and_never_a_step_boundary(aggregator_factory, tmp_path):
    # A 4 KB ring (128 records) and 1 MB of buffers in all (the ring's
    # overflow: 15 chunks, 30,720 records), drained once per 40,000 events
    # (RLSCOPE_TEST_LATE_FLUSH_EVENTS, below) under 20,000 ranges (40,002
    # events) a step: any step holds events past what ring and overflow keep
    # between two drains, so ranges are dropped in every step.
    agg = aggregator_factory(config="steps: all\n")
    # The production path (the real clock, start-up calibration, costs
    # measured in place, the fast lanes); only the flush thread's lateness
    # is the test's (RLSCOPE_TEST_LATE_FLUSH_EVENTS: a count, not a time).
    env = dict(agg.env(role="controller",
                       config='{"buffers": {"per_thread_kb": 4, "max_mb": 1}, "flush": {"interval_ms": 200}}'),
               RLSCOPE_TEST_LATE_FLUSH_EVENTS="40000")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "apps" / "dense_steps.py"), "--steps", str(STEPS),
                        "--ranges", "20000", "--report", str(tmp_path / "report.json")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "dropping events" in line]
    assert len(said) == 1 and "buffers.per_thread_kb=4" in said[0], r.stderr
    agg.wait()
    run = json.loads((agg.out / "run.json").read_text())
    assert run["steps_written"] == list(range(1, STEPS + 1))
    (proc,) = run["processes"]
    # Ring and overflow fill before the flush thread drains: drops in every step.
    assert proc["dropped"] > STEPS * 100, proc
    assert proc["unmatched"] == 0  # no close of a dropped open
    traced = summary_dropped = 0
    for n in range(1, STEPS + 1):
        trace = Trace(agg.out / f"step_{n}" / "trace.json")
        pid = trace.pid_of("(controller)")
        (step,) = trace.slices(pid, "step")
        ops = trace.slices(pid, "op")
        assert not any(s.get("args", {}).get("open") for s in trace.slices(pid)), "a range left open"
        assert len(ops) <= 20000
        summary = json.loads((agg.out / f"step_{n}" / "summary.json").read_text())
        summary_dropped += summary["totals"]["dropped"]
        traced += 2 * (len(ops) + 1)
    assert summary_dropped > 0  # the steps' summaries show them
    # Every event the program emitted is in a trace or counted dropped (a
    # dropped open's close among them), and what the collector kept arrived.
    stats = json.loads((tmp_path / "report.json").read_text())["stats"]
    assert proc["events_received"] == stats["events"]
    assert traced + proc["dropped"] == STEPS * (2 * 20000 + 2), (traced, proc["dropped"])


def test_a_process_says_once_that_no_aggregator_answers(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = clean_env()
    env.update({"RLSCOPE_AGGREGATOR": f"tcp://127.0.0.1:{port}", "RLSCOPE_CONFIG": "flush: {exit_timeout_ms: 0}"})
    # The collector says so once 5 s passed without an answer (its fixed
    # threshold); the program runs until the test has read the line (a
    # handshake, not a sleep), then ends: said once, not once a flush.
    go = tmp_path / "go"
    code = f"import os, time, rlscope_ray\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(300, p.kill)  # a hang's bound, not a timing
    watchdog.start()
    try:
        err = ""
        for line in p.stderr:
            err += line
            if "no answer from the aggregator" in line:
                go.touch()
                break
        err += p.communicate()[1]
    finally:
        watchdog.cancel()
    assert p.returncode == 0, err
    said = [line for line in err.splitlines() if "no answer from the aggregator" in line]
    assert len(said) == 1 and f"tcp://127.0.0.1:{port}" in said[0], err


# RLSCOPE_TEST_LATE_FLUSH_EVENTS (test only, collector/recording.h): the flush
# thread drains once per that many events, as a flush thread that gets no core
# for a while; a fixed count, not a timing.
LATE_EVENTS = 200000
RANGES = 40000  # a step: 2 * RANGES + 2 events


def _run_late(agg, tmp_path, config=None):
    """dense_steps.py on the production path (the real clock, calibration,
    costs measured in place, the fast lanes), its flush thread late by a
    count of events."""
    env = dict(agg.env(role="controller", config=config), RLSCOPE_TEST_LATE_FLUSH_EVENTS=str(LATE_EVENTS))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "apps" / "dense_steps.py"), "--steps", "4",
                        "--ranges", str(RANGES), "--report", str(tmp_path / "report.json")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    agg.wait()
    run = json.loads((agg.out / "run.json").read_text())
    assert run["steps_written"] == [1, 2, 3, 4]
    (proc,) = run["processes"]
    traced = 0
    for n in range(1, 5):
        trace = Trace(agg.out / f"step_{n}" / "trace.json")
        pid = trace.pid_of("(controller)")
        assert len(trace.slices(pid, "step")) == 1
        assert not any(s.get("args", {}).get("open") for s in trace.slices(pid)), "a range left open"
        traced += 2 * (len(trace.slices(pid, "op")) + 1)
    stats = json.loads((tmp_path / "report.json").read_text())["stats"]
    assert proc["events_received"] == stats["events"]
    assert proc["unmatched"] == 0
    return r, proc, traced


def test_at_the_defaults_a_late_flush_thread_loses_nothing(aggregator_factory, tmp_path):
    # 200,000 events before the first drain: six times what the default 1 MiB
    # ring (32,768 records) holds. The ring overflows into the thread's store,
    # in chunks within buffers.max_mb (256), and nothing is dropped.
    agg = aggregator_factory(config="steps: all\n")
    r, proc, traced = _run_late(agg, tmp_path)
    assert not [line for line in r.stderr.splitlines() if "dropping events" in line], r.stderr
    assert proc["dropped"] == 0, proc
    assert traced == 4 * (2 * RANGES + 2)  # every event, in its step
    # Said in run.json: how often, and the most memory it took at once (>= what the ring could not hold).
    episodes, peak_mb = proc["labels"]["ring_overflow"].split(" episodes, peak ")
    assert int(episodes) >= 1 and int(peak_mb.split()[0]) >= 4, proc["labels"]


def test_a_late_flush_thread_past_buffers_max_mb_drops_counted_whole_ranges(aggregator_factory, tmp_path):
    # max_mb 2: the ring's 1 MiB, and 1 MiB (32,768 records) of overflow.
    agg = aggregator_factory(config="steps: all\n")
    r, proc, traced = _run_late(agg, tmp_path, config='{"buffers": {"max_mb": 2}}')
    said = [line for line in r.stderr.splitlines() if "dropping events" in line]
    assert len(said) == 1 and "buffers.max_mb=2" in said[0], r.stderr
    assert proc["dropped"] >= LATE_EVENTS - 2 * 32768, proc
    assert traced + proc["dropped"] == 4 * (2 * RANGES + 2), (traced, proc["dropped"])

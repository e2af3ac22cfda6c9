"""Losses that never corrupt a step: a full per-thread ring drops whole ranges
(an open that was dropped drops its close) and keeps every step boundary (the
ring's reserve), and the drops are counted in the step's summary. A process
says once on its stderr when it starts dropping, and when no aggregator
answers."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from conftest import ROOT, Trace

STEPS = 8


def test_a_full_ring_drops_whole_ranges_and_never_a_step_boundary(aggregator_factory, tmp_path):
    # 4 KB rings (128 records) flushed every 200 ms (and at each half ring)
    # under 20,000 ranges a step: ranges are dropped in every step.
    agg = aggregator_factory(config="steps: all\n")
    # Fixed test costs: no start-up calibration, whose own (unshipped-to-any-step)
    # events would blur the accounting below.
    env = dict(agg.env(role="controller", config='{"buffers": {"per_thread_kb": 4}, "flush": {"interval_ms": 200}}'),
               RLSCOPE_TEST_COSTS="push=1,pop=1")
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
    # The ring (128 records) fills in tens of microseconds, faster than the
    # flush thread answers its half-ring wake-ups: drops in every step.
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
    env.update({"RLSCOPE_AGGREGATOR": f"tcp://127.0.0.1:{port}", "RLSCOPE_CONFIG": "flush: {exit_timeout_ms: 0}"})
    # The collector waits 5 s for an answer before it says so (not a timing of ours: a fixed threshold).
    r = subprocess.run([sys.executable, "-c", "import time, rlscope_ray; time.sleep(6.5)"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "no answer from the aggregator" in line]
    assert len(said) == 1 and f"tcp://127.0.0.1:{port}" in said[0], r.stderr

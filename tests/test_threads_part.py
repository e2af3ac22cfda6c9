"""The `threads` part of a step's stated uncertainty, on real processes at the
default config (real clock, CPU sampling, off-CPU looks).

The collector's flush thread's CPU in a step is never removed; half of it is
stated (aggregator/step_profile.h, UncertaintyParts). Where a process's work
is its recording threads running (its last 256 CPU samples on them, none to
speak of on its other threads, and them on a CPU or waiting for one), the
flush thread took from its steps at most what those threads
waited on a run queue, read exactly from schedstat: the part is then half the
smaller of the two. A dense single-threaded Python loop is such a process;
torch's matmuls on its intra-op pool, threads that record nothing, are not.
What is asserted is the rule the summary states, not how large either is.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

DENSE = ROOT / "tests/apps/dense_steps.py"


def _steps(agg, style: str, steps: int, ranges: int) -> list:
    env = agg.env(role="controller", config='{"buffers": {"per_thread_kb": 8192}}')
    r = subprocess.run([sys.executable, str(DENSE), "--steps", str(steps), "--ranges", str(ranges), "--style", style],
                       env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    agg.wait(timeout=90)
    return [json.loads((agg.out / f"step_{n}" / "summary.json").read_text()) for n in range(1, steps + 1)]


@pytest.mark.parametrize("style, ranges, part_of", [
    # One thread, on a CPU throughout: 80 steps of 20k pairs (about a second
    # of its CPU), so that at any CPU timer rate from 250 a second the last
    # 256 samples (RecordStores::kRecentSamples) come after start-up (the
    # speed watch's first probes, sampled before it is known as the
    # collector's, fall among them in a shorter run).
    ("push", 20000, "run_queue_wait"),
    # torch's intra-op pool runs the matmuls beside the annotated thread.
    ("torch", 400, "profiler_thread"),
])
def test_the_threads_part_is_half_the_run_queue_waits_only_where_the_process_runs_on_its_recording_threads(
        aggregator_factory, style, ranges, part_of):
    agg = aggregator_factory()
    summaries = _steps(agg, style, 80, ranges)
    for s in summaries:
        (proc,) = s["processes"]
        o = proc["overhead"]
        threads = s["correction"]["uncertainty_parts_ms"]["threads"]
        # Whichever it is half of, the summary says so, and it is that.
        of = {"profiler_thread": o["profiler_thread_ms"],
              "run_queue_wait": min(o["profiler_thread_ms"], o["run_queue_wait_ms"])}[o["threads_part_of"]]
        assert threads == pytest.approx(of / 2, rel=1e-3, abs=2e-6), (s["step"], o)
        assert threads <= o["profiler_thread_ms"] / 2 * (1 + 1e-3) + 2e-6
        if part_of == "profiler_thread":  # never bounded: its pool's CPU is off the recording thread
            assert o["threads_part_of"] == "profiler_thread", (s["step"], o)
    # The evidence is the recent samples': by the last step it is in.
    last = summaries[-1]["processes"][0]["overhead"]
    assert last["threads_part_of"] == part_of, last

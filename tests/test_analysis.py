"""rlscope_ray.analysis: the breakdown engine's sweep from Python, on
constructed intervals with known answers and on a real run, where it must
reproduce summary.json's breakdown from the step's trace.json."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import ROOT


def test_sweep_on_constructed_intervals():
    from rlscope_ray import analysis as a

    # Window [0, 100). CPU [0,30) with [10,20) nested (another thread), then
    # [60,80); GPU: two streams overlapping each other, [20,40) and [25,50).
    o = a.resource_overlap([(60, 80), (0, 30), (10, 20)], [(25, 50), (20, 40)], 0, 100)
    assert (o.cpu_only, o.gpu_only, o.cpu_gpu, o.idle) == (40, 20, 10, 30)
    assert o.total == 100
    assert a.union([(50, 60), (0, 10), (5, 20), (20, 25), (90, 200)], 2, 100) == [(2, 25), (50, 60), (90, 100)]
    assert a.subtract([(0, 100)], [(10, 20), (90, 210)]) == [(0, 10), (20, 90)]
    assert a.subtract([(50, 100), (0, 60)], [(50, 60), (10, 20)]) == [(0, 10), (20, 50), (60, 100)]  # any order
    # One 1 ns kernel in 2 of 4 bins: busy 0.5 %, "utilization" 50 %.
    assert a.naive_utilization([(10, 11), (260, 261)], 0, 400, 100) == pytest.approx(0.5)
    assert a.NAIVE_SAMPLE_NS == 166_666_667
    with pytest.raises(TypeError):
        a.resource_overlap([(0, "x")], [], 0, 1)
    with pytest.raises(ValueError, match="at most 10 million bins"):
        a.naive_utilization([], 0, 10**15, 1000)


def test_trace_sweep_reproduces_the_summary_breakdown(build_dir, aggregator_factory, tmp_path):
    from rlscope_ray import analysis as a

    agg = aggregator_factory()
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    worker = subprocess.Popen([sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "120",
                               "--stop-file", str(stop), "--report", str(tmp_path / "w.json"), "--ready", str(ready)],
                              env=agg.env(role="worker", rank=1))
    deadline = time.monotonic() + 60  # a hang guard
    while not ready.exists():
        assert worker.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "2", "--step-ms", "200"],
                   env=agg.env(role="controller"), check=True, timeout=120, stdout=subprocess.DEVNULL)
    stop.touch()
    assert worker.wait(timeout=60) == 0
    log = agg.wait()
    for n in (1, 2):
        step_dir = agg.out / f"step_{n}"
        summary = json.loads((step_dir / "summary.json").read_text())
        procs = a.trace_intervals(str(step_dir / "trace.json"))
        trace = json.loads((step_dir / "trace.json").read_text())
        (step_ev,) = [e for e in trace["traceEvents"] if e.get("name") == "step" and e.get("ph") == "X"]
        lo = round(step_ev["ts"] * 1000)
        hi = lo + round(step_ev["dur"] * 1000)  # the corrected step
        (w,) = [p for p in procs.values() if "nvtx_worker.py" in p.label]
        assert w.cpu, log
        cpu = a.subtract(a.union(w.cpu, lo, hi), a.union(w.waits, lo, hi))
        o = a.resource_overlap(cpu, w.gpu, lo, hi)
        (row,) = [r for r in summary["breakdown"] if r["subtask"] == "step" and r["process"] == w.label]
        # The worker runs in its ranges throughout; summary.json prints 6
        # significant digits.
        assert o.cpu_only > 0
        assert o.cpu_only / 1e6 == pytest.approx(row["cpu_only_ms"], rel=1e-5, abs=1e-4)
        assert o.idle / 1e6 == pytest.approx(row["idle_ms"], rel=1e-5, abs=1e-4)
        assert o.gpu_only == o.cpu_gpu == 0 and row["gpu_only_ms"] == row["cpu_gpu_ms"] == 0

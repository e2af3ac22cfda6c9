"""rlscope_ray.analysis: the breakdown engine's sweep from Python on
constructed intervals with known answers, and the breakdown the aggregator
wrote, read back from a real run's summary.json."""
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


_ROW_MS = ("window_ms", "cpu_only_ms", "gpu_only_ms", "cpu_gpu_ms", "idle_ms", "overhead_ms")


def test_breakdown_reads_the_rows_and_refuses_what_is_not_a_summary(tmp_path):
    from rlscope_ray import analysis as a

    row = {"subtask": "gen", "occurrences": 2, "rank": 3, "process": "w / pid 7", "session": "s", "role": "worker",
           "window_ms": 10.0, "cpu_only_ms": 4.0, "gpu_only_ms": 3.0, "cpu_gpu_ms": 2.0, "idle_ms": 1.0,
           "overhead_ms": 0.5, "attribution": None}
    (tmp_path / "step_1").mkdir()
    (tmp_path / "step_1" / "summary.json").write_text(json.dumps({"step": 1, "breakdown": [row]}))
    (r,) = a.breakdown(tmp_path / "step_1")
    assert (r.subtask, r.process, r.rank, r.role, r.occurrences) == ("gen", "w / pid 7", 3, "worker", 2)
    assert [getattr(r, k) for k in _ROW_MS] == [row[k] for k in _ROW_MS] and r.attribution is None
    assert r.overlap == a.Overlap(4_000_000, 3_000_000, 2_000_000, 1_000_000) and r.overlap.total == 10_000_000
    assert a.breakdown(str(tmp_path / "step_1" / "summary.json")) == [r]
    old = tmp_path / "old.json"  # written before summaries had a breakdown
    old.write_text(json.dumps({"step": 1}))
    assert a.breakdown(old) == []
    for text, why in (("[]", "not a step summary"), ('{"breakdown": [{"subtask": "gen"}]}', r"breakdown\[0\]")):
        old.write_text(text)
        with pytest.raises(ValueError, match=why):
            a.breakdown(old)


def test_breakdown_is_the_summarys_for_a_real_run(build_dir, aggregator_factory, tmp_path):
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
        rows = a.breakdown(step_dir)
        assert len(rows) == len(summary["breakdown"]) >= 2, log
        for row, r in zip(rows, summary["breakdown"]):
            assert (row.subtask, row.process, row.rank, row.role, row.session, row.occurrences) == \
                (r["subtask"], r["process"], r["rank"], r["role"], r["session"], r["occurrences"])
            assert [getattr(row, k) for k in _ROW_MS] == [r[k] for k in _ROW_MS]
            assert row.attribution == r.get("attribution")
            # The four segments add up to the window (summary.json prints 6 significant digits).
            assert row.overlap.total / 1e6 == pytest.approx(row.window_ms, rel=1e-5, abs=1e-4)
        # Both sides of the step, the controller's windows among them: what
        # re-deriving the breakdown from trace.json used to get wrong.
        roles = {row.role for row in rows if row.subtask == "step"}
        assert roles == {"controller", "worker"}, rows
        (w,) = [row for row in rows if row.subtask == "step" and "nvtx_worker.py" in row.process]
        assert w.rank == 1 and w.cpu_only_ms > 0 and w.gpu_only_ms == w.cpu_gpu_ms == 0

"""Clock alignment with genuinely different clocks: collectors in Linux time
namespaces (`unshare --time`), whose CLOCK_MONOTONIC is shifted by a known
offset while the underlying clock is shared, so the truth is known."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, Trace

OFFSETS_S = (-500, 0, 1234)


def _namespaces_work() -> str:
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    r = subprocess.run(["unshare", "--fork", "--time", "--monotonic", "100", "true"], capture_output=True, text=True)
    return "" if r.returncode == 0 else f"time namespaces are not permitted here: {r.stderr.strip()}"


pytestmark = pytest.mark.skipif(bool(_namespaces_work()), reason=_namespaces_work() or "ok")


def test_workers_with_shifted_clocks_land_on_the_aggregators_timeline(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory()
    workers = []
    for rank, offset in enumerate(OFFSETS_S):
        report = tmp_path / f"worker{rank}.json"
        ready = tmp_path / f"worker{rank}.ready"
        cmd = ["unshare", "--fork", "--time", "--monotonic", str(offset), sys.executable,
               str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "2.5", "--report", str(report),
               "--ready", str(ready)]
        workers.append((offset, report, ready, subprocess.Popen(cmd, env=agg.env(role="worker", rank=rank))))
    for _, _, ready, proc in workers:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
    time.sleep(1.2)  # a second burst of probes: offset and drift
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "3", "--step-ms", "60"],
                   env=agg.env(role="controller"), check=True, timeout=60)
    for _, _, _, proc in workers:
        assert proc.wait(timeout=30) == 0
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_1", "step_2", "step_3"], log

    trace = Trace(agg.out / "step_2" / "trace.json")
    (step,) = trace.slices(trace.pid_of("(controller)"), "step")
    s0, s1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    summary = json.loads((agg.out / "step_2" / "summary.json").read_text())
    clocks = {p["rank"]: p["clock"] for p in summary["processes"] if p["role"] == "worker"}
    for rank, (offset, report, _, _) in enumerate(workers):
        clock = clocks[rank]
        assert clock["aligned"] and clock["probes"] >= 8
        # The estimate: aggregator minus collector is minus the namespace offset.
        error_ns = abs(clock["offset_ns"] + offset * 1_000_000_000)
        assert error_ns <= clock["bound_ns"], (rank, clock)
        pid = trace.pid_of(f"(worker, rank {rank})")
        spans = [e for e in trace.slices(pid, "py_annotated")
                 if not e["args"].get("clipped_begin") and not e["args"].get("clipped_end")]
        assert spans, f"rank {rank} has nothing inside step 2"
        # Each worker range sits where it truly happened: its own clock reading
        # minus the namespace offset, within the stated bound (+ the worker's own
        # clock read just before the NVTX call).
        own = {r["begin_ns"] - offset * 1_000_000_000: r for r in json.loads(report.read_text())["ranges"]
               if r["name"] == "py_annotated"}
        for e in spans:
            ts_ns = float(e["ts"]) * 1000
            assert s0 <= float(e["ts"]) and float(e["ts"]) + float(e["dur"]) <= s1
            nearest = min(own, key=lambda t: abs(t - ts_ns))
            assert abs(nearest - ts_ns) <= clock["bound_ns"] + 200_000, (rank, nearest, ts_ns, clock)

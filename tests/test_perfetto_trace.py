"""trace.pftrace, Perfetto's protobuf format, holds what trace.json holds.

Each trace is read back with the `perfetto` package's own protos
(tests/pftrace.py) and compared with the JSON trace of the same step:
tracks, slices (name, category, times, args), start/end ranges, instants
and launch flows. The golden run (tests/cpp/golden_test.cc) has every kind
of record, GPU ones included; the demo is a real multi-process run.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import pftrace
import trace_processor
from conftest import ROOT, run_local_demo

GOLDEN = ROOT / "tests" / "golden"
needs_trace_processor = pytest.mark.skipif(
    trace_processor.shell() is None,
    reason="Perfetto's trace_processor_shell is not on this machine ($RLSCOPE_TRACE_PROCESSOR, "
           "../shared/tools/trace_processor_shell or PATH); its own download needs a network")


def assert_trace_processor_reads_what_the_json_holds(step_dir) -> dict:
    """Perfetto's trace_processor loads step_dir/trace.pftrace with no stat
    but the harmless ones, and finds what trace.json holds: processes,
    tracks, slices and instants with their args, flows and counters."""
    pf = step_dir / "trace.pftrace"
    stats = trace_processor.stats(pf)
    assert {s["name"] for s in stats} <= trace_processor.HARMLESS_STATS, stats  # every non-zero stat, listed
    want = trace_processor.json_as_view(pftrace.json_view(step_dir / "trace.json"))
    got = trace_processor.view(pf)
    for key in want:
        assert got[key] == want[key], (key, step_dir)
    return got


@pytest.mark.parametrize("step", [1, 2, 3])
def test_the_golden_runs_perfetto_trace_holds_what_its_json_trace_holds(step):
    j = pftrace.assert_same_as_json(GOLDEN / f"step_{step}")
    # The golden run has every kind of record: what was compared is not empty.
    cats = {k[2] for k in j["slices"]}
    assert {"gpu", "gpu_memcpy", "cuda_api", "cpu_samples", "off_cpu", "nvtx", "nvtx.async"} <= cats, cats
    assert j["instants"] and len(j["processes"]) >= 3
    # Flows from each launch to its kernel or copy, and from the controller's
    # Ray call submits to the workers' executions, in another process.
    pids = lambda f: (f[0][0][0], f[1][0][0])  # noqa: E731
    assert {pids(f) for f in j["flows"]} == {(200, 200), (100, 200), (100, 300)}, j["flows"]
    assert {k[0][1] for k in j["counters"]} >= {"CPU threads: python", "CPU threads: backend", "GPU 0 busy streams"}


@needs_trace_processor
@pytest.mark.parametrize("step", [1, 2, 3])
def test_perfettos_trace_processor_reads_the_golden_runs_trace_as_its_json(step):
    got = assert_trace_processor_reads_what_the_json_holds(GOLDEN / f"step_{step}")
    cats = {k[2] for k in got["slices"]}
    assert {"gpu", "gpu_memcpy", "cuda_api", "cpu_samples", "off_cpu", "nvtx", "nvtx.async"} <= cats, cats
    assert len(got["flows"]) == 5 and got["counters"] and len(got["processes"]) == 3


def test_a_real_runs_steps_are_written_in_both_formats_with_the_same_events(build_dir, tmp_path):
    r, out = run_local_demo(build_dir, tmp_path,
                            "steps: [2, 3]\nflush: {step_grace_ms: 3000}\noutput: {formats: [json, pftrace]}\n")
    assert r.returncode == 0, r.stderr
    for step in (2, 3):
        j = pftrace.assert_same_as_json(out / f"step_{step}")
        summary = json.loads((out / f"step_{step}" / "summary.json").read_text())
        # Every range of the step (no GPU here: the rest are sampled CPU).
        assert sum(n for k, n in j["slices"].items() if k[2] not in ("cpu_samples", "off_cpu")) == sum(
            p["spans"] for p in summary["processes"])
        step_dir = out / f"step_{step}"
        assert (step_dir / "trace.pftrace").stat().st_size < (step_dir / "trace.json").stat().st_size
        if trace_processor.shell() is not None:  # Perfetto's own reader, where it is here
            got = assert_trace_processor_reads_what_the_json_holds(step_dir)
            assert len(got["processes"]) == 4  # the controller and ranks 0-2


def test_a_wrong_output_format_is_said_with_its_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("steps: [2]\noutput:\n  formats: [json, protobuf]\n")
    r = subprocess.run([sys.executable, "-m", "rlscope_ray.cli", "check", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert f"{cfg}:3:" in r.stderr and "'protobuf' is not one of: json | pftrace | db" in r.stderr, r.stderr


def test_output_formats_choose_which_trace_files_a_step_gets(build_dir, tmp_path):
    r, out = run_local_demo(build_dir, tmp_path,
                            "steps: [2]\nflush: {step_grace_ms: 3000}\noutput: {formats: [pftrace]}\n", steps=2)
    files = sorted(p.name for p in (out / "step_2").iterdir())
    assert files == ["summary.json", "trace.pftrace"], (files, r.stderr[-2000:])
    assert pftrace.read(out / "step_2" / "trace.pftrace").slices

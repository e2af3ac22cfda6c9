"""Overhead correction on a dense-annotation workload whose uninstrumented
step time is measured in the same test: 100k `nvtx` ranges per step around a
small Python function (tests/apps/dense_steps.py)."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT, Trace, clean_env

APP = ROOT / "tests/apps/dense_steps.py"
STEPS = 5
RANGES = 100_000


def _uninstrumented(tmp_path, tag: str) -> list:
    env = clean_env()
    report = tmp_path / f"plain_{tag}.json"
    subprocess.run([sys.executable, str(APP), "--steps", str(STEPS), "--ranges", str(RANGES),
                    "--report", str(report)], env=env, check=True, timeout=120, stdout=subprocess.DEVNULL)
    return json.loads(report.read_text())["steps_ms"]


def _errors(plain: list, raw: list, corrected: list) -> tuple:
    """Relative errors of the median raw and corrected steps against the
    median uninstrumented one (printed for the log)."""
    base = statistics.median(plain)
    raw_err = abs(statistics.median(raw) - base) / base
    corr_err = abs(statistics.median(corrected) - base) / base
    print(f"uninstrumented {base:.1f} ms, raw {statistics.median(raw):.1f} ms ({100 * raw_err:+.1f}%), "
          f"corrected {statistics.median(corrected):.1f} ms ({100 * corr_err:.1f}% off)")
    return raw_err, corr_err


def test_corrected_step_time_lands_near_the_uninstrumented_one(aggregator_factory, tmp_path):
    # Uninstrumented before and after the profiled run, so machine drift
    # shows up as spread between the two.
    plain = _uninstrumented(tmp_path, "a")
    agg = aggregator_factory(config="buffers: {per_thread_kb: 32768}\n", nice=True)
    report = tmp_path / "profiled.json"
    subprocess.run([sys.executable, str(APP), "--steps", str(STEPS), "--ranges", str(RANGES),
                    "--report", str(report)],
                   env=agg.env(role="controller", config='{"buffers": {"per_thread_kb": 32768}}'),
                   check=True, timeout=120, stdout=subprocess.DEVNULL)
    agg.wait(timeout=60)
    plain += _uninstrumented(tmp_path, "b")

    raw, corrected = [], []
    for n in range(1, STEPS + 1):
        summary = json.loads((agg.out / f"step_{n}" / "summary.json").read_text())
        assert summary["correction"]["enabled"] is True
        (proc,) = summary["processes"]
        assert proc["dropped_total"] == 0
        # Every range and the step were costed: the nvtx package's caller-side
        # cost was calibrated in the process, and the collector's own.
        assert proc["overhead"]["events"] >= 2 * RANGES
        assert proc["overhead"]["costs_ns"]["py_nvtx_push"] > 0
        assert proc["overhead"]["costs_ns"]["push"] > 0
        raw.append(summary["duration_ms"])
        corrected.append(summary["correction"]["duration_ms"])
        # Each range is a sub-task occurrence: the breakdown counts them all,
        # the critical path lists the longest 256 and says how many it left out.
        (row,) = [r for r in summary["breakdown"] if r["subtask"] == "op"]
        assert row["occurrences"] == RANGES
        assert len(summary["critical_path"]["segments"]) == 256
        assert summary["critical_path"]["segments_omitted"] == RANGES - 256
        assert (agg.out / f"step_{n}" / "summary.json").stat().st_size < 256 * 1024
    # The raw profile is what the program measured of itself under the profiler.
    measured = json.loads(report.read_text())["steps_ms"]
    assert abs(statistics.median(raw) - statistics.median(measured)) < 0.05 * statistics.median(measured)

    raw_err, corr_err = _errors(plain, raw, corrected)
    # The annotations inflate this workload by well over half (the `nvtx`
    # package builds attributes on every call once a tool is attached).
    assert raw_err > 0.3
    assert corr_err < raw_err
    # Tolerance: start-up calibration measures the cost in a loop like, not
    # inside, the workload, and the profiled run's overhead varies from run
    # to run on this 2-core machine, where the aggregator shares the cores:
    # typically by a few percent, but one CI run was slowed to +87 % raw
    # (against 66-80 %), which no per-event cost explains. Over a dozen runs
    # the corrected median landed 0.2-6.5 % from the uninstrumented one, and
    # 18.2 % in that CI run. 25 % still fails a correction that misses a
    # third of the overhead, and any run without the caller-side calibration
    # (the raw error is 66-87 %).
    assert corr_err < 0.25, (plain, raw, corrected)

    from rlscope_ray.report import write_report

    page = open(write_report(str(agg.out), None)).read()
    assert f"{RANGES - 256} shorter sub-task occurrences are not listed" in page


def test_a_controller_waiting_on_a_ray_actor_is_corrected_for_the_actors_overhead(aggregator_factory, tmp_path):
    """The actor (rank 0) carries the dense annotations; the driver only
    waits for it (ray.get) inside its sub-task "gen". Correcting each thread
    alone would leave the driver's step inflated; its window ends as much
    earlier as the awaited call does once the actor is corrected."""
    app = ROOT / "tests/apps/ray_wait_app.py"
    steps, ranges = 4, 100_000

    def run(env, tag):
        report = tmp_path / f"{tag}.json"
        subprocess.run([sys.executable, str(app), "--steps", str(steps), "--ranges", str(ranges), "--report",
                        str(report)], env=env, check=True, timeout=180, stdout=subprocess.DEVNULL)
        return json.loads(report.read_text())["steps_ms"][1:]  # step 1 warms up

    plain = run(clean_env("RAY_ADDRESS", "RANK"), "plain_a")
    agg = aggregator_factory(config="buffers: {per_thread_kb: 32768}\n", nice=True)
    run(dict(agg.env(role="controller", config='{"buffers": {"per_thread_kb": 32768}}'), RAY_ADDRESS=""),
        "profiled")
    agg.wait(timeout=60)
    plain += run(clean_env("RAY_ADDRESS", "RANK"), "plain_b")

    raw, corrected = [], []
    for n in range(2, steps + 1):
        summary = json.loads((agg.out / f"step_{n}" / "summary.json").read_text())
        (controller,) = [p for p in summary["processes"] if "ray_wait_app.py" in p["label"]]
        (actor,) = [p for p in summary["processes"] if p["rank"] == 0]
        assert actor["overhead"]["events"] >= 2 * ranges and actor["overhead"]["waits_ms"] == 0
        # The driver recorded a handful of events; nearly all it lost was
        # waiting on the actor's overhead, paid inside the awaited call.
        assert controller["overhead"]["events"] < 20
        assert controller["overhead"]["waits_ms"] == pytest.approx(actor["overhead"]["subtracted_ms"], rel=0.05)
        assert summary["correction"]["subtracted_ms"] >= controller["overhead"]["waits_ms"]
        raw.append(summary["duration_ms"])
        corrected.append(summary["correction"]["duration_ms"])
        # The corrected "gen" still holds the actor's corrected "generate".
        trace = Trace(agg.out / f"step_{n}" / "trace.json")
        (gen,) = trace.slices(controller["pid"], "gen")
        (generate,) = trace.slices(actor["pid"], "generate")
        assert float(gen["dur"]) >= float(generate["dur"])
    raw_err, corr_err = _errors(plain, raw, corrected)
    assert raw_err > 0.3
    # Tolerance as above; Ray adds costs of its own around the call (its
    # method wrapper is not calibrated) and runs four more processes on the
    # 2 cores: over three runs this landed 0.3-13 % off. Without the waits
    # the error is the raw one, 70-90 %.
    assert corr_err < 0.25, (plain, raw, corrected)


def test_a_child_that_inherits_the_controller_role_is_corrected_as_a_worker(aggregator_factory, tmp_path):
    """A child of the profiled controller inherits RLSCOPE_ROLE=controller
    (tests/apps/wait_pair.py). The aggregator keeps the first controller as
    the one whose steps and sub-tasks count, and corrects the child as a
    worker; nothing links the child's work to the controller's wait (no Ray
    call), so the controller's step keeps it."""
    agg = aggregator_factory(config="buffers: {per_thread_kb: 32768}\n")
    subprocess.run([sys.executable, str(ROOT / "tests/apps/wait_pair.py"), "--steps", "3", "--ranges", "20000"],
                   env=agg.env(role="controller", config='{"buffers": {"per_thread_kb": 32768}}'),
                   check=True, timeout=120, stdout=subprocess.DEVNULL)
    agg.wait(timeout=60)
    for n in (2, 3):
        summary = json.loads((agg.out / f"step_{n}" / "summary.json").read_text())
        assert [p["role"] for p in summary["processes"]] == ["controller", "controller"]
        controller, child = sorted(summary["processes"], key=lambda p: p["overhead"]["events"])
        assert child["overhead"]["events"] >= 2 * 20000 and child["overhead"]["subtracted_ms"] > 0
        assert controller["overhead"]["waits_ms"] == child["overhead"]["waits_ms"] == 0
        # The step and its sub-tasks are the real controller's.
        assert summary["correction"]["subtracted_ms"] == pytest.approx(controller["overhead"]["subtracted_ms"],
                                                                       abs=1e-3)
        assert [g["subtask"] for g in summary["critical_path"]["segments"]] == ["gen", "adv"]
        trace = Trace(agg.out / f"step_{n}" / "trace.json")
        assert trace.slices(controller["pid"], "step") and not trace.slices(child["pid"], "step")


def test_an_nvtx_package_of_another_shape_never_fails_the_import(aggregator_factory, tmp_path):
    # Calibration reads the `nvtx` package's internals (nvtx.nvtx.get_domain,
    # dummy_domain). A version without them costs the correction, not the job.
    pkg = tmp_path / "site" / "nvtx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def enabled():\n    return True\n\n"
                                     "def push_range(*a, **k):\n    pass\n\n"
                                     "def pop_range(*a, **k):\n    pass\n")
    (pkg / "nvtx.py").write_text("# no get_domain, no dummy_domain\n")
    agg = aggregator_factory()
    env = dict(agg.env(role="worker"), PYTHONPATH=str(tmp_path / "site"))
    r = subprocess.run([sys.executable, "-c", "import rlscope_ray; print(rlscope_ray.stats()['threads'] >= 0)"],
                       env=env, capture_output=True, text=True, timeout=60)
    agg.stop()
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr
    assert "could not calibrate the `nvtx` package's overhead (AttributeError" in r.stderr

"""`rlscope-ray calibrate`: the A/B calibration of correction.scale on the
user's own command (rlscope_ray.ab_calibration), and the RLSCOPE_STEP_TIMES
hook it times steps with."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, clean_env

APP = ROOT / "tests/apps/dense_steps.py"
CLI = [sys.executable, "-m", "rlscope_ray.cli"]
BUFFERS = "buffers: {per_thread_kb: 32768}\n"


def test_estimate_scale_is_measured_inflation_over_removed_overhead():
    from rlscope_ray.ab_calibration import estimate_scale

    # Two runs each way; step 3 was not captured in one profile, so only
    # steps 1 and 2 count. Per step: medians 10 / 22 ms, 8 ms removed.
    plain = [{1: 10.0, 2: 10.0, 3: 99.0}, {1: 10.0, 2: 10.0, 3: 99.0}]
    profiled = [{1: 22.0, 2: 21.0, 3: 1.0}, {1: 22.0, 2: 23.0, 3: 1.0}]
    removed = [{1: 8.0, 2: 8.0}, {1: 8.0, 2: 8.0, 3: 5.0}]
    est = estimate_scale(plain, profiled, removed)
    assert est.steps == [1, 2]
    assert est.scale == pytest.approx(12.0 / 8.0)
    assert est.inflation == pytest.approx(1.2)
    assert est.corrected_error_at_scale_1 == pytest.approx(0.4)
    assert not est.clamped


def test_estimate_scale_leaves_out_the_first_of_three_steps():
    from rlscope_ray.ab_calibration import estimate_scale

    # Step 1 starts things up (80 ms more profiled); steps 2 and 3 are steady.
    est = estimate_scale([{1: 100.0, 2: 10.0, 3: 10.0}], [{1: 200.0, 2: 20.0, 3: 20.0}], [{1: 5.0, 2: 5.0, 3: 5.0}])
    assert est.steps == [2, 3]
    assert est.scale == pytest.approx(2.0)


def test_estimate_scale_refuses_what_it_cannot_measure():
    from rlscope_ray.ab_calibration import CalibrationError, estimate_scale

    with pytest.raises(CalibrationError, match="rlscope_ray.step"):
        estimate_scale([{1: 1.0}], [{2: 2.0}], [{2: 1.0}])
    with pytest.raises(CalibrationError, match="removed no overhead"):
        estimate_scale([{1: 1.0}], [{1: 2.0}], [{1: 0.0}])
    # Profiled faster than uninstrumented: noise, not a negative cost.
    est = estimate_scale([{1: 10.0}], [{1: 9.0}], [{1: 1.0}])
    assert est.scale == 0.0 and est.clamped


def test_step_times_are_appended_with_or_without_a_collector(tmp_path):
    times = tmp_path / "steps"
    env = dict(clean_env(), RLSCOPE_STEP_TIMES=str(times))
    subprocess.run([sys.executable, str(APP), "--steps", "3", "--ranges", "1000"], env=env, check=True,
                   timeout=60, stdout=subprocess.DEVNULL)
    lines = [line.split() for line in times.read_text().splitlines()]
    assert [int(n) for n, _ in lines] == [1, 2, 3]
    assert all(int(ns) > 0 for _, ns in lines)
    # An unwritable file is the program's warning, not its crash.
    env["RLSCOPE_STEP_TIMES"] = str(tmp_path / "missing" / "steps")
    r = subprocess.run([sys.executable, str(APP), "--steps", "2", "--ranges", "10"], env=env, timeout=60,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("cannot append step times") == 1


def test_calibrate_finds_the_scale_that_puts_corrected_steps_on_uninstrumented_ones(tmp_path, aggregator_factory):
    """tests/apps/fixed_steps.py reports 20 ms per step uninstrumented and 28
    ms profiled, and records exactly 4 ms of (virtual) overhead per step:
    calibrate must say scale 2, and a profile at that scale removes 8 ms. How
    well A/B calibration does on real workloads is `make bench`'s
    (section "correction")."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(BUFFERS)
    out = tmp_path / "cal.json"
    cmd = [sys.executable, str(ROOT / "tests/apps/fixed_steps.py"), "--steps", "4"]
    r = subprocess.run(CLI + ["calibrate", "--runs", "2", "--config", str(cfg), "--json", str(out), "--"] + cmd,
                       env=clean_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "2 uninstrumented and 2 profiled runs, steps 2-4" in r.stdout
    cal = json.loads(out.read_text())
    assert cal["steps"] == [2, 3, 4]  # the first of three or more is left out
    assert cal["uninstrumented_ms"] == pytest.approx(20.0) and cal["profiled_ms"] == pytest.approx(28.0)
    assert cal["removed_at_scale_1_ms"] == pytest.approx(4.0, abs=1e-6)
    assert cal["inflation"] == pytest.approx(0.4)
    assert cal["corrected_error_at_scale_1"] == pytest.approx(0.2)
    assert cal["scale"] == pytest.approx(2.0, abs=1e-6) and not cal["clamped"]
    assert "correction.scale: 2.000" in r.stdout
    assert "put in the config:  correction: {scale: 2.000}" in r.stdout

    # The printed scale in a new profile removes twice the recorded cost.
    config = json.dumps({"buffers": {"per_thread_kb": 32768}, "correction": {"scale": 2.0}})
    agg = aggregator_factory(config=BUFFERS + "correction: {scale: 2.0}\n")
    subprocess.run(cmd, env=agg.env(role="controller", config=config), check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    agg.wait(timeout=60)
    for n in range(1, 5):
        s = json.loads((agg.out / f"step_{n}" / "summary.json").read_text())
        assert s["correction"]["scale"] == pytest.approx(2.0)
        assert s["correction"]["subtracted_ms"] == pytest.approx(8.0, abs=1e-3)


def test_calibrate_says_which_run_failed_and_where_its_log_is(tmp_path):
    r = subprocess.run(CLI + ["calibrate", "--runs", "1", "--", sys.executable, "-c", "import sys; sys.exit(3)"],
                       env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "uninstrumented run 1 exited with status 3; its output is in" in r.stderr
    # A command that marks no step cannot be calibrated, and says why.
    r = subprocess.run(CLI + ["calibrate", "--runs", "1", "--", sys.executable, "-c", "print('hi')"],
                       env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "timed no step: mark the command's training steps with rlscope_ray.step(n)" in r.stderr
    r = subprocess.run(CLI + ["calibrate"], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "give the command to run after --" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("correction:\n  scale: -1\n")
    r = subprocess.run(CLI + ["calibrate", "--config", str(bad), "--", "true"], env=clean_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{bad}:2" in r.stderr, r.stderr


def test_a_kept_directory_reused_holds_only_the_new_runs(tmp_path):
    keep = tmp_path / "keep"
    for steps, want in ((5, "steps 2-5"), (3, "steps 2-3")):
        r = subprocess.run(CLI + ["calibrate", "--runs", "1", "--keep", str(keep), "--", sys.executable,
                                  str(ROOT / "tests/apps/fixed_steps.py"), "--steps", str(steps)],
                           env=clean_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert want in r.stdout, r.stdout
    # The kept profile is the second run's: its steps and no more.
    (profile,) = [p for p in keep.iterdir() if p.is_dir()]
    assert sorted(p.name for p in profile.glob("step_*")) == ["step_1", "step_2", "step_3"]

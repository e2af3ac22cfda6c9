"""The in-run accuracy estimator (rlscope_ray/in_run.py, bench section
accuracy): which steps a planned run selects and runs untooled, which steps
it checks against which neighbours, and that a real run records what the
plan says (run.json armed_steps) and nothing in its untooled steps. No
accuracy is asserted: the bench measures it."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT

DENSE = ROOT / "tests/apps/dense_steps.py"


def test_a_plan_selects_every_period_and_runs_the_even_positions_untooled():
    from rlscope_ray import in_run

    p = in_run.plan(17)
    assert p.selected == (5, 10, 15)
    assert p.untooled == (2, 4, 7, 9, 12, 14, 17)
    p7 = in_run.plan(22, 7)
    assert p7.selected == (7, 14, 21)
    # Positions 2, 4, 6 untooled; 1, 3, 5 disarmed with our entry points.
    assert p7.untooled == (2, 4, 6, 9, 11, 13, 16, 18, 20)
    with pytest.raises(ValueError, match="5 positions"):
        in_run.plan(20, 4)
    assert in_run.parse_selection("4, 7-9,12") == {4, 7, 8, 9, 12}
    assert in_run.parse_selection("") == set()


def test_each_selected_step_is_checked_against_its_nearest_clean_untooled_neighbours():
    from rlscope_ray import in_run

    p = in_run.plan(22, 7)
    # Steps take 10 ms, untooled 9; the selected ones 12 (corrected 9.9),
    # the step after each 11 (the spill).
    times = {n: 10.0 for n in range(1, 23)}
    times.update({n: 9.0 for n in p.untooled})
    times.update({n: 12.0 for n in p.selected})
    times.update({n + 1: 11.0 for n in p.selected if n + 1 <= 22})
    corrected = {n: 9.9 for n in p.selected}
    # A Ray job: workers arm the step before a selected one too, so step 6
    # (untooled, position 6) is no reference and step 13 neither.
    armed = set(p.selected) | {n - 1 for n in p.selected}
    res = in_run.analyse(times, p, armed, corrected, raw=dict(times), uncertainty={14: 0.5, 21: 0.01})
    # Step 7 has no clean untooled step after warm-up on its left; 14's
    # nearest are 11 (13 was armed) and 16; 21 none on its right: neither
    # is checked.
    assert [(c.step, c.ref_steps) for c in res.checks] == [(14, (11, 16))]
    (c,) = res.checks
    assert c.ref_ms == 9.0 and c.value_ms == 9.9 and c.raw_ms == 12.0
    assert c.error == pytest.approx(0.1) and c.raw_error == pytest.approx(1 / 3)
    # Disarmed tooled steps (not armed, nor after an armed one) against the
    # untooled: 10 vs 9 each.
    assert res.disarmed and all(d == pytest.approx(1 / 9) for d in res.disarmed)
    # The step after a selected one (11 ms) against clean tooled ones (10).
    assert res.spill and all(s == pytest.approx(0.1) for s in res.spill)
    # Covered at 2 sd: 0.9 ms off against 2 * hypot(0.5, 0.05 * 9).
    assert in_run.coverage(res.checks, 0.05) == 1.0
    assert in_run.coverage(res.checks, 0.0) == 1.0
    res.checks[0].uncertainty_ms = 0.1
    assert in_run.coverage(res.checks, 0.0) == 0.0
    # The A/A estimator: the program's own times of the selected steps.
    aa = in_run.analyse(times, p, armed)
    assert [c.value_ms for c in aa.checks] == [12.0]


def test_the_reference_noise_a_perfect_correction_must_cover_is_the_aa_errors_spread_at_its_tail():
    from rlscope_ray import in_run

    # 20 A/A errors: 18 within 1 %, two slow stretches (+30 %, -12 %).
    errors = [0.01 * (i % 3 - 1) for i in range(18)] + [0.30, -0.12]
    # The quartiles' spread sees none of the tail: 2 robust sd cover 18 of 20.
    sd = in_run.robust_sd(errors)
    assert sum(abs(e) <= 2 * sd for e in errors) == 18
    # Half the 90th percentile of |error| covers 18 of 20 too, by
    # construction; the 95th (between the 19th and 20th ranked) covers 19,
    # up to -12 %.
    assert in_run.covering_spread(errors, 0.9) == pytest.approx(0.01 / 2 + (0.12 - 0.01) * 0.1 / 2)
    assert in_run.covering_spread(errors, 0.95) == pytest.approx(0.12 / 2 + (0.30 - 0.12) * 0.05 / 2)
    assert sum(abs(e) <= 2 * in_run.covering_spread(errors, 0.95) for e in errors) == 19
    assert in_run.covering_spread([0.04]) == 0.02
    for share in (1.0, 0.0, 0.925):  # a whole percent of the values, 1-99
        with pytest.raises(ValueError):
            in_run.covering_spread(errors, share)


def _runner(tmp_path, style: str, steps: int, selected, untooled, ranges: int = 200):
    from rlscope_ray.ab_calibration import Runner

    cmd = [sys.executable, str(DENSE), "--steps", str(steps), "--ranges", str(ranges), "--style", style,
           "--untooled-steps", ",".join(map(str, untooled))]
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    # The production path (real clock, fast lanes, calibration): what is
    # asserted is which steps recorded and what the estimator reads, never
    # a time.
    return Runner(cmd, str(work), {"steps": list(selected)}, timeout_s=120, keep_summaries=True)


def test_a_planned_run_arms_its_selected_steps_and_the_estimator_reads_them(tmp_path):
    from rlscope_ray import in_run

    p = in_run.plan(17)
    run = _runner(tmp_path, "nested", 17, p.selected, p.untooled).profiled()
    # The collector's own arming edges say which steps recorded: exactly
    # the selected ones (a lone controller arms no step ahead).
    assert run.armed == set(p.selected)
    assert sorted(run.corrected) == list(p.selected)
    res = in_run.analyse(run.steps, p, run.armed, run.corrected, run.raw, run.uncertainty)
    assert [(c.step, c.ref_steps) for c in res.checks] == [(10, (9, 12)), (15, (14, 17))]
    for c in res.checks:
        lo, hi = c.ref_steps
        assert c.ref_ms == pytest.approx((run.steps[lo] + run.steps[hi]) / 2)
        assert c.value_ms == run.corrected[c.step] and c.raw_ms == run.raw[c.step]
        assert c.uncertainty_ms == run.uncertainty[c.step]
    # Disarmed tooled steps past warm-up, not after a selected one: 8, 13.
    assert len(res.disarmed) == 2
    # After 5, 10, 15: only 11 has a clean tooled step on each side (8, 13).
    assert len(res.spill) == 1


def test_untooled_steps_record_none_of_the_programs_ranges(tmp_path):
    # Every step selected; 2 and 4 run untooled: nvtx.annotate, push_range
    # and rlscope_ray.range as with no tool attached. Their profiles hold
    # the step and none of its ranges; the others all of them.
    run = _runner(tmp_path, "nested", 5, range(1, 6), [2, 4], ranges=40).profiled()
    assert run.armed == {1, 2, 3, 4, 5}
    assert sorted(run.summaries) == [1, 2, 3, 4, 5]
    for n, summary in run.summaries.items():
        (proc,) = summary["processes"]
        subtasks = {row["subtask"] for row in summary["breakdown"]}
        if n in (2, 4):
            assert (subtasks, proc["spans"], proc["overhead"]["events"]) == ({"step"}, 1, 1), n
        else:
            # 10 of annotate > range > 2 push/pop: 40 spans, 80 events,
            # and the step (its end the one event charged).
            assert (subtasks, proc["spans"], proc["overhead"]["events"]) == ({"step", "outer"}, 41, 81), n

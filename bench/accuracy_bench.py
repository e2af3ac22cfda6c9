"""The accuracy section of run_bench.py: how close one profiled run's corrected
steps come to the same program without the profiler, measured inside the run
(rlscope_ray/in_run.py says how), at the default config (correction on, the
real clock, the fast lanes, CPU sampling on).

For each workload: one profiled run planned by in_run.plan (a selected step
in every 5; untooled steps, the same code as with no tool attached, as the
reference; which steps anything recorded in from run.json's armed_steps),
one run without the profiler through the same estimator (A/A: the floor no
correction can beat), and 2 (--long: 3) interleaved pairs of whole runs, without the
profiler and with it selecting no step, whose untooled steps say whether the
in-run reference is the program without the profiler (a collector that is
loaded but records nothing: its flush thread and signal handlers). Per
workload, the selected steps' corrected (and raw) error against their
references (median, IQR, and the median's standard error), the stated
uncertainty (summary.json correction.uncertainty_ms, its median as a share of
the step) and how often it covers the error at two standard deviations, the
A/A spread added in quadrature; the spill (the step after a selected one
against disarmed steps with nothing before them), the disarmed path's cost
(disarmed steps with our entry points in place against untooled ones), and
the share of events capped (charged less than the model said: their gap was
shorter). The workloads as DESIGN.md's accuracy targets name them: dense
`nvtx` push/pop, `nvtx.annotate`, start/end, nested with rlscope_ray.range,
torch CPU matmuls on intra-op threads, and a Ray driver waiting on an
annotated actor.
"""
import os
import statistics
import sys
import tempfile

from rlscope_ray import in_run


def _pct(x):
    return "%+.1f %%" % (100 * x)


def workloads(root, steps, ranges, ray_steps=None):
    """The A/B (correction section) workloads (label, command): `nvtx` ranges
    around a small Python function, pushed/popped, as nvtx.annotate, or nested
    (annotate > rlscope_ray.range > two push/pop), in the process that steps,
    and a Ray driver waiting on an actor that carries them."""
    apps = os.path.join(root, "tests", "apps")
    dense = [sys.executable, os.path.join(apps, "dense_steps.py"), "--steps", str(steps), "--ranges", str(ranges)]
    return [
        ("python nvtx.push_range/pop_range", dense + ["--style", "push"]),
        ("python nvtx.annotate(color=...)", dense + ["--style", "annotate"]),
        ("python nested: annotate > rlscope_ray.range > 2 push/pop", dense + ["--style", "nested"]),
        ("Ray driver waiting on an annotated actor",
         [sys.executable, os.path.join(apps, "ray_wait_app.py"), "--steps", str(ray_steps or steps), "--ranges",
          str(ranges)]),
    ]


def in_run_workloads(root, quick):
    """(label, command without --untooled-steps, steps, period): 5-20 ms a
    step here, enough steps for 99 (quick: 59; Ray 70 and 41) checked ones.
    With 11, the medians' standard errors were 1.2-5.2 %; with 59, 0.3-1.2 %
    on the dense and torch workloads where the machine held steady through
    the run, 2.1-4.3 % on the Ray job. A Ray job's
    workers arm a step ahead and disarm late: a longer period leaves it
    clean references."""
    apps = os.path.join(root, "tests", "apps")
    steps = 305 if quick else 505
    ray_steps = 301 if quick else 504
    dense = [sys.executable, os.path.join(apps, "dense_steps.py"), "--steps", str(steps)]
    return [
        ("nvtx.push_range/pop_range, 60k events a step", dense + ["--ranges", "30000", "--style", "push"], steps, 5),
        ("nvtx.annotate(color=...), 40k events a step", dense + ["--ranges", "20000", "--style", "annotate"], steps, 5),
        ("nvtx.start_range/end_range, 40k events a step", dense + ["--ranges", "20000", "--style", "start"], steps, 5),
        ("nested annotate > rlscope_ray.range > 2 push/pop, 60k events a step",
         dense + ["--ranges", "30000", "--style", "nested"], steps, 5),
        ("torch CPU matmuls (intra-op threads), each in nvtx.annotate", dense + ["--ranges", "60", "--style", "torch"],
         steps, 5),
        ("Ray driver waiting on an annotated actor (actor: 40k events a step)",
         [sys.executable, os.path.join(apps, "ray_wait_app.py"), "--steps", str(ray_steps), "--ranges", "20000"],
         ray_steps, 7),
    ]


def accuracy_section(args, print_table):
    from rlscope_ray.ab_calibration import Runner

    pairs = 2 if args.quick else 3
    rows = []
    for label, base_cmd, steps, period in in_run_workloads(args.root, args.quick):
        p = in_run.plan(steps, period)
        cmd = base_cmd + ["--untooled-steps", ",".join(map(str, p.untooled))]
        with tempfile.TemporaryDirectory(prefix="rlscope_accuracy_bench_") as work:
            # The default config but the steps (a larger ring than the
            # default's would cost its first touches, about 7 ns an event).
            runner = Runner(cmd, os.path.join(work, "run"), {"steps": list(p.selected)}, args.timeout_s)
            idle = Runner(cmd, os.path.join(work, "idle"), {"steps": [10 ** 9]}, args.timeout_s)
            idle_run = lambda: idle.profiled(1.0, require_steps=False)  # noqa: E731
            for r in (runner, idle):
                os.makedirs(r.work, exist_ok=True)
            plain = runner.plain()
            run = runner.profiled(1.0)
            # Pairs: the untooled steps of a run whose collector records
            # nothing against a run without the profiler, interleaved.
            pair_ratios = []
            for i in range(pairs):
                a, b = (runner.plain, idle_run) if i % 2 == 0 else (idle_run, runner.plain)
                first, second = a(), b()
                none, loaded = (first, second.steps) if i % 2 == 0 else (second, first.steps)
                ref = [n for n in p.untooled if n >= p.period]
                pair_ratios.append(statistics.median(loaded[n] for n in ref) /
                                   statistics.median(none[n] for n in ref) - 1)
        if run.armed is None:
            raise RuntimeError(f"{label}: run.json does not say which steps were armed")
        rows.append(_row(label, p, plain, run, pair_ratios))
    print_table("Correction accuracy inside one run, default config (a selected step in every 5, Ray: 7, compared "
                "with the nearest clean untooled step on each side; in_run.py). Targets: |median| <= 3 %, its "
                "standard error < 1 %; uncertainty median < 2.5 % of the step, covering >= 90 % of steps at 2 sd "
                "with the A/A spread in quadrature (its quartiles' robust sd; and, as the A/A's own steps are "
                "covered at 2 robust sd in the floor column only, half its errors' 90th percentile, "
                "in_run.covering_spread); capped events < 1 %",
                ["workload", "untooled ms/step", "checked steps", "A/A floor: median (IQR)", "spill (median)",
                 "disarmed path vs untooled (median)", "untooled vs no profiler (pairs)", "raw (median)",
                 "corrected: median (IQR)", "median's std. error", "uncertainty, median % of step",
                 "covered at 2 sd", "A/A's own steps covered at 2 sd (the floor)",
                 "covered at 2 sd, A/A spread at its 90 % tail", "median error within 2x its median uncertainty",
                 "uncertainty dominated by", "capped events"], rows)


def _row(label, p, plain, run, pair_ratios):
    aa = in_run.analyse(plain, p, run.armed)
    res = in_run.analyse(run.steps, p, run.armed, run.corrected, run.raw, run.uncertainty)
    if not res.checks:
        return [label, "-", "0"] + ["-"] * 14
    errs = res.errors()
    q1, med, q3 = in_run.quartiles(errs)
    a1, amed, a3 = in_run.quartiles(aa.errors())
    aa_sd = in_run.robust_sd(aa.errors())
    cov = in_run.coverage(res.checks, aa_sd)
    aa_floor = sum(abs(e) <= 2 * aa_sd for e in aa.errors()) / len(aa.errors()) if aa.errors() else None
    cov_tail = in_run.coverage(res.checks, in_run.covering_spread(aa.errors(), 0.9)) if aa.errors() else None
    unc = [c.uncertainty_ms / c.ref_ms for c in res.checks if c.uncertainty_ms is not None]
    ref_ms = statistics.median(c.ref_ms for c in res.checks)
    capped = [run.capped[n] / run.events[n] for n in run.events if run.events[n] and n in p.selected]
    med_unc = statistics.median(unc) if unc else 0.0
    return [label, "%.1f" % ref_ms, str(len(res.checks)),
            "%s (%s to %s)" % (_pct(amed), _pct(a1), _pct(a3)),
            _pct(statistics.median(res.spill)) if res.spill else "-",
            _pct(statistics.median(res.disarmed)) if res.disarmed else "-",
            "%s (%s to %s)" % (_pct(statistics.median(pair_ratios)), _pct(min(pair_ratios)), _pct(max(pair_ratios))),
            _pct(statistics.median(c.raw_error for c in res.checks if c.raw_error is not None)),
            "%s (%s to %s)" % (_pct(med), _pct(q1), _pct(q3)),
            "%.1f %%" % (100 * in_run.median_spread(errs)),
            "%.2f %%" % (100 * med_unc) if unc else "-",
            "%d %% of %d" % (round(100 * cov), len(res.checks)) if cov is not None else "-",
            "%d %%" % round(100 * aa_floor) if aa_floor is not None else "-",
            "%d %%" % round(100 * cov_tail) if cov_tail is not None else "-",
            "yes" if abs(med) <= 2 * med_unc else "no",
            _most(run.dominated_by[c.step] for c in res.checks if run.dominated_by.get(c.step)),
            "%.2f %%" % (100 * statistics.median(capped)) if capped else "-"]


def _most(names):
    """The most common of `names`, "-" for none."""
    names = list(names)
    return max(set(names), key=names.count) if names else "-"

"""The accuracy section of run_bench.py: how close one profiled run's corrected
steps come to the uninstrumented program, at correction.scale 1, with the
costs measured in place (correction.sample_every, the default) and with the
start-up calibration only (sample_every 0, as before in-place sampling).

For each workload, PAIRS rounds, each one uninstrumented run and one profiled
run of each kind, in an order rotated per round (the machine drifts). A run's
step time is its median step but the first (start-up). The error of a
profiled run is its corrected step against the median uninstrumented run; the
table gives the median and interquartile range of that error over the
rounds, the uninstrumented runs' own spread (their IQR against their median:
the noise floor no correction can beat), the error paired with the same
round's uninstrumented run (drift between rounds removed, not their noise),
the stated uncertainty and systematic part (summary.json
correction.uncertainty_ms and systematic_ms, median over steps and runs), and
RL-Scope's published worst case (16.8 %, after 40 re-runs). A third row per
workload reads the in-place runs again under the model used before, from the
same runs (so the two rows differ by the model alone, not by noise): the
`nvtx` package's caller-side costs at their start-up figures, not scaled by
the ratio the handler's measured costs bore to theirs (summary.json
overhead.caller_side_ms, in_place_ratio).
"""
import os
import statistics
import sys
import tempfile


def _quartiles(values):
    q = statistics.quantiles(sorted(values), n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def _pct(x):
    return "%+.1f %%" % (100 * x)


def workloads(root, steps, ranges, ray_steps=None):
    """The correction workloads (label, command): `nvtx` ranges around a small
    Python function, pushed/popped or as nvtx.annotate, in the process that
    steps, and a Ray driver waiting on an actor that carries them."""
    apps = os.path.join(root, "tests", "apps")
    dense = [sys.executable, os.path.join(apps, "dense_steps.py"), "--steps", str(steps), "--ranges", str(ranges)]
    return [
        ("python nvtx.push_range/pop_range", dense + ["--style", "push"]),
        ("python nvtx.annotate(color=...)", dense + ["--style", "annotate"]),
        ("Ray driver waiting on an annotated actor",
         [sys.executable, os.path.join(apps, "ray_wait_app.py"), "--steps", str(ray_steps or steps), "--ranges",
          str(ranges)]),
    ]


def accuracy_section(args, print_table):
    from rlscope_ray.ab_calibration import Runner

    kinds = [("in place, caller side scaled (default)", {}), ("start-up calibration only", {"sample_every": 0})]
    rows = []
    for label, cmd in workloads(args.root, 10, 100000, ray_steps=6):
        with tempfile.TemporaryDirectory(prefix="rlscope_accuracy_bench_") as work:
            runners = {name: Runner(cmd, os.path.join(work, str(i)), {"buffers": {"per_thread_kb": 32768},
                                                                      "correction": corr}, args.timeout_s)
                       for i, (name, corr) in enumerate(kinds)}
            for r in runners.values():
                os.makedirs(r.work, exist_ok=True)
            plain_runner = Runner(cmd, os.path.join(work, "plain"), {}, args.timeout_s)
            os.makedirs(plain_runner.work, exist_ok=True)
            plain, profiled = [], {name: [] for name, _ in kinds}
            for i in range(args.pairs_accuracy):
                jobs = [lambda: plain.append(_median_step(plain_runner.plain()))]
                jobs += [(lambda n=name: profiled[n].append(runners[n].profiled(1.0))) for name, _ in kinds]
                for job in jobs[i % len(jobs):] + jobs[:i % len(jobs)]:
                    job()
        base = statistics.median(plain)
        lo, _, hi = _quartiles([p / base - 1 for p in plain])
        kinds_read = [(name, runs, lambda r: r.corrected) for name, runs in profiled.items()]
        kinds_read.insert(1, ("in place, caller side not scaled (same runs)", profiled[kinds[0][0]],
                              lambda r: {n: v + r.caller_scaled_extra.get(n, 0.0) for n, v in r.corrected.items()}))
        for name, runs, read in kinds_read:
            corrected = [_median_step(read(r)) for r in runs]
            errors = [c / base - 1 for c in corrected]
            paired = [c / p - 1 for c, p in zip(corrected, plain)]
            raw = [_median_step(r.raw) / base - 1 for r in runs]
            q1, med, q3 = _quartiles(errors)
            sigma = [u for r in runs for u in r.uncertainty.values()]
            syst = [u for r in runs for u in r.systematic.values()]
            rows.append([label, name, "%.1f" % base, _pct(statistics.median(raw)), _pct(med),
                         "%s to %s" % (_pct(q1), _pct(q3)), _pct(statistics.median(paired)),
                         "%s to %s" % (_pct(lo), _pct(hi)),
                         "%.2f %% / %.2f %%" % (100 * statistics.median(sigma) / base,
                                                100 * statistics.median(syst) / base) if sigma else "-",
                         "16.8 %"])
    print_table("Correction accuracy at correction.scale 1, one profiled run each (%d interleaved rounds of "
                "uninstrumented and profiled runs; step = median of steps 2+; target |median| < 3 %%)"
                % args.pairs_accuracy,
                ["workload", "costs", "uninstrumented ms/step", "raw inflation", "corrected error (median)",
                 "corrected error (IQR)", "paired with its round (median)", "noise: uninstrumented IQR",
                 "stated uncertainty / systematic", "RL-Scope worst (published)"], rows)


def _median_step(steps):
    """The median of a run's steps but the first (start-up)."""
    return statistics.median(v for n, v in steps.items() if n != min(steps))


"""The accuracy section of run_bench.py: how close one profiled run's corrected
steps come to the uninstrumented program, at correction.scale 1, with the
costs measured in place (correction.sample_every, the default), the `nvtx`
package's calls through rlscope's entry points (the default) and through the
package's own functions (RLSCOPE_NVTX_FAST_PATH=0, as before those entry
points: rlscope_ray/nvtx_fast.py).

For each workload, PAIRS rounds, each two uninstrumented runs and one
profiled run of each kind, in an order rotated per round (the machine
drifts). A run's step time is its median step but the first (start-up). The
error of a profiled run is its corrected step against its own round's first
uninstrumented run (pair by pair: drift between rounds removed); the table
gives its median and interquartile range over the rounds, beside the noise
floor (the round's second uninstrumented run against its first, the same
way: no correction can beat it), the error of the median corrected step of
all rounds against the median uninstrumented one (unpaired: on this project's
2-core machines a process's memory layout alone made one run in three of the
same program up to 1.8x slower per loop iteration, found by padding the
environment under setarch -R; pairing cannot remove a draw made per process,
and the median over many rounds does), the stated uncertainty and systematic part
(summary.json correction.uncertainty_ms and systematic_ms, median over steps
and runs), the share of steps whose error (against the round's uninstrumented
median step) that statement covers, the share of events capped
(overhead.capped_events: charged less than the model said, as their gap was
shorter), and RL-Scope's published worst case (16.8 %, after 40 re-runs).
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
    Python function, pushed/popped, as nvtx.annotate, or nested (annotate >
    rlscope_ray.range > two push/pop), in the process that steps, and a Ray
    driver waiting on an actor that carries them."""
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


def accuracy_section(args, print_table):
    from rlscope_ray.ab_calibration import Runner

    # The default, and the same with the `nvtx` package's own functions (as
    # before rlscope's entry points for them: rlscope_ray/nvtx_fast.py).
    kinds = [("rlscope's nvtx entry points, in place, caller side scaled (default)", {}, {}),
             ("the nvtx package's own functions (RLSCOPE_NVTX_FAST_PATH=0, as before)", {},
              {"RLSCOPE_NVTX_FAST_PATH": "0"})]
    rows = []
    for label, cmd in workloads(args.root, 10, 100000, ray_steps=6):
        with tempfile.TemporaryDirectory(prefix="rlscope_accuracy_bench_") as work:
            runners = {name: Runner(cmd, os.path.join(work, str(i)), {"buffers": {"per_thread_kb": 32768},
                                                                      "correction": corr}, args.timeout_s, env=env)
                       for i, (name, corr, env) in enumerate(kinds)}
            plain_runner = Runner(cmd, os.path.join(work, "plain"), {}, args.timeout_s)
            for r in [*runners.values(), plain_runner]:
                os.makedirs(r.work, exist_ok=True)
            # Per round: two uninstrumented runs (the second is the noise
            # floor: uninstrumented against uninstrumented) and one profiled
            # run of each kind, in an order rotated per round.
            plain, plain2, profiled = [], [], {name: [] for name, _, _ in kinds}
            for i in range(args.pairs_accuracy):
                jobs = [lambda: plain.append(plain_runner.plain()), lambda: plain2.append(plain_runner.plain())]
                jobs += [(lambda n=name: profiled[n].append(runners[n].profiled(1.0))) for name, _, _ in kinds]
                for job in jobs[i % len(jobs):] + jobs[:i % len(jobs)]:
                    job()
        base = statistics.median(_median_step(p) for p in plain)
        noise = [_median_step(b) / _median_step(a) - 1 for a, b in zip(plain, plain2)]
        kinds_read = [(name, runs, lambda r: r.corrected) for name, runs in profiled.items()]
        for name, runs, read in kinds_read:
            rows.append(_accuracy_row(label, name, base, plain, noise, runs, read))
    print_table("Correction accuracy at correction.scale 1, one profiled run each, pair by pair (%d rounds, each: "
                "two uninstrumented runs and one profiled run per kind, interleaved; step = median of steps 2+; "
                "targets: |median| <= 3 %%, stated uncertainty covering the error in >= 90 %% of steps, capped "
                "events < 1 %%)" % args.pairs_accuracy,
                ["workload", "costs", "uninstrumented ms/step", "raw inflation (median)",
                 "corrected error, paired with its round (median)", "corrected error (IQR)",
                 "corrected error, median over all rounds (unpaired)",
                 "noise: uninstrumented vs uninstrumented (median, IQR)", "stated uncertainty / systematic",
                 "steps whose error the statement covers", "capped events", "RL-Scope worst (published)"], rows)


def _accuracy_row(label, name, base, plain, noise, runs, read):
    """One row: the error of each profiled run's corrected step against its
    own round's uninstrumented run; per step, whether the stated uncertainty
    plus systematic part covers that step's error; the capped share."""
    corrected = [_median_step(read(r)) for r in runs]
    paired = [c / _median_step(p) - 1 for c, p in zip(corrected, plain)]
    raw = [_median_step(r.raw) / _median_step(p) - 1 for r, p in zip(runs, plain)]
    unpaired = statistics.median(corrected) / statistics.median(_median_step(p) for p in plain) - 1
    q1, med, q3 = _quartiles(paired)
    n1, nmed, n3 = _quartiles(noise)
    covered = total = 0
    for r, p in zip(runs, plain):
        ref = _median_step(p)
        for n, c in read(r).items():
            if n == min(r.corrected):
                continue
            total += 1
            covered += abs(c - ref) <= r.uncertainty.get(n, 0.0) + r.systematic.get(n, 0.0)
    capped = [r.capped[n] / r.events[n] for r in runs for n in r.events if r.events[n]]
    sigma = [u for r in runs for u in r.uncertainty.values()]
    syst = [u for r in runs for u in r.systematic.values()]
    return [label, name, "%.1f" % base, _pct(statistics.median(raw)), _pct(med), "%s to %s" % (_pct(q1), _pct(q3)),
            _pct(unpaired),
            "%s (%s to %s)" % (_pct(nmed), _pct(n1), _pct(n3)),
            "%.2f %% / %.2f %%" % (100 * statistics.median(sigma) / base, 100 * statistics.median(syst) / base)
            if sigma else "-",
            "%d %% of %d" % (round(100 * covered / total), total) if total else "-",
            "%.1f %%" % (100 * statistics.median(capped)) if capped else "-", "16.8 %"]


def _median_step(steps):
    """The median of a run's steps but the first (start-up)."""
    return statistics.median(v for n, v in steps.items() if n != min(steps))


"""The sampler section of run_bench.py: cross-stack attribution measured.

1. What CPU sampling costs the work it samples: a fixed amount of work (a pure
   Python loop and a native loop, bench/sampler_workload.py) inside a captured
   range, with cpu.sampling_hz 0 (off), 1000 and 10000, in interleaved rounds;
   its thread CPU time and wall time, each beside sampling off in the same
   round (pair by pair).
2. Attribution against the known answer: tests/apps/attribution_app.py burns
   known thread CPU time in a shared library (the config's backend), a pure
   Python loop and a Python module (the config's simulator); per sub-task, what
   each phase measured of its own thread CPU time against what the summary
   says, with the summary's own sampling error.
3. The same program under py-spy's native mode (py-spy record --native, 1000
   samples per second of wall time), as a peer: whole-run time by category,
   each of its stacks scored by the rule that scores ours (bench/pyspy_rule.py:
   the whole native chain, then the innermost Python frame's module), beside
   ours and the truth, and the wall time of the
   program plain, under our collector and under py-spy (interleaved).
4. What one sample costs in its handler, measured in place on the workload's
   Python thread: with the frame read by guarded loads, and through the
   kernel (process_vm_readv, the fallback when a host handler came first),
   beside the same handler reading no frame.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ATTRIBUTION = {"simulator": ["rlscope_test_sim"], "backend": ["librlscope_test_burn*"]}
# py-spy names a native frame with debug information by its source file: the
# test library's (bench/pyspy_rule.py maps it to its object).
PYSPY_SOURCES = {"burn.cc": "librlscope_test_burn.so"}
CATEGORIES = ("python", "backend", "simulator", "other")


def _env(base_env, endpoint=None, config=None):
    env = dict(base_env)
    if endpoint:
        env["RLSCOPE_AGGREGATOR"] = endpoint
    if config is not None:
        env["RLSCOPE_CONFIG"] = json.dumps(config)
    return env


def _ratio_text(values):
    return "%.3fx (%.3f-%.3f)" % (statistics.median(values), min(values), max(values))


def _cost_rows(args, clean_env, run_json, lib, agg_endpoint):
    workload = os.path.join(args.root, "bench", "sampler_workload.py")
    rates = [0, 1000, 10000]
    per_rate = {hz: [] for hz in rates}
    rounds = 3 if args.quick else 7
    work = 10 if args.quick else 20  # the workload's rounds: each 200k Python iterations + 20M native
    for i in range(rounds):
        order = rates[i % len(rates):] + rates[:i % len(rates)]
        for hz in order:
            config = {"capture_range": "api", "cpu": {"sampling_hz": hz}}
            per_rate[hz].append(run_json([sys.executable, workload, "--lib", lib, "--rounds", str(work)],
                                         _env(clean_env(), agg_endpoint, config), args.timeout_s))
    rows = []
    for hz in rates:
        runs = per_rate[hz]
        cpu = [r["cpu_ms"] for r in runs]
        wall = [r["wall_ms"] for r in runs]
        cpu_ratio = [r["cpu_ms"] / off["cpu_ms"] for r, off in zip(runs, per_rate[0])]
        wall_ratio = [r["wall_ms"] / off["wall_ms"] for r, off in zip(runs, per_rate[0])]
        samples = statistics.median(r["samples"] for r in runs)
        per_s = samples / (statistics.median(cpu) / 1000) if samples else 0
        cost = statistics.median(r["sample_cost_ns"] for r in runs)
        rows.append(["off" if hz == 0 else "%d Hz" % hz, "%.1f" % statistics.median(cpu),
                     "%.1f" % statistics.median(wall), "1" if hz == 0 else _ratio_text(cpu_ratio),
                     "1" if hz == 0 else _ratio_text(wall_ratio), "%d" % samples, "%.0f" % per_s,
                     "-" if hz == 0 else "%.0f ns (%.3f %% of the CPU)" % (cost, 100 * cost * per_s / 1e9),
                     "sampling off, same round"])
    return (work, rounds), rows


def _handler_rows(args, clean_env, run_json, lib, agg_endpoint):
    workload = os.path.join(args.root, "bench", "sampler_workload.py")
    config = {"capture_range": "api", "cpu": {"sampling_hz": 1000}}
    flags_of = {"none read (baseline)": ["--no-frames"], "guarded loads": [],
                "through the kernel (faulthandler enabled after)": ["--faulthandler-after"]}
    kinds = {k: [] for k in flags_of}
    rounds = 3 if args.quick else 7
    for i in range(rounds):
        order = list(kinds)[i % len(kinds):] + list(kinds)[:i % len(kinds)]
        for kind in order:
            flags = flags_of[kind]
            kinds[kind].append(run_json([sys.executable, workload, "--lib", lib, "--rounds", "8", *flags],
                                        _env(clean_env(), agg_endpoint, config), args.timeout_s))
    rows = []
    for kind, runs in kinds.items():
        handler = [r["handler_ns"] for r in runs if r["handler_ns"] > 0]
        rows.append([kind, "%.0f (%.0f-%.0f)" % (statistics.median(handler), min(handler), max(handler)),
                     "%d of %d" % (sum(r["kernel_reads"] for r in runs), sum(r["samples"] for r in runs)),
                     sum(r["frames_unread"] for r in runs),
                     "%.0f" % statistics.median(r["sample_cost_ns"] for r in runs)])
    return rounds, rows


def _run_app(args, env, report, lib, prefix=()):
    app = os.path.join(args.root, "tests", "apps", "attribution_app.py")
    t0 = time.monotonic()
    subprocess.run([*prefix, sys.executable, app, "--lib", lib, "--steps", "3", "--report", report], env=env,
                   check=True, timeout=args.timeout_s, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def _failure(e):
    """A peer's failure in a few words: its exit status (a signal by name)."""
    import signal

    if isinstance(e, subprocess.CalledProcessError):
        rc = e.returncode
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit status {rc}"
    if isinstance(e, subprocess.TimeoutExpired):
        return f"did not finish in {e.timeout:.0f} s"
    return str(e)


def _pyspy_categories(path):
    """ms per category from py-spy's raw output, each stack scored by the rule
    that scores ours (bench/pyspy_rule.py: the native chain from the leaf
    outwards, then the innermost Python frame's module); the profiler's own
    samples (rlscope_ray's import) left out as ours are, cuda_api counted
    as other (this program makes no CUDA call)."""
    import pyspy_rule

    out = {c: 0.0 for c in CATEGORIES}
    samples = 0
    with open(path) as f:
        for line in f:
            parsed = pyspy_rule.parse_line(line)
            if parsed is None:
                continue
            frames, n = parsed
            cat = pyspy_rule.classify(frames, ATTRIBUTION, PYSPY_SOURCES)
            if cat == "profiler":
                continue
            samples += n
            out[cat if cat in out else "other"] += n  # at --rate 1000: 1 ms each
    return out, samples


def _attribution_rows(args, clean_env, lib, pyspy):
    from rlscope_ray.aggregator_process import start_aggregator

    rows, whole = [], []
    walls = {"plain": [], "rlscope": [], "py-spy --native": []}
    rounds = 2 if args.quick else 3
    spy_rounds = 1 if args.quick else rounds  # 3.6x the program's wall; its gap to the truth is far above noise
    ours_total = {c: 0.0 for c in CATEGORIES}
    truth_total = {c: 0.0 for c in CATEGORIES}
    spy_total = None
    spy_failures = []  # a peer that fails is a row that says so, never the bench's exit status
    with tempfile.TemporaryDirectory(prefix="rlscope_sampler_bench_") as work:
        for i in range(rounds):
            jobs = ["plain", "rlscope"] + (["py-spy --native"] if pyspy and i < spy_rounds else [])
            for kind in jobs[i % len(jobs):] + jobs[:i % len(jobs)]:
                report = os.path.join(work, f"{kind.split()[0]}_{i}.json")
                if kind == "plain":
                    walls[kind].append(_run_app(args, clean_env(), report, lib))
                elif kind == "rlscope":
                    out = os.path.join(work, f"out_{i}")
                    command = [os.path.join(args.build_dir, "aggregator", "rlscope-ray-aggregator")]
                    config = {"attribution": ATTRIBUTION}
                    with start_aggregator(out, work_dir=os.path.join(work, f"agg_{i}"), command=command,
                                          config=config, nice=True, args=["--exit-when-done"], database=False) as agg:
                        env = _env(clean_env(), agg.endpoint, config)
                        env["RLSCOPE_ROLE"] = "controller"
                        walls[kind].append(_run_app(args, env, report, lib))
                        agg.stop(60, term_timeout=10)
                    app = json.load(open(report))
                    if i == 0:
                        rows += _phase_rows(out, app)
                    for step in (1, 2, 3):
                        s = json.load(open(os.path.join(out, f"step_{step}", "summary.json")))
                        a = next(r["attribution"] for r in s["breakdown"] if r["subtask"] == "step")
                        for c in CATEGORIES:
                            ours_total[c] += a[f"{c}_ms"] / rounds
                        t = app["steps"][str(step)]
                        truth_total["backend"] += 1000 * t["native"] / rounds
                        truth_total["python"] += 1000 * t["python"] / rounds
                        truth_total["simulator"] += 1000 * (t["sim"] + t["helper"]) / rounds
                else:
                    raw = os.path.join(work, f"pyspy_{i}.txt")
                    try:
                        walls[kind].append(_run_app(args, clean_env(), report, lib,
                                                    prefix=[pyspy, "record", "--native", "--rate", "1000", "--format",
                                                            "raw", "--threads", "--output", raw, "--"]))
                        cats, _ = _pyspy_categories(raw)
                    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
                        spy_failures.append(f"round {i + 1}: {_failure(e)}")
                        continue
                    if spy_total is None:
                        spy_total = {c: 0.0 for c in CATEGORIES}
                    for c in CATEGORIES:
                        spy_total[c] += cats[c] / spy_rounds
    def cell(totals, c):
        all_ms = sum(totals.values())
        return "%.0f (%.0f %%)" % (totals[c], 100 * totals[c] / all_ms) if all_ms else "0"

    spy_note = "failed " + "; ".join(spy_failures) if spy_failures else ""
    for c in CATEGORIES:
        spy = cell(spy_total, c) if spy_total else (spy_note or "n/a (py-spy not installed)")
        whole.append([c, cell(truth_total, c), cell(ours_total, c), spy])
    if spy_failures and spy_total:
        whole.append(["(py-spy)", "", "", f"{len(spy_failures)} of {spy_rounds} rounds {spy_note}"])
    base = statistics.median(walls["plain"])
    wall_rows = [[k, "%.2f" % statistics.median(v), "%.3fx" % (statistics.median(v) / base)]
                 for k, v in walls.items() if v]
    return (rounds, spy_rounds), rows, whole, wall_rows


def _phase_rows(out, app):
    rows = []
    for step in (2, 3):
        s = json.load(open(os.path.join(out, f"step_{step}", "summary.json")))
        t = {k: 1000 * v for k, v in app["steps"][str(step)].items()}
        by = {r["subtask"]: r["attribution"] for r in s["breakdown"] if r["process"] and r["attribution"]}
        for subtask, cat, truth in (("native", "backend", t["native"]), ("python", "python", t["python"]),
                                    ("sim", "simulator", t["sim"] + t["helper"])):
            a = by[subtask]
            got = a[f"{cat}_ms"]
            rows.append([step, subtask, cat, "%.1f" % truth, "%.1f" % got, "%+.1f %%" % (100 * (got / truth - 1)),
                         "%.1f" % a["error_ms"][cat], "%.1f" % a["max_sample_ms"],
                         "%.0f %%" % (100 * a["shares"][cat]), a["samples"]])
    return rows


def sampler_section(args, print_table, clean_env, run_json):
    from rlscope_ray.aggregator_process import start_aggregator

    lib = os.path.join(args.build_dir, "tests", "apps", "librlscope_test_burn.so")
    if not os.path.exists(lib):
        raise SystemExit(f"{lib} not found: build with -DRLSCOPE_BUILD_TESTS=ON")
    pyspy = shutil.which("py-spy") or (os.path.join(os.path.dirname(sys.executable), "py-spy")
                                       if os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy"))
                                       else None)
    with tempfile.TemporaryDirectory(prefix="rlscope_sampler_cost_") as work:
        command = [os.path.join(args.build_dir, "aggregator", "rlscope-ray-aggregator")]
        with start_aggregator(os.path.join(work, "out"), work_dir=os.path.join(work, "a"), command=command,
                              nice=True, database=False) as agg:
            rounds, cost = _cost_rows(args, clean_env, run_json, lib, agg.endpoint)
            handler_rounds, handler = _handler_rows(args, clean_env, run_json, lib, agg.endpoint)
    print_table("CPU sampler cost: a fixed Python + native workload (%d x 200k Python iterations + 20M native) in a "
                "captured range (%d interleaved rounds; median, and pair by pair against sampling off in the same "
                "round)" % rounds,
                ["cpu.sampling_hz", "work thread CPU ms", "work wall ms", "CPU vs off", "wall vs off",
                 "samples", "samples per CPU second", "one sample's cost (start-up calibration), share",
                 "baseline"], cost)
    print_table("One sample's handler, measured in place on a Python thread at 1000 Hz (median over %d interleaved "
                "runs, min-max): the Python frame read by guarded loads or through the kernel" % handler_rounds,
                ["python frame", "handler ns per sample", "samples read through the kernel", "frames unread",
                 "start-up calibration of a sample on the flush thread, ns (delivery included, caches warm)"],
                handler)
    rounds, phases, whole, walls = _attribution_rows(args, clean_env, lib, pyspy)
    print_table("Attribution on the known answer (tests/apps/attribution_app.py, 250 ms of thread CPU per phase; "
                "the sim phase runs on two threads): what each phase measured vs the summary",
                ["step", "sub-task", "category", "measured ms", "summary ms", "error", "stated 1-sd ms",
                 "max sample ms", "share", "samples"], phases)
    print_table("The same program, whole run by category (ms and share, mean of %d runs; py-spy %d): truth, "
                "rlscope-ray (CPU samples, steps 1-3), py-spy --native (1000 Hz wall-clock samples of the threads it "
                "judges active, GIL waits among them; each stack scored by our rule, bench/pyspy_rule.py)" % rounds,
                ["category", "measured (truth)", "rlscope-ray", "py-spy --native"], whole)
    print_table("Wall time of that program (median of %d interleaved runs; py-spy %d)" % rounds,
                ["how", "wall s", "vs plain"], walls)

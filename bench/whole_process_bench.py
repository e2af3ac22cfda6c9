"""The whole_process section of run_bench.py: whole-process attribution
measured (collector/cpu_sampler.h, native_stack.h, thread_states.h).

1. Coverage on a torch CPU workload with torch's default intra-op threads
   (bench/torch_workload.py): the sampled CPU time of the `torch` window over
   the process's own CPU time in it (getrusage around the range, every
   thread's), with cpu.threads: recording (only threads that record, as before)
   and all; the backend's share.
2. The known program (tests/apps/whole_process_app.py): threads started in a
   window that never record (their CPU against what they measured, and how
   long until they were sampled), a "simulator" library whose time is in libm
   and libc (the simulator's share by the stack; py-spy --native's stacks
   scored by the same rule beside it), and the off-CPU reasons of five waits (each reason's share of
   its window's off-CPU time).
3. What a sample costs with the stack walked: the handler's own time,
   measured in place, per sample, and at the default rate as a share of the
   sampled thread's CPU; which walk ran.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WHOLE_CONFIG = {"attribution": {"simulator": ["librlscope_test_simlib*"], "backend": ["librlscope_test_pool*"]}}
REASONS = ("gil", "lock", "poll", "io", "sleep", "cpu_wait", "other")


def _aggregated_run(args, clean_env, command, config, work, name):
    """Runs `command` as the controller under a fresh aggregator with `config`;
    returns (output directory, wall seconds)."""
    from rlscope_ray.aggregator_process import start_aggregator

    out = os.path.join(work, f"out_{name}")
    agg_bin = [os.path.join(args.build_dir, "aggregator", "rlscope-ray-aggregator")]
    with start_aggregator(out, work_dir=os.path.join(work, f"agg_{name}"), command=agg_bin, config=config,
                          nice=True, args=["--exit-when-done"], database=False) as agg:
        env = clean_env()
        env.update(RLSCOPE_AGGREGATOR=agg.endpoint, RLSCOPE_ROLE="controller", RLSCOPE_CONFIG=json.dumps(config))
        t0 = time.monotonic()
        subprocess.run(command, env=env, check=True, timeout=args.timeout_s, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        agg.stop(60, term_timeout=10)
    return out, wall


def _rows_of(out, step):
    s = json.load(open(os.path.join(out, f"step_{step}", "summary.json")))
    return {r["subtask"]: r["attribution"] for r in s["breakdown"] if r["attribution"]}, s


def _coverage_rows(args, clean_env, work):
    try:
        import torch  # noqa: F401
    except ImportError:
        return [["(torch not installed: make venv installs requirements-verl.txt)"] + [""] * 6]
    rows = []
    steps = 2 if args.quick else 4
    for threads in ("recording", "all"):
        report = os.path.join(work, f"torch_{threads}.json")
        config = {"cpu": {"threads": threads}}
        out, _ = _aggregated_run(args, clean_env, [sys.executable, os.path.join(args.root, "bench", "torch_workload.py"),
                                                   "--steps", str(steps), "--report", report],
                                 config, work, f"torch_{threads}")
        app = json.load(open(report))
        cov, backend, summary_cov, threads_seen = [], [], [], []
        for step in range(1, steps + 1):
            by, _ = _rows_of(out, step)
            a = by["torch"]
            truth = app["steps"][str(step)]["process_cpu_ms"]
            cov.append(a["cpu_ms"] / truth)
            backend.append(a["shares"]["backend"])
            if a.get("coverage") is not None:
                summary_cov.append(a["coverage"])
            threads_seen.append(a["threads"])
        rows.append([threads, app["threads"], "%.0f" % statistics.median(threads_seen),
                     "%.1f %% (%.1f-%.1f)" % (100 * statistics.median(cov), 100 * min(cov), 100 * max(cov)),
                     "%.1f %%" % (100 * statistics.median(summary_cov)) if summary_cov else "-",
                     "%.0f %%" % (100 * statistics.median(backend)), "getrusage around the range"])
    return rows


def _pyspy_sim_share(pyspy, args, clean_env, work, libs):
    """py-spy --native on the known program: of the samples whose stack is in
    the sim phase's library call, the share that the rule scoring ours
    (bench/pyspy_rule.py, the whole native chain) calls the simulator's, and
    beside it the share whose leaf frame is in the library (the analogue of
    our own "by the interrupted instruction alone")."""
    import pyspy_rule

    raw = os.path.join(work, "pyspy.txt")
    report = os.path.join(work, "pyspy_app.json")
    cmd = [pyspy, "record", "--native", "--rate", "1000", "--format", "raw", "--threads", "--output", raw, "--",
           sys.executable, os.path.join(args.root, "tests", "apps", "whole_process_app.py"), *libs, "--steps", "1",
           "--report", report]
    try:
        r = subprocess.run(cmd, env=clean_env(), timeout=args.timeout_s, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        return "py-spy did not finish in %d s" % args.timeout_s
    if r.returncode != 0 or not os.path.exists(raw):
        return "py-spy exited %d: %s" % (r.returncode, (r.stderr or "").strip().splitlines()[-1:] or "")
    sources = {"sim_lib.c": "librlscope_test_simlib.so", "pool_lib.c": "librlscope_test_pool.so"}
    in_sim = ruled_sim = leaf_sim = 0
    with open(raw) as f:
        for line in f:
            parsed = pyspy_rule.parse_line(line)
            if parsed is None or not any(name == "rlscope_test_sim_step" for name, _ in parsed[0]):
                continue
            frames, n = parsed
            in_sim += n
            if pyspy_rule.classify(frames, WHOLE_CONFIG["attribution"], sources) == "simulator":
                ruled_sim += n
            if pyspy_rule.classify_leaf(frames, WHOLE_CONFIG["attribution"], sources) == "simulator":
                leaf_sim += n
    if in_sim == 0:
        return "no samples in the sim phase"
    return "%.0f %% by our rule (leaf frame in the library: %.0f %%; %d samples)" % (
        100 * ruled_sim / in_sim, 100 * leaf_sim / in_sim, in_sim)


def _known_program_rows(args, clean_env, work, pyspy):
    import rlscope_ray

    apps = os.path.join(args.build_dir, "tests", "apps")
    libs = ["--pool-lib", os.path.join(apps, "librlscope_test_pool.so"), "--sim-lib",
            os.path.join(apps, "librlscope_test_simlib.so"), "--collector", rlscope_ray.collector_path()]
    report = os.path.join(work, "whole_app.json")
    steps = 2 if args.quick else 4
    out, _ = _aggregated_run(args, clean_env, [sys.executable, os.path.join(args.root, "tests", "apps",
                                                                            "whole_process_app.py"),
                                               *libs, "--steps", str(steps), "--report", report],
                             WHOLE_CONFIG, work, "whole")
    app = json.load(open(report))
    cpu_rows, off_rows = [], []
    pool_err, pool_cov, pickup, sim_share, sim_err = [], [], [], [], []
    off = {r: [] for r in ("sleep", "lock", "poll", "io", "gil")}
    for step in range(1, steps + 1):
        by, _ = _rows_of(out, step)
        t = app["steps"][str(step)]
        truth = 1000 * sum(t["pool"])
        pool_err.append(by["pool"]["backend_ms"] / truth - 1)
        pool_cov.append(by["pool"]["coverage"])
        pickup.append(t["pickup_ms"])
        a = by["sim"]
        job = sum(a[f"{c}_ms"] for c in ("python", "backend", "cuda_api", "simulator", "other"))
        sim_share.append(a["simulator_ms"] / job)
        sim_err.append(a["simulator_ms"] / (1000 * t["sim"]) - 1)
        for reason in off:
            o = by[reason]["off_cpu_ms"]
            waits = sum(v for k, v in o.items() if k != "cpu_wait")
            off[reason].append(o[reason] / waits if waits else 0)
    med = statistics.median
    cpu_rows.append(["pool: 2 threads started in the window, never recording", "backend (pool library) ms vs measured",
                     "%+.1f %% (%+.1f..%+.1f)" % (100 * med(pool_err), 100 * min(pool_err), 100 * max(pool_err)),
                     "coverage %.1f %%; sampled %.0f ms (median) after start" % (100 * med(pool_cov), med(pickup)),
                     "cpu.threads: recording: 0 (never sampled)"])
    spy = _pyspy_sim_share(pyspy, args, clean_env, work, libs) if pyspy else "n/a (py-spy not installed)"
    cpu_rows.append(["sim: libm and libc called from the simulator library", "simulator share of the job's CPU",
                     "%.1f %% (%.1f-%.1f); ms %+.1f %% vs measured" % (100 * med(sim_share), 100 * min(sim_share),
                                                                    100 * max(sim_share), 100 * med(sim_err)),
                     "by the interrupted instruction alone: other", "py-spy --native: " + spy])
    for reason, shares in off.items():
        off_rows.append([reason, "%.0f %% (%.0f-%.0f)" % (100 * med(shares), 100 * min(shares), 100 * max(shares))])
    st = app["stats"]
    walks = st["cpu_walks_fp"] + st["cpu_walks_scan"] + st["cpu_walks_leaf"] + st["cpu_unwalked"]
    cost = [["known program (%d samples)" % st["cpu_samples"], "%.0f" % st["cpu_handler_ns"],
             "%.2f %%" % (100 * st["cpu_handler_ns"] * 1000 / 1e9),
             "fp %d, scan %d, leaf only %d, not walked %d of %d" % (st["cpu_walks_fp"], st["cpu_walks_scan"],
                                                                   st["cpu_walks_leaf"], st["cpu_unwalked"], walks)]]
    return steps, cpu_rows, off_rows, cost


def whole_process_section(args, print_table, clean_env):
    pyspy = shutil.which("py-spy") or (os.path.join(os.path.dirname(sys.executable), "py-spy")
                                       if os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy"))
                                       else None)
    with tempfile.TemporaryDirectory(prefix="rlscope_whole_bench_") as work:
        coverage = _coverage_rows(args, clean_env, work)
        steps, cpu_rows, off_rows, cost = _known_program_rows(args, clean_env, work, pyspy)
    print_table("Coverage on a torch CPU workload with default intra-op threads (bench/torch_workload.py; median "
                "over steps, min-max): the torch window's sampled CPU over the process's CPU in it",
                ["cpu.threads", "torch threads", "threads sampled", "sampled / getrusage", "summary coverage",
                 "backend share", "truth"], coverage)
    print_table("The known program (tests/apps/whole_process_app.py, %d steps): native pools and stacks" % steps,
                ["phase", "figure", "rlscope-ray", "beside", "peer / before"], cpu_rows)
    print_table("Off-CPU reasons on the known program: each wait's reason, its share of the window's off-CPU time "
                "(median over steps, min-max; 8 looks per wait at 50 Hz)", ["wait", "own reason's share"], off_rows)
    print_table("One sample with its stack walked: the handler's own time, measured in place, and at 1000 Hz of a "
                "thread's CPU its share of that CPU", ["run", "handler ns per sample", "share of CPU at 1 kHz",
                                                       "walks"], cost)

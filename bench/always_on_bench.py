"""The always_on section of run_bench.py: what being on for every step costs,
what it keeps, and what `rlscope-ray diff` says of a known cause.

- The PPO demo (examples/verl/mini_ppo.py: a controller, four workers on two
  Ray nodes of one CPU each), in rounds (each in its own order: rotated) of:
  no profiler at all, no profiler again (the A/A floor), today's
  selected-steps mode (steps 2, 3, 5 written) and always on (every step's
  figures, steps 2, 3, 5 in full). Each
  run's step time is the median of its steps after the first five; each
  configuration against the round's no-profiler run, pair by pair. The default
  config otherwise: correction on, real clock, CPU sampling (1 kHz in chosen
  steps, always_on.sampling_hz 50 in the others).
- One long always-on demo run: each part of the profiler's CPU per step in
  the steady state past every start-up cost (LONG_AFTER_S).
- verl 0.9.1's main_ppo on CPU (tests/apps/verl_ppo_app.py), configured
  through verl's own config: no profiler, verl's selected steps, always on.
- figures.jsonl's bytes per process per step in the always-on runs.
- The dense workload (tests/apps/dense_steps.py, 2,000 push/pop ranges a
  step): no profiler, selected steps (one in five) and always on; the cost
  per recorded step, and over the whole run.
- The slow-step trigger at the default config (the test checks it under
  virtual costs): which steps a 1.5 s sleep in one step got written in full.
- A known cause: the demo with rank 1's update_actor compressing 512 KiB of random bytes more
  (zlib, native code: about 10 ms) against an always-on run without it; what diff reports
  first and where it says the time went, what it reports between two always-on
  runs of the same program (real A/A), and its time on 1,000 steps a side.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from rlscope_ray import diff, figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "examples", "verl", "mini_ppo.py")
DENSE = os.path.join(ROOT, "tests", "apps", "dense_steps.py")
WARMUP = 5
# Steady state from this step on: the steps written in full (2, 3, 5) are
# written and in the run database by then (about 3 s after step 5), so what
# is left is what every step costs.
STEADY_FROM = 61


# The profiler's own threads inside profiled processes (the collector's
# flush thread and its ZeroMQ I/O threads, the probe thread, the calibration's
# speed watch for its first minute, the controller's reporter of the actors
# that should connect: what it costs Ray's GCS is not counted) and its own processes (the aggregator,
# the run database's follower), each with the part of the profiler it is
# counted under (CpuWatch.seconds_between's parts).
PROFILER_THREADS = {"rlscope-flush": "collectors' flush threads", "rlscope-probes": "collectors' probe threads",
                    "rlscope-watch": "start-up speed watch (first minute)", "ZMQbg/IO/0": "collectors' ZeroMQ I/O",
                    "ZMQbg/Reaper": "collectors' ZeroMQ I/O", "rlscope-actors": "controller's actor-list reporter"}
PROFILER_PROCESSES = {"rlscope-ray-aggregator": "aggregator", "rlscope_ray.rundb_follow": "run database follower"}


class CpuWatch:
    """The profiler's CPU over a run, read from /proc every 0.2 s: each
    profiler thread's (schedstat, nanoseconds) and process's (stat, clock
    ticks: its exited threads included) CPU time, last reading less first;
    `series` each part's total at each reading (time.monotonic, s), for the
    CPU between two moments of the run (steady state, set-up and exit left
    out)."""

    def __init__(self):
        self.first, self.last = {}, {}
        self.part_of = {}  # key -> its part (PROFILER_THREADS, PROFILER_PROCESSES)
        self.series = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _cpu(stat_path):
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _thread_cpu(task_dir):
        with open(task_dir + "/schedstat") as f:
            return int(f.read().split()[0]) / 1e9

    def _look(self):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                process = next((part for name, part in PROFILER_PROCESSES.items() if name in cmdline), None)
                if process is not None:
                    key, t = ("process", pid), self._cpu(f"/proc/{pid}/stat")
                    self.first.setdefault(key, t)
                    self.last[key] = t
                    self.part_of[key] = process
                    continue
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/comm") as f:
                        part = PROFILER_THREADS.get(f.read().strip())
                    if part is None:
                        continue
                    key, t = ("thread", tid), self._thread_cpu(f"/proc/{pid}/task/{tid}")
                    self.first.setdefault(key, 0.0)  # a thread is the profiler's from its start
                    self.last[key] = t
                    self.part_of[key] = part
            except (OSError, IndexError, ValueError):
                continue

    def _parts(self):
        parts = {}
        for key, t in self.last.items():
            parts[self.part_of[key]] = parts.get(self.part_of[key], 0.0) + t - self.first[key]
        return parts

    def _run(self):
        while not self._stop.is_set():
            self._look()
            self.series.append((time.monotonic(), self._parts()))
            self._stop.wait(0.2)

    def parts_between(self, t0, t1):
        """Each part's CPU from t0 to t1 (time.monotonic, s), each end read
        off the series by linear interpolation."""
        def at(t):
            pts = self.series
            for (ta, ca), (tb, cb) in zip(pts, pts[1:]):
                if ta <= t <= tb:
                    w = (t - ta) / (tb - ta) if tb > ta else 1.0
                    return {k: ca.get(k, 0.0) + (cb.get(k, 0.0) - ca.get(k, 0.0)) * w for k in cb}
            return dict(pts[-1][1]) if pts and t > pts[-1][0] else {}
        a, b = at(t0), at(t1)
        return {k: b[k] - a.get(k, 0.0) for k in b}

    def seconds_between(self, t0, t1):
        """The profiler's CPU from t0 to t1, all parts."""
        return sum(self.parts_between(t0, t1).values())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def seconds(self):
        return sum(self.last[k] - self.first[k] for k in self.last)


def _demo_run(out, steps, extra, env, timeout_s):
    """One demo run: its timings (mini_ppo --timings), the CpuWatch over it
    and when it began (time.monotonic)."""
    timings = out + ".json"
    cmd = [sys.executable, DEMO, "--steps", str(steps), "--out", out, "--timings", timings] + extra
    began = time.monotonic()
    with CpuWatch() as watch:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    with open(timings) as f:
        return json.load(f), watch, began


def _demo(out, steps, extra, env, timeout_s):
    """The run's median step time (ms), the profiler's CPU over the whole
    run (s) and per step in steady state (ms: from the end of step
    STEADY_FROM - 1 to the last step's end, over the steps between)."""
    t, watch, _ = _demo_run(out, steps, extra, env, timeout_s)
    ends = t["steps_end_monotonic"]
    first = STEADY_FROM - 1
    steady_ms = 1000 * watch.seconds_between(ends[first - 1], ends[-1]) / (len(ends) - first)
    return statistics.median(t["steps_ms"][WARMUP:]), watch.seconds(), steady_ms


def rotated(modes, i):
    """Round i's order of the modes: rotated by i, so that over len(modes)
    rounds each mode runs once in each place. Run in one fixed order (no
    profiler, again, selected, always on), two runs of this section read
    always on +20.9 % and selected +12.9 % against no profiler (medians of
    pairs); rotated, much less (README: always on)."""
    k = i % len(modes)
    return modes[k:] + modes[:k]


def demo_rows(rounds, steps, env, timeout_s, work):
    """Per configuration, its runs' step medians; the always-on runs' directories."""
    modes = [("none", ["--profile", "none"]), ("none (A/A)", ["--profile", "none"]),
             ("selected", ["--capture", "2,3,5"]), ("always on", ["--capture", "2,3,5", "--always-on"])]
    ms = {name: [] for name, _ in modes}
    cpu = {name: [] for name, _ in modes}
    steady = {name: [] for name, _ in modes}
    dirs = []
    for i in range(rounds):
        for name, extra in rotated(modes, i):
            out = os.path.join(work, f"demo_{i}_{name.split()[0]}{'_aa' if 'A/A' in name else ''}")
            step_ms, cpu_s, steady_ms = _demo(out, steps, extra, env, timeout_s)
            ms[name].append(step_ms)
            cpu[name].append(1000 * cpu_s / steps)  # the profiler's CPU ms per step (set-up included)
            steady[name].append(steady_ms)
            if name == "always on":
                dirs.append(out)
    return ms, cpu, steady, dirs


# The part of the profiler's cost inside the job's own threads (recording,
# the sampler's signal handler): not a thread of its own, so no CpuWatch
# part; what the correction subtracted (in_thread_ms).
IN_THREADS = "in the job's threads (the correction's subtracted time)"
# A long run's steady state begins this long after the run did: past the
# start-up speed watch's schedule (calibration._WATCH_SCHEDULE_S, about 57 s
# from each process's calibration) and the steps written in full.
LONG_AFTER_S = 65


def long_run_parts(steps, env, timeout_s, work):
    """One always-on demo run past every start-up cost: its median step (ms),
    the steps counted and each part's CPU (ms a step) from the first step
    that ends LONG_AFTER_S after the run began to the last."""
    t, watch, began = _demo_run(os.path.join(work, "demo_long"), steps, ["--capture", "2,3,5", "--always-on"],
                                env, timeout_s)
    ends = t["steps_end_monotonic"]
    first = next((i for i, e in enumerate(ends) if e >= began + LONG_AFTER_S), None)
    if first is None or first >= len(ends) - 10:
        raise RuntimeError(f"the long run's {steps} steps ended {ends[-1] - began:.0f} s after it began: too few "
                           f"after {LONG_AFTER_S} s")
    parts = watch.parts_between(ends[first], ends[-1])
    n = len(ends) - 1 - first
    parts = {k: 1000 * v / n for k, v in parts.items()}
    # Steps first + 2 .. len(ends) (ends[i] is step i + 1's end).
    parts[IN_THREADS] = in_thread_ms([os.path.join(work, "demo_long")], first + 2, len(ends))
    return statistics.median(t["steps_ms"][first + 1:]), n, parts


VERL_APP = os.path.join(ROOT, "tests", "apps", "verl_ppo_app.py")
VERL_SELECTED = ["global_profiler.tool=rlscope", "global_profiler.steps=[2,3]",
                 "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0]"]


def _verl(out, steps, overrides, env, timeout_s):
    """verl's main_ppo (tests/apps/verl_ppo_app.py, its V1 trainer on CPU):
    the median step (ms), the profiler's CPU per step over the whole run
    and in steady state (from step STEADY_FROM on), as _demo."""
    report = out + ".json"
    cmd = [sys.executable, VERL_APP, out, "--total", str(steps), "--report", report] + overrides
    with CpuWatch() as watch:
        proc = subprocess.run(cmd, env=env, cwd=os.path.dirname(out), capture_output=True, text=True,
                              timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    with open(report) as f:
        ends = json.load(f)["steps_end_monotonic"]
    steps_ms = [1000 * (b - a) for a, b in zip(ends, ends[1:])]
    first = STEADY_FROM - 1
    steady_ms = 1000 * watch.seconds_between(ends[first - 1], ends[-1]) / (len(ends) - first)
    return statistics.median(steps_ms[WARMUP:]), 1000 * watch.seconds() / steps, steady_ms


def verl_rows(rounds, steps, env, timeout_s, work, fmt):
    """The verl rows: no profiler, verl's selected steps (2, 3, rank 0) and
    always on beside them (+global_profiler.global_tool_config.rlscope.always_on)."""
    modes = [("no profiler", []), ("selected steps (2, 3; rank 0)", VERL_SELECTED),
             ("always on (2, 3 in full)", VERL_SELECTED + [
                 "+global_profiler.global_tool_config.rlscope.always_on.enabled=true"])]
    got = {name: [] for name, _ in modes}
    always_on_dirs = []
    for i in range(rounds):
        for name, overrides in rotated(modes, i):
            j = [m for m, _ in modes].index(name)
            got[name].append(_verl(os.path.join(work, f"verl_{i}_{j}"), steps, overrides, env, timeout_s))
            if name.startswith("always on"):
                always_on_dirs.append(os.path.join(work, f"verl_{i}_{j}"))
    rows = []
    for name, _ in modes:
        step_ms = statistics.median(r[0] for r in got[name])
        whole, steady = statistics.median(r[1] for r in got[name]), statistics.median(r[2] for r in got[name])
        # As the demo's: selected steps record nothing in steady state.
        threads_ms = in_thread_ms(always_on_dirs, STEADY_FROM, steps) if name.startswith("always on") else 0.0
        rows.append([name, fmt(step_ms, 2), fmt(whole, 2), fmt(steady, 2), fmt(threads_ms, 3),
                     "%.2f %%" % (100 * (steady + threads_ms) / (step_ms * (os.cpu_count() or 1)))])
    return rows


def in_thread_ms(run_dirs, first=WARMUP + 1, last=None):
    """Per step (steps first..last), the recording costs inside the job's
    threads (the correction's subtracted time, every process summed): median."""
    per_step = []
    for d in run_dirs:
        for n, f in sorted(figures.load(d).items()):
            if n >= first and (last is None or n <= last):
                per_step.append(sum(float((p.get("overhead") or {}).get("subtracted_ms") or 0.0)
                                    for p in f.get("processes") or []))
    return statistics.median(per_step) if per_step else 0.0


def bytes_per_process_step(run_dirs):
    sizes = []
    for d in run_dirs:
        with open(figures.path(d), "rb") as f:
            for line in f:
                n = len(json.loads(line).get("processes") or []) or 1
                sizes.append(len(line) / n)
    return sizes


def dense_rows(steps, ranges, work, timeout_s):
    """Step times of the dense workload in each mode (the program's own clock)."""
    from rlscope_ray.ab_calibration import Runner

    cmd = [sys.executable, DENSE, "--steps", str(steps), "--ranges", str(ranges), "--style", "push"]
    chosen = list(range(5, steps + 1, 5))
    out = {}
    for name, config in (("none", None), ("selected", {"steps": chosen}),
                         ("always on", {"steps": [1], "always_on": {"enabled": True}})):
        r = Runner(cmd, os.path.join(work, "dense_" + name.split()[0]), config or {}, timeout_s=timeout_s)
        os.makedirs(r.work, exist_ok=True)
        times = r.plain() if config is None else r.profiled(require_steps=False).steps
        out[name] = (times, chosen)
    return out


def trigger_on_the_production_path(work, timeout_s):
    """The slow-step trigger at the default config (correction on, the real
    clock, fast lanes; tests/test_always_on.py checks it under virtual
    costs): the dense workload, 12 steps of about a millisecond, step 8
    also sleeping 1.5 s, always on with step 3 chosen. Which steps were
    written in full, and why."""
    from rlscope_ray.ab_calibration import Runner

    cmd = [sys.executable, DENSE, "--steps", "12", "--ranges", "100", "--style", "push", "--sleep-step", "8",
           "--sleep-ms", "1500"]
    r = Runner(cmd, os.path.join(work, "trigger"), {"steps": [3], "always_on": {"enabled": True}},
               timeout_s=timeout_s, keep_profiles=True)
    os.makedirs(r.work, exist_ok=True)
    r.profiled(require_steps=False)
    out = os.path.join(r.work, "profile_01")
    with open(os.path.join(out, "run.json")) as f:
        run = json.load(f)
    why = (figures.load(out).get(8) or {}).get("trigger") or ""
    return run.get("steps_written"), run.get("steps_triggered"), run.get("steps_figures_only"), why


def known_cause(base_dir, steps, env, timeout_s, work):
    slow = os.path.join(work, "demo_slow_rank1")
    _demo(slow, steps, ["--capture", "2,3,5", "--always-on", "--slow-rank", "1", "--slow-kib", "512"], env, timeout_s)
    a = diff.select(diff.read_steps(base_dir), None, WARMUP)
    b = diff.select(diff.read_steps(slow), None, WARMUP)
    return diff.compare(a, b), slow


def time_on_1000_steps(run_a, run_b):
    """diff on 1,000 steps a side: the runs' figures lines cycled and renumbered."""
    def cycled(run, name):
        figs = [figures.load(run)[n] for n in sorted(figures.load(run))][WARMUP:]
        d = os.path.join(os.path.dirname(run), name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(run, "run.json"), d)
        with open(figures.path(d), "w") as f:
            for i in range(1000):
                line = dict(figs[i % len(figs)], step=i + 1)
                f.write(json.dumps(line) + "\n")
        return d

    da, db = cycled(run_a, "diff_1000_a"), cycled(run_b, "diff_1000_b")
    t0 = time.perf_counter()
    d = diff.compare(diff.select(diff.read_steps(da), None, 0), diff.select(diff.read_steps(db), None, 0))
    return time.perf_counter() - t0, d


def demo_table(rounds, steps, env, timeout_s, work, print_table, fmt):
    """The demo's rows (demo_rows) as a table; the always-on runs' directories
    and their median step (ms)."""
    ms, cpu, steady, dirs = demo_rows(rounds, steps, env, timeout_s, work)
    base = ms["none"]
    cores = os.cpu_count() or 1
    rows = []
    for name, label in (("none", "no profiler"), ("none (A/A)", "no profiler again (A/A floor)"),
                        ("selected", "selected steps (2, 3, 5 written; today's mode)"),
                        ("always on", "always on (every step's figures; 2, 3, 5 in full)")):
        ratios = [x / b - 1 for x, b in zip(ms[name], base)]
        step_ms = statistics.median(ms[name])
        cpu_ms = statistics.median(cpu[name])
        steady_ms = statistics.median(steady[name])
        # Selected steps record nothing in steady state (none is chosen there).
        threads_ms = in_thread_ms(dirs, STEADY_FROM, steps) if name == "always on" else 0.0
        rows.append([label, fmt(step_ms, 2),
                     "" if name == "none" else "%+.2f %%" % (100 * statistics.median(ratios)),
                     "" if name == "none" else " ".join("%+.1f" % (100 * r) for r in ratios),
                     fmt(cpu_ms, 2), fmt(steady_ms, 2), fmt(threads_ms, 3),
                     "%.2f %%" % (100 * (steady_ms + threads_ms) / (step_ms * cores))])
    print_table(f"Always on: the PPO demo ({steps} steps, {rounds} rounds, each in rotated order; a run's step time "
                f"is the median of its steps after the first {WARMUP}; profiler CPU: its threads and processes, read "
                f"from /proc, per step over the whole run (set-up and exit included) and in steady state "
                f"(steps {STEADY_FROM}-{steps}); in the job's threads: the correction's subtracted time, all "
                f"processes, median; share: steady, both, of the {cores} cores over a step)",
                ["configuration", "ms per step", "vs no profiler (median of pairs)", "each pair, %",
                 "profiler CPU ms/step, whole run", "profiler CPU ms/step, steady",
                 "in the job's threads ms/step, steady", "steady share"], rows)
    return dirs, statistics.median(ms["always on"])


def long_run_table(steps, env, timeout_s, work, print_table, fmt):
    """long_run_parts as a table, largest part first."""
    cores = os.cpu_count() or 1
    step_ms, n, parts = long_run_parts(steps, env, timeout_s, work)
    total = sum(parts.values())
    rows = [[k, fmt(v, 3), "%.2f %%" % (100 * v / (step_ms * cores))]
            for k, v in sorted(parts.items(), key=lambda kv: -kv[1])]
    rows.append(["all", fmt(total, 3), "%.2f %%" % (100 * total / (step_ms * cores))])
    print_table(f"Always on, a long run's steady state: the PPO demo for {steps} steps, the profiler's CPU "
                f"from {LONG_AFTER_S} s after it began (past every start-up cost) to its end: {n} steps of "
                f"{step_ms:.1f} ms (median)", ["part", "ms per step", f"share of the {cores} cores"], rows)


def actor_table_look_table(env, timeout_s, print_table, fmt):
    """What one look of the controller's reporter at Ray's actor table costs
    (bench/actor_table_look.py), and so its pace: a look a second while the
    cluster's actors change, one in rlscope_ray.session._REPORT_SETTLED_S
    once they did not for _SETTLE_S."""
    from rlscope_ray import session

    rows = []
    for actors in (4, 16):
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "actor_table_look.py"), "--actors",
                               str(actors)], env=env, capture_output=True, text=True, timeout=timeout_s)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("{")), None)
        if proc.returncode != 0 or line is None:
            raise RuntimeError(f"actor_table_look.py failed:\n{proc.stderr[-3000:]}")
        got = json.loads(line)
        per_s = (got["gcs_ms"] + got["caller_ms"]) / session._REPORT_EVERY_S
        rows.append([str(actors), fmt(got["gcs_ms"], 3), fmt(got["caller_ms"], 3), fmt(got["wall_ms"], 3),
                     fmt(per_s, 3), fmt(per_s * session._REPORT_EVERY_S / session._REPORT_SETTLED_S, 3)])
    print_table("Always on: one look of the controller's reporter at Ray's actor table (profiled_actors and the "
                "three reads of actors still starting), 200 looks on a local cluster: Ray's GCS CPU (less its idle "
                "pace), the caller's process CPU (Ray's threads carry the RPCs), wall; both CPUs a second at a look a "
                f"second (while actors change) and at one in {session._REPORT_SETTLED_S:g} s (once nothing changed "
                f"for {session._SETTLE_S:g} s)",
                ["actors", "GCS ms a look", "caller ms a look", "wall ms a look", "ms of CPU a second, changing",
                 "ms of CPU a second, settled"], rows)


def run(args, print_table, fmt, clean_env):
    rounds = 4 if args.quick else 8  # each mode once in each place of a round, or twice (rotated)
    steps = 160 if args.quick else 300
    long_steps = 1300 if args.quick else 2000
    work = tempfile.mkdtemp(prefix="rlscope_always_on_bench_")
    env = clean_env()
    try:
        dirs, always_on_ms = demo_table(rounds, steps, env, args.timeout_s, work, print_table, fmt)
        # Enough steps for 40 s past LONG_AFTER_S at the pace just measured
        # (the cluster's start comes on top).
        long_steps = max(long_steps, int((LONG_AFTER_S + 40) * 1000 / always_on_ms))
        long_run_table(long_steps, env, args.timeout_s, work, print_table, fmt)
        actor_table_look_table(env, args.timeout_s, print_table, fmt)
        try:
            import verl  # noqa: F401
        except ImportError:
            print("Always on: verl: not installed (make venv installs requirements-verl.txt); skipped")
        else:
            print_table(f"Always on: verl 0.9.1's main_ppo on CPU (tests/apps/verl_ppo_app.py: its V1 trainer, a "
                        f"TaskRunner and two workers; {steps} steps, 3 rounds in rotated order; as the demo's table)",
                        ["configuration", "ms per step", "profiler CPU ms/step, whole run",
                         "profiler CPU ms/step, steady", "in the job's threads ms/step, steady", "steady share"],
                        verl_rows(3, steps, env, args.timeout_s, work, fmt))
        sizes = bytes_per_process_step(dirs)
        print_table("Always on: figures.jsonl bytes per process per step (the demo's always-on runs; target <= 4096)",
                    ["lines", "median", "max"], [[str(len(sizes)), fmt(statistics.median(sizes), 0),
                                                   fmt(max(sizes), 0)]])

        dense = dense_rows(30 if args.quick else 60, 2000, work, args.timeout_s)
        none_t, chosen = dense["none"]
        n_ms = statistics.median(v for k, v in none_t.items() if k > 2)
        rows = [["no profiler", fmt(n_ms, 2), "", ""]]
        sel_t, _ = dense["selected"]
        sel_rec = statistics.median(v for k, v in sel_t.items() if k in chosen)
        sel_all = statistics.mean(v for k, v in sel_t.items() if k > 2)
        rows.append(["selected (one step in 5)", fmt(sel_rec, 2), "%+.1f %%" % (100 * (sel_rec / n_ms - 1)),
                     "%+.1f %%" % (100 * (sel_all / statistics.mean(v for k, v in none_t.items() if k > 2) - 1))])
        ao_t, _ = dense["always on"]
        ao = statistics.median(v for k, v in ao_t.items() if k > 2)
        rows.append(["always on (every step, figures only)", fmt(ao, 2), "%+.1f %%" % (100 * (ao / n_ms - 1)),
                     "%+.1f %%" % (100 * (statistics.mean(v for k, v in ao_t.items() if k > 2)
                                          / statistics.mean(v for k, v in none_t.items() if k > 2) - 1))])
        print_table("Always on: dense annotation (2,000 push/pop ranges a step; single runs, the program's clock)",
                    ["configuration", "ms per recorded step (median)", "per recorded step vs none",
                     "whole run vs none"], rows)

        written, triggered, figures_only, why = trigger_on_the_production_path(work, args.timeout_s)
        print_table("Always on: a slow step at the default config (dense workload, 12 steps of about 1 ms, "
                    "step 8 sleeping 1.5 s more; step 3 chosen up front; expected in full: 3 and 8)",
                    ["written in full", "triggered", "figures only", "why step 8"],
                    [[str(written), str(triggered), str(figures_only), why[:90]]])
        d, slow_dir = known_cause(dirs[0], steps, env, args.timeout_s, work)
        first = d["changes"][0] if d["changes"] else None
        aa = diff.compare(diff.select(diff.read_steps(dirs[0]), None, WARMUP),
                          diff.select(diff.read_steps(dirs[1]), None, WARMUP))
        t1000, _ = time_on_1000_steps(dirs[0], slow_dir)
        where = ""
        if first:
            where = "; ".join(", ".join(f"{m['name']} {m['change_ms']:+.2f}" for m in first.get(k) or [])
                              for k in ("categories", "ranges") if first.get(k))
        rows = [["rank 1's update_actor + zlib of 512 KiB (~10 ms native; known cause)",
                 f"{first['subtask']} {first['who']} {first['change_ms']:+.2f} ms" if first else "nothing",
                 str(len(d["changes"])), where],
                ["two always-on runs of the same program (real A/A)",
                 (f"{aa['changes'][0]['subtask']} {aa['changes'][0]['who']}" if aa["changes"] else "nothing"),
                 str(len(aa["changes"])), ""]]
        print_table(f"Always on: rlscope-ray diff (steps {WARMUP + 1}-{steps} a side; {d['comparisons']} comparisons "
                    f"at 1 %); diff of 1,000 steps a side: {t1000:.2f} s",
                    ["pair", "named first", "changes beyond noise", "where it went (ms)"], rows)
        print(diff.render_text(d, "base", "rank 1 slowed"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

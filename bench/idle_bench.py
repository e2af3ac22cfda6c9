"""The idle section of run_bench.py: what a collector costs a process that
has nothing (or little) to record, and what it does meanwhile
(`run_bench.py --section idle` runs it alone).

Side by side in one run, so the machine's noise falls on all of them alike:
tests/apps/idle_worker processes (one NVTX mark, then a 5 ms sleep loop; or
a 50 us range every 5 ms, "1 % work"), each measuring its own process CPU
time (every thread's, the collector's too) over the same --measure-s
seconds, and its threads' wake-ups (voluntary context switches), with the
call counter (tests/apps/call_counter.c) preloaded:
  - no collector (the baseline: the same program, NVTX with no tool);
  - the collector, its rank unselected (`ranks` leaves it out);
  - the collector, armed (steps: all; a controller runs steps the whole time)
    with nothing to record;
  - the same, working 1 % of the time, beside the same work with no collector.
A second run does the armed rows with CPU sampling off (cpu.sampling_hz 0,
cpu.off_cpu_hz 0). Each row: CPU ms per second of wall time (% of a core),
minus the baseline's of its run, and per second: the flush thread's and
ZeroMQ's I/O thread's wake-ups, opens of /proc files, socket sends.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

CONTROLLER = r"""
import os, sys, time
import rlscope_ray
until = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < until:
    n += 1
    with rlscope_ray.step(n):
        time.sleep(0.5)
"""


def _run(args, clean_env, collector, config, workers, measure_s, settle_s=2.0):
    """One run: an aggregator with `config`, a controller stepping for the
    whole measurement, and `workers` (label, rank or None for no collector,
    range_us) side by side. Returns {label: report}."""
    from rlscope_ray.aggregator_process import start_aggregator

    tmp = tempfile.mkdtemp(prefix="rlscope_idle_bench_")
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write(config)
    agg = start_aggregator(os.path.join(tmp, "out"), config=cfg, args=["--grace-ms", "3000", "--exit-when-done"],
                           log=os.path.join(tmp, "aggregator.log"), work_dir=tmp, database=False)
    exe = os.path.join(args.build_dir, "tests", "apps", "idle_worker")
    counter = os.path.join(args.build_dir, "tests", "apps", "librlscope_test_call_counter.so")
    procs = {}
    try:
        base = clean_env()
        ctl_env = dict(base, RLSCOPE_AGGREGATOR=agg.endpoint, RLSCOPE_ROLE="controller")
        controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(settle_s + measure_s + 3)],
                                      env=ctl_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the controller's first step: workers arm at once
        for label, rank, range_us in workers:
            env = dict(base, LD_PRELOAD=counter)
            if rank is not None:
                env.update(NVTX_INJECTION64_PATH=collector, RLSCOPE_AGGREGATOR=agg.endpoint,
                           RLSCOPE_ROLE="worker", RLSCOPE_RANK=str(rank))
            report = os.path.join(tmp, "w%d.json" % len(procs))
            procs[label] = (subprocess.Popen([exe, "--report", report, "--range-us", str(range_us), "--settle-s",
                                              str(settle_s), "--measure-s", str(measure_s), "--max-s",
                                              str(settle_s + measure_s + 60)], env=env), report)
        out = {}
        for label, (p, report) in procs.items():
            if p.wait(timeout=settle_s + measure_s + 120) != 0:
                raise RuntimeError("idle_worker (%s) exited %d" % (label, p.returncode))
            with open(report) as f:
                out[label] = json.load(f)
        controller.wait(timeout=120)
        return out
    finally:
        for p, _ in procs.values():
            if p.poll() is None:
                p.kill()
        agg.stop(30, term_timeout=10)


def _row(label, r, base):
    wall_s = r["wall_ns"] / 1e9
    pct = 100.0 * r["cpu_ns"] / r["wall_ns"]
    calls, wakeups = r.get("calls", {}), r.get("wakeups", {})
    per_s = lambda d, k: "%.1f" % (d[k] / wall_s) if k in d else ""  # noqa: E731
    return [label, "%.0f" % wall_s, "%.3f %%" % pct,
            "" if base is None else "%+.3f %%" % (pct - 100.0 * base["cpu_ns"] / base["wall_ns"]),
            per_s(wakeups, "rlscope-flush"), per_s(wakeups, "ZMQbg/IO/0"), per_s(calls, "proc_opens"),
            per_s(calls, "send")]


def idle_section(args, print_table, clean_env, collector=None):
    collector = collector or os.path.join(args.build_dir, "collector", "librlscope_collector.so")
    measure_s = 20.0
    on = _run(args, clean_env, collector, "steps: all\nranks: [0, 2]\n",
              [("no collector", None, 0), ("unselected (ranks leave it out)", 1, 0),
               ("armed (steps: all), nothing recorded", 0, 0), ("1 % work, no collector", None, 50),
               ("1 % work, armed (steps: all)", 2, 50)], measure_s)
    off = _run(args, clean_env, collector, "steps: all\nranks: [0, 2]\ncpu: {sampling_hz: 0, off_cpu_hz: 0}\n",
               [("no collector", None, 0), ("armed, sampling off, nothing recorded", 0, 0),
                ("1 % work, no collector", None, 50), ("1 % work, armed, sampling off", 2, 50)], measure_s)
    rows = []
    for run in (on, off):
        for label, r in run.items():
            base = run["1 % work, no collector"] if label.startswith("1 %") else run["no collector"]
            rows.append(_row(label, r, None if "no collector" in label else base))
    print_table("Idle collectors: a worker's own CPU time (every thread) over %.0f s, side by side in one run "
                "(second block: cpu.sampling_hz 0 and off_cpu_hz 0), minus the same program's with no collector; "
                "wake-ups (voluntary context switches) and calls per second (tests/apps/call_counter.c)" % measure_s,
                ["worker", "s", "CPU (% of a core)", "over no collector", "flush thread wake-ups/s",
                 "ZeroMQ I/O thread wake-ups/s", "/proc opens/s", "socket sends/s"], rows)

#!/usr/bin/env python3
"""Runs the rlscope hot-path benchmarks and prints Markdown tables.

Usage: python3 bench/run_bench.py [--build-dir build] [--runs 3] [--pairs N]

Sections (each a function that runs its programs and prints one table):
  nvtx_pair_section   ns per nvtxRangePushA + nvtxRangePop pair under each
                      NVTX tool configuration (bench/nvtx_pair_bench).
  aggregator_section  range events/s from wire frames to a step's files on
                      one core (bench/aggregator_bench pinned to CPU 0, one
                      trace worker) and on two (CPUs 0-1, two workers), at
                      the default config (correction on, the collector's
                      record mix, json + pftrace) beside ranges alone
                      uncorrected; 2M range events, quick 1M; and wire
                      bytes per record beside the 32-byte in-memory record;
                      the step's trace in both formats (bytes per event,
                      encoding throughput of trace.json and trace.pftrace).
  correction_section  dense-annotation workloads uninstrumented vs profiled:
                      raw inflation and corrected error (start-up and A/B
                      calibration) beside RL-Scope's 16.8 % worst case.
  faults_section      each fault injected into a real run: events emitted,
                      in the output, reported lost, and the loop time.
  accuracy_section    one profiled run per workload, default config: each
                      selected step's corrected time against untooled steps
                      of the same run (in_run.py), beside the same estimator
                      on an unprofiled run (A/A), the spill, the disarmed
                      path, and the stated uncertainty's coverage.
  python_section      one Python range: rlscope_ray.range beside a plain
                      Python context manager, and the `nvtx` package under
                      our collector beside its own path with no tool and a
                      counting tool; torch's record_function.
  scale_section       collectors sustained by one aggregator on this host
                      (quick: 32 and 256 workers, 64 through 4 relays).
  sampler_section     cross-stack attribution: the CPU sampler's cost at 1 and
                      10 kHz beside sampling off, its accuracy on a program
                      with a known answer, and py-spy --native beside it
                      (bench/sampler_bench.py).
  whole_process_section  whole-process attribution: coverage on torch with its
                      default threads (recording threads only vs every
                      thread), native pools and stacks, off-CPU reasons, a
                      sample's cost with its stack walked, py-spy --native
                      beside it (bench/whole_process_bench.py).
  rundb_section       the run database: run.duckdb per million events beside
                      the JSON, and a question across 1,000 steps in SQL
                      beside a script reading the summaries.
  report_section      the report of 64 processes and 100 steps (quick: 32 and
                      25): size, write and Chromium render time, with and
                      without the timeline pictures (bench/report_bench.py).
  memory_section      the memory sampler's cost per reading beside reading
                      /proc/self/status (bench/memory_sampler_bench).
  idle_section        an idle collector's cost (unselected, armed with nothing
                      to record, sampling off, 1 % work) beside no collector,
                      side by side, with its wake-ups and /proc reads
                      (bench/idle_bench.py).
  always_on_section   always on: the PPO demo's step time against no profiler
                      and the selected-steps mode (A/A floor beside), bytes
                      per process per step, the dense workload, diff on a known
                      cause (bench/always_on_bench.py).
  (and gpu_conversion, ray_startup, demo, verl, window, alignment,
  window_latency, exit; see SECTIONS)

`make bench` runs the headline sections quick (about 4 minutes on 2 cores;
the last line gives each section's time); --long runs every section at full
size. Sections that start an aggregator or run Python workloads use the
installed rlscope_ray. NVTX reads NVTX_INJECTION64_PATH
once per process, so every configuration runs as its own process.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

EVENT_RECORD_BYTES = 32  # sizeof(rlscope::EventRecord), native/event.h
COLLECTOR_RING_KB = 65536  # per-thread ring for the "recording" configuration
DEFAULT_RING_KB = 1024  # the collector's default buffers.per_thread_kb


def free_tcp_port():
    """A port nothing listens on right now (the collector only connects)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    """The environment without any NVTX tool or rlscope settings (but the
    bench's spool root: what its programs leave on disk goes there, main())."""
    env = dict(os.environ)
    for key in list(env):
        if (key.startswith("RLSCOPE_") and key != "RLSCOPE_SPOOL_DIR") or key.startswith("NVTX_INJECTION"):
            del env[key]
    env.pop("RANK", None)
    return env


def ring_warmup_pairs(ring_kb):
    """Untimed pairs that touch a whole ring of ring_kb once without overflowing it."""
    records = ring_kb * 1024 // EVENT_RECORD_BYTES
    return max(records // 2 - 1024, 0)


def fmt(value, digits=1):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_table(title, header, rows):
    print(f"### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(fmt(c) for c in row) + " |")
    print()
    sys.stdout.flush()


def run_json(cmd, env, timeout_s):
    """Runs cmd; returns the JSON object on the last stdout line."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd)} printed nothing\nstderr:\n{proc.stderr}")
    if proc.stderr.strip():
        print(f"[stderr of {os.path.basename(cmd[0])}] {proc.stderr.strip()}", file=sys.stderr)
    return json.loads(lines[-1])


# ---------------------------------------------------------------------------
# Section: NVTX push+pop pair cost per tool configuration.


def nvtx_pair_configs(build_dir, endpoint, endpoint_step99):
    """(name, env overrides, warm-up pairs, reference) per configuration; the
    collectors send to a live aggregator: at endpoint (the run's steps: all),
    or for the configurations outside a selected step at endpoint_step99 (the
    run's steps: [99]; a worker takes the run's selection over its own)."""
    collector = os.path.join(build_dir, "collector", "librlscope_collector.so")
    bench = os.path.join(build_dir, "bench")
    warm = ring_warmup_pairs(COLLECTOR_RING_KB)
    configs = [
        ("no tool", {}, warm, "~0.8 ns/pair"),
        (
            "counting tool",
            {"NVTX_INJECTION64_PATH": os.path.join(bench, "librlscope_bench_counting_tool.so")},
            warm,
            "trivial-tool floor",
        ),
    ]
    rdtsc_tool = os.path.join(bench, "librlscope_bench_rdtsc_tool.so")
    if os.path.exists(rdtsc_tool):
        configs.append(("rdtsc recorder tool", {"NVTX_INJECTION64_PATH": rdtsc_tool}, warm,
                        "bare rdtsc recorder ~22 ns/pair"))
        configs.append(("rdtsc recorder, 32-byte records in a 64 MiB ring",
                        {"NVTX_INJECTION64_PATH": os.path.join(bench, "librlscope_bench_rdtsc_record32_tool.so")},
                        warm, "the rdtsc floor with the collector's memory traffic per event"))
    configs += [
        (
            "clock_gettime recorder tool",
            {"NVTX_INJECTION64_PATH": os.path.join(bench, "librlscope_bench_clock_tool.so")},
            warm,
            "clock_gettime recorder ~53 ns/pair",
        ),
        (
            f"rlscope collector, recording ({COLLECTOR_RING_KB} KiB ring)",
            {
                "NVTX_INJECTION64_PATH": collector,
                "RLSCOPE_AGGREGATOR": endpoint,
                "RLSCOPE_CONFIG": f"{{buffers: {{per_thread_kb: {COLLECTOR_RING_KB}}}}}",
            },
            warm,
            "target <= 1.5x the bare rdtsc recorder",
        ),
        (
            f"rlscope collector, recording ({COLLECTOR_RING_KB} KiB ring, no warm-up)",
            {
                "NVTX_INJECTION64_PATH": collector,
                "RLSCOPE_AGGREGATOR": endpoint,
                "RLSCOPE_CONFIG": f"{{buffers: {{per_thread_kb: {COLLECTOR_RING_KB}}}}}",
            },
            0,
            "target <= 1.5x the bare rdtsc recorder; no warm-up: the ring is prefaulted when the thread registers",
        ),
        (
            f"rlscope collector, recording (default {DEFAULT_RING_KB} KiB ring)",
            {
                "NVTX_INJECTION64_PATH": collector,
                "RLSCOPE_AGGREGATOR": endpoint,
            },
            ring_warmup_pairs(DEFAULT_RING_KB),
            "target <= 1.5x the bare rdtsc recorder",
        ),
        (
            "rlscope collector, unselected rank (ranks: [1], rank 0)",
            {
                "NVTX_INJECTION64_PATH": collector,
                "RLSCOPE_AGGREGATOR": endpoint,
                "RLSCOPE_CONFIG": "{ranks: [1]}",
                "RLSCOPE_RANK": "0",
            },
            warm,
            "target <= 1.5x the counting tool",
        ),
        (
            "rlscope collector, worker outside a selected step (steps: [99])",
            {
                "NVTX_INJECTION64_PATH": collector,
                "RLSCOPE_AGGREGATOR": endpoint_step99,
                "RLSCOPE_CONFIG": "{steps: [99]}",
                "RLSCOPE_ROLE": "worker",
            },
            warm,
            "target <= 1.5x the counting tool",
        ),
        (
            "rlscope collector, controller outside a selected step (steps: [99])",
            {
                "NVTX_INJECTION64_PATH": collector,
                "RLSCOPE_AGGREGATOR": endpoint_step99,
                "RLSCOPE_CONFIG": "{steps: [99]}",
                "RLSCOPE_ROLE": "controller",
            },
            warm,
            "the controller looks at each name for its step ranges",
        ),
    ]
    return configs


def nvtx_pair_section(args):
    exe = os.path.join(args.build_dir, "bench", "nvtx_pair_bench")
    if not os.path.exists(exe):
        raise SystemExit(f"{exe} not found: build nvtx_pair_bench (-DRLSCOPE_BUILD_TESTS=ON)")
    import tempfile

    from rlscope_ray.aggregator_process import start_aggregator

    rows = []
    # A live aggregator (at the lowest priority, on its own core when it can):
    # what the collector ships goes out, as in a run, not into its spool.
    command = [os.path.join(args.build_dir, "aggregator", "rlscope-ray-aggregator")]
    with tempfile.TemporaryDirectory(prefix="rlscope_nvtx_pair_bench_") as work, \
            start_aggregator(os.path.join(work, "out"), work_dir=os.path.join(work, "a"), nice=True,
                             command=command, database=False) as agg, \
            start_aggregator(os.path.join(work, "out99"), work_dir=os.path.join(work, "b"), nice=True,
                             command=command, config={"steps": [99]}, database=False) as agg99:
        _nvtx_pair_rows(args, exe, agg.endpoint, agg99.endpoint, rows)
    _against_baselines(rows)
    print_table(
        f"NVTX push+pop cost ({args.pairs} timed pairs/run in chunks of {args.chunk}, "
        f"{args.runs} runs; events include untimed warm-up)",
        ["configuration", "ns/pair (median of runs)", "ns/pair (min)", "events recorded",
         "dropped", "vs its baseline (medians)", "reference"],
        rows,
    )
    instruction_rows = _instructions_per_pair(args, exe)
    if instruction_rows:
        print_table("NVTX push+pop pair, instructions on the recording thread (callgrind, 60k pairs less 20k: exact "
                    "and the same on a busy machine, so a regression of the hot path shows here first)",
                    ["configuration", "instructions/pair", "vs counting tool", "reference"], instruction_rows)


def _against_baselines(rows):
    """Inserts each row's median over its target's baseline in the same run
    (the bare rdtsc recorder for recording, the counting tool for disarmed)
    before the reference; blank where a row has no target or no baseline."""
    medians = {row[0]: row[1] for row in rows}
    baselines = {"target <= 1.5x the bare rdtsc recorder": medians.get("rdtsc recorder tool"), "target <= 1.5x the counting tool": medians.get("counting tool")}
    for row in rows:
        base = next((b for key, b in baselines.items() if str(row[-1]).startswith(key)), None)
        row.insert(len(row) - 1, "%.2fx" % (row[1] / base) if base and row[1] is not None else None)


def _instructions_per_pair(args, exe):
    """Instructions per pair on the recording thread, under callgrind: the
    difference between two runs of different lengths (start-up cancels)."""
    import shutil
    import tempfile

    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        return []
    bench = os.path.join(args.build_dir, "bench")
    collector = os.path.join(args.build_dir, "collector", "librlscope_collector.so")
    nowhere = f"tcp://127.0.0.1:{free_tcp_port()}"  # no aggregator: the flush thread is another thread anyway
    configs = [
        ("counting tool", {"NVTX_INJECTION64_PATH": os.path.join(bench, "librlscope_bench_counting_tool.so")},
         "trivial-tool floor"),
        ("rdtsc recorder, 32-byte records", {"NVTX_INJECTION64_PATH": os.path.join(
            bench, "librlscope_bench_rdtsc_record32_tool.so")}, "the recording floor"),
        ("rlscope collector, recording", {"NVTX_INJECTION64_PATH": collector, "RLSCOPE_AGGREGATOR": nowhere,
                                          "RLSCOPE_CONFIG": "{buffers: {per_thread_kb: 65536}, flush: {exit_timeout_ms: 0}}"},
         "target <= 120 (269 before the fast lanes, 370 before the record path was inlined)"),
        ("rlscope collector, unselected rank", {"NVTX_INJECTION64_PATH": collector, "RLSCOPE_AGGREGATOR": nowhere,
                                                "RLSCOPE_CONFIG": "{ranks: [1], flush: {exit_timeout_ms: 0}}",
                                                "RLSCOPE_RANK": "0"}, "disarmed"),
    ]
    rows, floor = [], None
    with tempfile.TemporaryDirectory(prefix="rlscope_callgrind_") as work:
        for name, overrides, reference in configs:
            totals = []
            for pairs in (20000, 60000):
                out = os.path.join(work, f"cg.{len(rows)}.{pairs}")
                env = clean_env()
                env.update(overrides)
                subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                                exe, "--pairs", str(pairs), "--chunk", "1000", "--sleep-ms", "0", "--warmup-pairs", "0"],
                               env=env, capture_output=True, timeout=args.timeout_s)
                text = subprocess.run(["callgrind_annotate", out + "-01"], capture_output=True, text=True).stdout
                line = next((x for x in text.splitlines() if "PROGRAM TOTALS" in x), "")
                totals.append(int(line.split()[0].replace(",", "")) if line else None)
            if None in totals:
                rows.append([name, None, None, reference])
                continue
            per_pair = (totals[1] - totals[0]) / 40000
            floor = floor or per_pair
            rows.append([name, "%.0f" % per_pair, "%.1fx" % (per_pair / floor), reference])
    return rows


def _nvtx_pair_rows(args, exe, endpoint, endpoint_step99, rows):
    for name, overrides, warmup, reference in nvtx_pair_configs(args.build_dir, endpoint, endpoint_step99):
        env = clean_env()
        env.update(overrides)
        tool = overrides.get("NVTX_INJECTION64_PATH")
        if tool is not None and not os.path.exists(tool):
            rows.append([name, None, None, None, None, f"{reference} (not built: {tool})"])
            continue
        cmd = [exe, "--pairs", str(args.pairs), "--chunk", str(args.chunk),
               "--sleep-ms", str(args.sleep_ms), "--warmup-pairs", str(warmup)]
        results = []
        for i in range(args.runs):
            r = run_json(cmd, env, timeout_s=args.timeout_s)
            print(f"[{name} run {i + 1}/{args.runs}] {json.dumps(r)}", file=sys.stderr)
            results.append(r)
        median = statistics.median(r["ns_per_pair_median"] for r in results)
        best = min(r["ns_per_pair_min"] for r in results)
        recorded = [r["events_recorded"] for r in results]
        dropped = [r["dropped"] for r in results]
        rows.append([
            name,
            median,
            best,
            None if None in recorded else statistics.median(recorded),
            None if None in dropped else max(dropped),
            reference,
        ])


def python_section(args):
    """One Python range around a small function, per API and tool, each its
    own process (bench/python_range_bench.py): ns per range less the bare
    call, median and min over rounds of 100k (quick: 50k), median of the runs. Our
    rows beside what a user has without us (a plain Python context manager;
    the `nvtx` package's own path with no tool), the trivial-tool floor (the
    package under a counting tool) and the PyTorch profiler's record_function."""
    import tempfile

    from rlscope_ray import collector_path
    from rlscope_ray.aggregator_process import start_aggregator

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_range_bench.py")
    collector = collector_path()  # the installed package's: the one rlscope_ray's own calls reach
    counting = os.path.join(args.build_dir, "bench", "librlscope_bench_counting_tool.so")
    try:
        import nvtx  # noqa: F401
        have_nvtx = True
    except ImportError:
        have_nvtx = False
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    rows, per_run = [], (50000, 10000) if args.quick else (100000, 20000)  # ranges per round: ours and nvtx; torch
    with tempfile.TemporaryDirectory(prefix="rlscope_python_bench_") as work:
        with start_aggregator(os.path.join(work, "out"), work_dir=work, nice=True,
                              command=[os.path.join(args.build_dir, "aggregator", "rlscope-ray-aggregator")],
                              database=False) as agg:
            ours = {"RLSCOPE_AGGREGATOR": agg.endpoint, "RLSCOPE_ROLE": "worker",
                    "NVTX_INJECTION64_PATH": collector}
            configs = _python_configs(args, ours, counting, have_nvtx, have_torch)
            results = {i: [] for i in range(len(configs))}
            for _ in range(args.runs):  # interleaved: a drifting machine moves every row alike
                for i, (api, tool, mode, overrides, reference) in enumerate(configs):
                    env = clean_env()
                    env.update(overrides)
                    ranges = per_run[1] if mode.startswith("torch") else per_run[0]
                    results[i].append(run_json([sys.executable, script, mode, "--ranges", str(ranges)], env,
                                               args.timeout_s))
            # Two baselines per row, run i against run i: what a user has
            # without us (for an `nvtx` API the package's own path with no
            # tool; for rlscope_ray.range a plain Python class doing nothing),
            # and the trivial-tool floor (the same API under a counting tool).
            counting_runs = {api: results[i] for i, (api, tool, *_r) in enumerate(configs) if tool == "counting tool"}
            without_us = {api: results[i] for i, (api, tool, *_r) in enumerate(configs) if tool == "no tool"}
            python_cm = next((results[i] for i, c in enumerate(configs) if c[2] == "python_cm"), None)

            def ratio(runs, base):
                if base is None:
                    return None
                return "%.2fx" % statistics.median(r["ns_per_range_median"] / c["ns_per_range_median"]
                                                   for r, c in zip(runs, base))

            for i, (api, tool, mode, overrides, reference) in enumerate(configs):
                runs = results[i]
                events = [r["events"] for r in runs]
                user = python_cm if mode == "rlscope_range" else without_us.get(api)
                ours_or_tool = tool.startswith("rlscope") or tool in ("no collector", "counting tool")
                rows.append([api, tool, statistics.median(r["ns_per_range_median"] for r in runs),
                             min(r["ns_per_range_min"] for r in runs),
                             ratio(runs, user) if ours_or_tool else None,
                             ratio(runs, counting_runs.get(api)) if tool.startswith("rlscope") else None,
                             None if None in events else statistics.median(events),
                             None if None in events else max(r["dropped"] for r in runs), reference])
    print_table("Python: one range around a small function, ns per range less the bare call (%dk ranges x 7 "
                "rounds per run, %d interleaved runs; record_function %dk)"
                % (per_run[0] // 1000, args.runs, per_run[1] // 1000),
                ["API", "tool", "ns/range (median)", "ns/range (min)",
                 "vs what a user has without us (pair by pair)", "vs the counting tool (pair by pair)",
                 "events recorded", "dropped", "reference"],
                rows)


def _python_configs(args, ours, counting, have_nvtx, have_torch):
    """(API, tool, mode, env overrides, reference) per row of the python
    section: ours beside what a user has without us (a plain Python context
    manager; the `nvtx` package with no tool) and the trivial-tool floor (the
    package under a counting tool), and the peers."""
    floor = {"RLSCOPE_BENCH_MODULES": os.path.join(args.build_dir, "bench")}
    configs = [
        ("a Python class with __enter__/__exit__ doing nothing", "none: baseline", "python_cm", {},
         "what a user writes: the baseline of rlscope_ray.range"),
        ("a C-level context manager (bench/null_context.c)", "none", "null_context", floor,
         "informational: its __enter__/__exit__ bound per `with`, as C extensions usually are"),
        ("rlscope_ray.range", "no collector", "rlscope_range", {}, "target <= 100 ns"),
        ("rlscope_ray.range", "rlscope collector, recording", "rlscope_range", ours, "target <= 250 ns"),
        ("rlscope_ray.mark", "no collector", "rlscope_mark", {}, ""),
        ("rlscope_ray.mark", "rlscope collector, recording", "rlscope_mark", ours, ""),
    ]
    if have_nvtx:
        for api, mode in (("nvtx.annotate", "nvtx_annotate"), ("nvtx.push_range/pop_range", "nvtx_push_pop")):
            configs += [
                (api, "no tool", mode, {}, "the package's own path: the baseline of its rows"),
                (api, "counting tool", mode, {"NVTX_INJECTION64_PATH": counting}, "trivial-tool floor"),
                (api, "rlscope collector, recording", mode, ours, "target: within 1.2x of the counting tool"),
            ]
    if have_torch:
        configs.append(("torch.profiler.record_function", "torch.profiler.profile(activities=[CPU])",
                        "torch_record_function", {}, "peer"))
    return configs


def aggregator_section(args):
    """Decode -> per-step store -> the step's files, on one core and on two;
    2M ranges' events (quick: 1M; the figures are per event, the opening
    table's scale with it). The headline is the default path: what a
    collector at the default config sends (costs in its hello, so
    correction moves every range; cost samples, CPU samples with native
    stacks, off-CPU looks, memory) written as trace.json and trace.pftrace;
    the ranges alone, uncorrected, into trace.json alone (the figure quoted
    before) beside it."""
    binary = os.path.join(args.build_dir, "bench", "aggregator_bench")
    rows, by_mix = [], {}
    args.events = 1000000 if args.quick else 2000000
    # The default last: the opening table below opens the last run's files.
    mixes = (("ranges only, uncorrected, json only (as quoted before)", ["--ranges-only"]),
             ("default config (corrected; samples, looks, memory; json + pftrace)", []))
    for threads in (1, 4):
        for label, flags in mixes:
            results, two_cores = [], []
            by_mix[(threads, label)] = results
            for _ in range(args.runs):
                # Interleaved, so a busy machine weighs on both alike.
                for cpus, workers, into in (("0", 1, results), ("0,1", 2, two_cores)):
                    cmd = ["taskset", "-c", cpus, binary, "--events", str(args.events), "--threads", str(threads),
                           "--workers", str(workers), *flags,
                           "--out", os.path.join("/tmp", "rlscope_aggregator_bench_%d" % os.getpid())]
                    into.append(run_json(cmd, clean_env(), args.timeout_s))
            # Per range event (push or pop): the other records ride along.
            per = lambda x: x["range_events"] / x["seconds"]  # noqa: E731
            r = results[0]
            rows.append([
                "%dM range events, %d thread(s), 1 step, %s" % (args.events // 1000000, threads, label),
                fmt(statistics.median(per(x) for x in results) / 1e6, 2),
                fmt(statistics.median(per(x) for x in two_cores) / 1e6, 2),
                fmt(statistics.median(x["range_events"] / x["cpu_seconds"] for x in results) / 1e6, 2),
                fmt(r["events"] / r["range_events"], 2),
                fmt(r["bytes_per_event"], 2),
                str(EVENT_RECORD_BYTES),
                fmt(r["trace_bytes"] / r["range_events"], 1),
                fmt(statistics.median(x["encode_ns_per_event"] for x in results), 1),
                fmt(statistics.median(x["packer_ns_per_event"] for x in results), 1),
                fmt(statistics.median(x["aggregator_peak_mb"] / (x["range_events"] / 1e6) for x in results), 0),
                "target >= 2 (1 core), >= 3 (2 cores); RL-Scope analysis: 0.145",
            ])
    rows.sort(key=lambda row: (row[0].split(" thread")[0], "default config" not in row[0]))  # the default first
    print_table("Aggregator: wire frames -> a step's files, on one core and on two (%dM range events, median of %d "
                "runs); and the collector's encoding of the same events" % (args.events // 1000000, args.runs),
                ["workload", "M range events/s (1 core)", "M range events/s (2 cores, 2 workers)",
                 "M range events/s of CPU time (1 core)", "records per range event", "wire bytes/record",
                 "record bytes (in memory)", "trace.json bytes/range event", "encode ns/record (ours)",
                 "encode ns/record (msgpack-c packer)", "aggregator peak MB per M range events (above the frames)",
                 "reference"], rows)
    formats = []
    for (threads, label), results in by_mix.items():
        json_s = statistics.median(x["json_encode_s"] for x in results)
        pf_s = statistics.median(x["pftrace_encode_s"] for x in results)
        r = results[0]
        formats.append(["%dM range events, %d thread(s), %s" % (args.events // 1000000, threads, label),
                        fmt(r["json_bytes"] / r["range_events"], 1), fmt(r["pftrace_bytes"] / r["range_events"], 1),
                        fmt(r["range_events"] / json_s / 1e6, 2), fmt(r["range_events"] / pf_s / 1e6, 2), "<= 20"])
    print_table("Trace formats: the same step encoded as trace.json and as trace.pftrace, one core, outside the "
                "timed span above (median of %d runs)" % args.runs,
                ["workload", "trace.json bytes/range event", "trace.pftrace bytes/range event",
                 "JSON encode M range events/s", "Perfetto encode M range events/s", "target bytes/event"], formats)
    opening_section(os.path.join("/tmp", "rlscope_aggregator_bench_%d" % os.getpid(), "step_1"), args)


# Reads one trace file in a fresh Python and prints {"seconds", "peak_mb"}.
_OPEN_TRACE = """
import json, resource, sys, time
path = sys.argv[1]
t = time.perf_counter()
if path.endswith(".json"):
    n = len(json.load(open(path))["traceEvents"])
else:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    trace = pb.Trace()
    trace.ParseFromString(open(path, "rb").read())
    n = len(trace.packet)
print(json.dumps({"seconds": time.perf_counter() - t, "items": n,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def opening_section(step_dir, args):
    """What opening the bench's step (args.events) costs a reader: the whole file
    parsed in a fresh Python, JSON with json.load, the protobuf with
    perfetto's own protos (the UI and trace_processor parse in C++; this is
    the same work in one process that holds it all)."""
    rows = []
    for name in ("trace.json", "trace.pftrace"):
        path = os.path.join(step_dir, name)
        if not os.path.exists(path):
            continue
        runs = [run_json([sys.executable, "-c", _OPEN_TRACE, path], clean_env(), args.timeout_s) for _ in range(args.runs)]
        rows.append([name, fmt(os.path.getsize(path) / 1e6, 1), str(runs[0]["items"]),
                     fmt(statistics.median(r["seconds"] for r in runs), 2),
                     fmt(statistics.median(r["peak_mb"] for r in runs), 0)])
    print_table("Opening the %dM-event step (4 threads) in each format: parsed whole in a fresh Python (median of %d)"
                % (args.events // 1000000, args.runs),
                ["file", "MB", "events / packets", "parse s", "peak RSS MB"], rows)


def ray_startup_section(args):
    """rlscope_ray.init() + first profiled actor versus plain Ray."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_startup_bench.py")
    rows = []
    for mode, what in (("plain", "ray.init + actor (no rlscope, prestarted worker)"),
                       ("plain-env", "ray.init + actor with its own runtime_env (no rlscope)"),
                       ("rlscope-disabled", "rlscope_ray.init + actor {'enabled': False}"),
                       ("rlscope", "rlscope_ray.init + profiled actor")):
        results = [run_json([sys.executable, script, mode], clean_env(), args.timeout_s) for _ in range(args.runs)]
        rows.append([what] + [fmt(statistics.median(r[k] for r in results), 2)
                              for k in ("init_s", "first_actor_s", "total_s")])
    print_table("Ray: session start to first actor ready, seconds (median of %d runs)" % args.runs,
                ["configuration", "init", "first actor ready", "total"], rows)


def demo_section(args):
    """The PPO demo with profiling on versus {'enabled': False} on every
    worker, in interleaved pairs (a drifting machine moves both alike)."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "verl",
                          "mini_ppo.py")
    steps = 20 if args.quick else 30
    runs = {"off": [], "on": []}
    for i in range(args.runs):
        for profile in ("off", "on"):
            out = os.path.join("/tmp", "rlscope_demo_bench_%d_%s_%d" % (os.getpid(), profile, i))
            timings = out + ".json"
            cmd = [sys.executable, script, "--steps", str(steps), "--capture", "all", "--ranks", "all",
                   "--profile", profile, "--out", out, "--timings", timings]
            proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=args.timeout_s)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
            with open(timings) as f:
                runs[profile].append(json.load(f))
    rows = []
    for profile in ("off", "on"):
        r = runs[profile]
        rows.append(["workers " + ("profiled (all ranks, all steps)" if profile == "on" else "{'enabled': False}")]
                    + [fmt(statistics.median(x[k] for x in r), 2) for k in ("wall_s", "setup_s", "loop_s")]
                    + [fmt(1000 * statistics.median(x["loop_s"] for x in r) / steps, 1)])
    ratio = [on[k] / off[k] for on, off in zip(runs["on"], runs["off"]) for k in ("wall_s",)]
    loop_ratio = [on["loop_s"] / off["loop_s"] for on, off in zip(runs["on"], runs["off"])]
    rows.append(["on / off, pair by pair (median)", "%.3f" % statistics.median(ratio), "",
                 "%.3f" % statistics.median(loop_ratio), ""])
    print_table("PPO demo (2 nodes, 4 workers, %d steps), seconds (median of %d interleaved pair%s)"
                % (steps, args.runs, "" if args.runs == 1 else "s"),
                ["configuration", "wall", "cluster + workers up", "training loop", "ms per step"], rows)


def scale_section(args):
    """Collectors sustained by one aggregator on this host (tests/apps/
    scale_run.py): N mostly idle C++ workers (a 50 us NVTX range every 5 ms)
    and a controller with 5 steps; what registered, what was written, every
    event accounted for, the aggregator's peak RSS."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "apps",
                          "scale_run.py")
    rows = []
    # Quick: 32, 64 through 4 relays, and 256 (22 s here once idle collectors
    # stopped flushing every 20 ms); bench-long goes on to 512.
    runs = ((32, 0), (64, 4), (256, 0)) if args.quick else ((64, 0), (128, 0), (256, 0), (256, 8), (512, 0),
                                                           (512, 16))
    # With relays, each relay's workers run in a network namespace of their
    # own (a host: its own loopback, a veth pair to the root) where permitted.
    netns = os.geteuid() == 0 and subprocess.run(["ip", "netns", "add", "rlsbench%d" % os.getpid()],
                                                 capture_output=True).returncode == 0
    if netns:
        subprocess.run(["ip", "netns", "del", "rlsbench%d" % os.getpid()], capture_output=True)
    for n, relays in runs:
        out = os.path.join("/tmp", "rlscope_scale_bench_%d_%d_%d" % (os.getpid(), n, relays))
        hosts = relays if netns else 0
        r = run_json([sys.executable, script, "--build-dir", args.build_dir, "--out", out, "--workers", str(n),
                      "--relays", str(relays), "--netns-hosts", str(hosts), "--timeout-s", "400"], clean_env(),
                     timeout_s=1800)
        events_m = r["events_received"] / 1e6
        why = [line for line in r["aggregator_log_tail"].splitlines() if "no step written" in line]
        rows.append([str(n), "%d (one per namespace host)" % relays if hosts else str(relays) if relays else "none",
                     str(relays + 1 if relays else n + 1),
                     "%d / %d" % (r["processes_registered"], n + 1), str(len(r["not_profiled"])),
                     str(r["processes_lost"]),
                     "yes" if r["controller_registered"] else "no", "%d / 5" % len(r["steps_written"]),
                     str(r["events_received"]), str(r["events_dropped"]), str(len(r["unaccounted"])),
                     fmt(r["aggregator_peak_rss_mb"], 0),
                     fmt(r["aggregator_peak_rss_mb"] / events_m, 0) if events_m > 0 else "n/a",
                     fmt(r["wall_s"], 1), why[0].split(": ", 1)[1][:90] + "..." if why else ""])
    print_table("One root aggregator, %d to %d collectors on this host (2 cores shared by all), without and with "
                "relays (worker i on relay i mod R; the controller straight to the root; 5 steps)"
                % (runs[0][0] + 1, max(n for n, _ in runs) + 1),
                ["workers", "relays", "root connections", "registered", "missing (named in not_profiled)",
                 "lost (silent without a goodbye)", "controller", "steps written",
                 "events received", "dropped", "processes unaccounted", "root peak RSS MB", "MB per M events",
                 "wall s", "said"], rows)


def verl_section(args):
    """verl 0.9's main_ppo.run_ppo on CPU (tests/apps/verl_ppo_app.py, 6 steps)
    with global_profiler.tool=rlscope versus without it, in interleaved pairs."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "tests", "apps", "verl_ppo_app.py")
    try:
        import verl  # noqa: F401
    except ImportError:
        print("\n(verl section skipped: verl is not installed; make venv installs requirements-verl.txt)\n")
        return
    profiled = ["global_profiler.tool=rlscope", "global_profiler.steps=[2,3]",
                "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0]"]
    walls = {"off": [], "on": []}
    for i in range(args.runs):
        for profile in ("off", "on"):  # interleaved: a drifting machine moves both alike
            out = os.path.join("/tmp", "rlscope_verl_bench_%d_%s_%d" % (os.getpid(), profile, i))
            cmd = [sys.executable, script, out, "--total", "6"] + (profiled if profile == "on" else [])
            t0 = time.monotonic()
            proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=args.timeout_s,
                                  cwd="/tmp")
            walls[profile].append(time.monotonic() - t0)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    ratios = sorted(on / off for on, off in zip(walls["on"], walls["off"]))
    rows = [[label, fmt(statistics.median(walls[k]), 1), fmt(min(walls[k]), 1), fmt(max(walls[k]), 1)]
            for k, label in (("off", "without rlscope"), ("on", "global_profiler.tool=rlscope, steps [2,3], rank 0"))]
    rows.append(["ratio (pair by pair)", "%.3f" % statistics.median(ratios), "%.3f" % ratios[0], "%.3f" % ratios[-1]])
    print_table("verl 0.9 main_ppo.run_ppo on CPU (driver, TaskRunner, 2 workers, 6 steps), wall seconds of the "
                "whole run (%d interleaved pairs)" % args.runs, ["configuration", "median", "min", "max"], rows)


def window_section(args):
    """Events shipped per step: steps 2, 3, 5 (ranks 0, 1) versus the whole run."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "verl",
                          "mini_ppo.py")
    rows = []
    for capture, ranks in (("all", "all"), ("all", "0,1"), ("2,3,5", "0,1")):
        out = os.path.join("/tmp", "rlscope_window_bench_%d_%s_%s" % (os.getpid(), capture, ranks))
        cmd = [sys.executable, script, "--steps", "6", "--capture", capture, "--ranks", ranks, "--out", out]
        proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=args.timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        with open(os.path.join(out, "run.json")) as f:
            run = json.load(f)
        shipped = sum(p["events_received"] for p in run["processes"])
        rows.append([f"steps {capture}, ranks {ranks}", str(shipped), fmt(shipped / 6, 0),
                     str(len(run["steps_written"]))])
    print_table("Events shipped by all collectors of the PPO demo (6 steps, 4 workers)",
                ["capture", "events shipped", "per step of the run", "steps written"], rows)


def gpu_conversion_section(args):
    """CUPTI activity records -> GpuRecords on the collector's side (no GPU
    needed: hand-built CUDA 13 kernel records walked by the real libcupti).
    The timed loop is gpu_activity_test's DISABLED_ throughput test, which the
    test suite never runs; the spread (min, median, max) is over the runs."""
    binary = os.path.join(args.build_dir, "tests", "cpp", "gpu_activity_test")
    if not os.path.exists(binary):
        print(f"(GPU conversion benchmark skipped: {binary} not built)")
        return
    cmd = [binary, "--gtest_also_run_disabled_tests",
           "--gtest_filter=ConvertActivityBuffer.DISABLED_ThroughputOfAMegabyteOfKernels"]
    rates = []
    for _ in range(args.runs):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
        lines = [l for l in proc.stdout.splitlines() if l.startswith('{"bench": "cupti_conversion"')]
        if proc.returncode != 0 or not lines:
            print(f"(GPU conversion benchmark skipped: {proc.stdout[-300:]})")
            return
        rates.append(json.loads(lines[-1]))
    per_s = sorted(r["records_per_s"] for r in rates)
    spread = [per_s[0], statistics.median(per_s), per_s[-1]]
    print_table("GPU activity conversion (1 MiB buffers of CUPTI kernel records), %d runs" % args.runs,
                ["records per buffer", "M records/s (min)", "M records/s (median)", "M records/s (max)",
                 "ns per record (median)"],
                [[str(rates[0]["records_per_buffer"])] + [fmt(v / 1e6, 1) for v in spread]
                 + [fmt(1e9 / spread[1], 1)]])


def alignment_section(args):
    """Estimated clock offsets of collectors in time namespaces (known truth):
    the stated bound against the real error per step and worker, over the
    connection (the path before the probes had their own) and on the UDP
    probe path (the default), idle and with both cores busy; then workers
    whose own probe bursts come back 300 ms late: what each step says."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clock_alignment_bench.py")
    if subprocess.run(["unshare", "--fork", "--time", "--monotonic", "1", "true"], capture_output=True).returncode:
        print("(alignment skipped: time namespaces are not permitted here)")
        return

    def measure(*extra):
        cmd = [sys.executable, script, "--build-dir", args.build_dir] + list(extra)
        proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=args.timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.splitlines()[-1])

    rows = []
    for load in (False, True):
        for path in ("connection", "udp"):
            r = measure("--path", path, *(["--load"] if load else []))
            bounds = sorted(c["bound_ns"] / 1000 for c in r["checks"])
            errors = sorted(c["error_ns"] / 1000 for c in r["checks"])
            inside = sum(c["error_ns"] <= c["bound_ns"] for c in r["checks"])
            rows.append(["both cores busy" if load else "idle",
                         "connection (before)" if path == "connection" else "own UDP path (default)",
                         str(len(r["checks"])), f"{statistics.median(bounds):.1f} / {bounds[-1]:.1f}",
                         f"{statistics.median(errors):.2f} / {errors[-1]:.2f}",
                         f"{100.0 * inside / max(1, len(r['checks'])):.0f} %"])
    print_table("Clock alignment over loopback, 3 workers in time namespaces (-500 s, 0, +1234 s), 40 steps of "
                "300 ms each (target: bound <= 5 us idle; error <= bound in 100 % of checks)",
                ["machine", "probe path", "checks (step x worker)", "stated bound, median / max (us)",
                 "real error, median / max (us)", "error <= bound"], rows)
    rows = []
    for path in ("connection", "udp"):
        r = measure("--path", path, "--load", "--late", "300:own", "--steps", "20")
        steps = r["steps"]
        rows.append(["connection" if path == "connection" else "own UDP path (default)", str(len(steps)),
                     str(sum(s["reason"] == "complete" and not s["held"] and not s["wrong_silently"] for s in steps)),
                     str(sum(s["reason"] == "complete" and s["held"] and not s["wrong_silently"] for s in steps)),
                     str(sum(s["reason"] == "clock_unaligned" for s in steps)),
                     str(sum(s["wrong_silently"] for s in steps)), str(r["probe_requests"])])
    print_table("Workers whose own probe bursts come back 300 ms late (a test hook; both cores busy), 20 steps: what "
                "each step says (target: 0 steps with a misplaced or missing worker that do not say so)",
                ["probe path", "steps", "right at once", "held, then right", "marked clock_unaligned",
                 "wrong, not saying so", "bursts asked for"], rows)


def spread(values, digits=1):
    """min / median / max of a list, as one cell."""
    v = sorted(values)
    return f"{v[0]:.{digits}f} / {statistics.median(v):.{digits}f} / {v[-1]:.{digits}f}"


def window_latency_section(args):
    """How long a worker's collector takes to arm after the controller's step
    edge and to disarm after the selected step (the capture windows'
    broadcast), idle and with both cores busy (bench/window_bench.py)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "window_bench.py")
    rows = []
    for load in (False, True):
        lines = []
        for _ in range(args.runs):
            cmd = [sys.executable, script] + (["--load"] if load else [])
            proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=args.timeout_s)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
            lines += [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        opened = [r["open_latency_us"] / 1000 for r in lines if r["open_latency_us"] is not None]
        closed = [r["close_latency_us"] / 1000 for r in lines if r["close_latency_us"] is not None]
        armed = sum(1 for r in lines if r["armed_when_step_began"])
        rows.append(["both cores busy" if load else "idle", str(len(lines)),
                     spread(opened, 2) if opened else "n/a", spread(closed, 2) if closed else "n/a",
                     f"{armed} of {len(lines)}", "step before: 150 ms; slack 20 ms"])
    print_table("Capture windows on a worker, ms after the controller's step edge (min / median / max over %d "
                "runs x 3 selected steps)" % args.runs,
                ["machine", "windows", "armed after step s-1 began", "disarmed after step s ended",
                 "armed when step s began", "budget"], rows)


def exit_section(args):
    """What a process pays at exit when its aggregator is unreachable (the
    collector lingers up to flush.exit_timeout_ms), beside no profiler and a
    live aggregator: nvtx_app, 5 steps of 20 ms, wall seconds."""
    import tempfile

    from rlscope_ray.aggregator_process import start_aggregator

    app = [os.path.join(args.build_dir, "tests", "apps", "nvtx_app"), "--steps", "5", "--step-ms", "20"]
    collector = os.path.join(args.build_dir, "collector", "librlscope_collector.so")
    rows = []

    def timed(env):
        t0 = time.perf_counter()
        subprocess.run(app, env=env, check=True, timeout=args.timeout_s, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0

    with tempfile.TemporaryDirectory(prefix="rlscope_exit_bench_") as work:
        with start_aggregator(os.path.join(work, "out"), work_dir=work,
                              command=[os.path.join(args.build_dir, "aggregator", "rlscope-ray-aggregator")],
                              database=False) as agg:
            live = agg.endpoint
            modes = [("no profiler", {}, "-"),
                     ("live aggregator", {"RLSCOPE_AGGREGATOR": live}, "-"),
                     ("unreachable aggregator, exit_timeout_ms 500",
                      {"RLSCOPE_AGGREGATOR": f"tcp://127.0.0.1:{free_tcp_port()}",
                       "RLSCOPE_CONFIG": "{flush: {exit_timeout_ms: 500}}"}, "at most +0.5 s"),
                     ("unreachable aggregator, exit_timeout_ms 0",
                      {"RLSCOPE_AGGREGATOR": f"tcp://127.0.0.1:{free_tcp_port()}",
                       "RLSCOPE_CONFIG": "{flush: {exit_timeout_ms: 0}}"}, "about +0 s")]
            times = {name: [] for name, _, _ in modes}
            for _ in range(args.runs):  # interleaved, so drift hits every mode alike
                for name, extra, _ in modes:
                    env = clean_env()
                    if extra:
                        env.update(extra, RLSCOPE_ROLE="worker", NVTX_INJECTION64_PATH=collector)
                    times[name].append(timed(env))
    for name, _, target in modes:
        rows.append([name, spread(times[name], 3), target])
    print_table("Exit: nvtx_app, 5 steps of 20 ms, wall s (min / median / max of %d interleaved runs)" % args.runs,
                ["aggregator", "wall s", "expected"], rows)


def correction_section(args):
    """Overhead correction on dense annotations (100k `nvtx` ranges per step, in
    the process that steps or in a worker it waits on):
    raw inflation and corrected error, start-up calibration and A/B
    (`rlscope-ray calibrate`), beside RL-Scope's published worst case."""
    import tempfile

    from accuracy_bench import workloads
    from rlscope_ray.ab_calibration import Runner, calibrate

    config = {"buffers": {"per_thread_kb": 32768}}
    rows = []

    def med(runs):  # the median step over every run's steps but the first (start-up)
        return statistics.median(v for r in runs for n, v in r.items() if n != min(r))

    for label, cmd in workloads(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 10, 100000):
        scale = calibrate(cmd, runs=args.runs, config=config, timeout_s=args.timeout_s).scale
        with tempfile.TemporaryDirectory(prefix="rlscope_correction_bench_") as work:
            runner = Runner(cmd, work, config, args.timeout_s)
            plain, startup, ab = [], [], []
            for i in range(args.runs):  # held-out runs, order rotated against drift
                jobs = [lambda: plain.append(runner.plain()),
                        lambda: startup.append(runner.profiled(1.0)),
                        lambda: ab.append(runner.profiled(scale)),
                        lambda: plain.append(runner.plain())]
                for job in jobs[i % 2:] + jobs[:i % 2]:
                    job()
        base = med(plain)
        raw = med([r.raw for r in startup])

        def err(runs):
            """The median corrected error, and its range over the runs."""
            per_run = sorted(100 * (med([r.corrected]) / base - 1) for r in runs)
            return "%+.1f %% (%+.1f to %+.1f)" % (100 * (med([r.corrected for r in runs]) / base - 1),
                                                   per_run[0], per_run[-1])

        # The noise floor: two uninstrumented halves against each other, and
        # the two profiled sets' raw steps (the scale does not change the run).
        a_a = 100 * abs(med(plain[0::2]) / med(plain[1::2]) - 1)
        p_p = 100 * abs(raw / med([r.raw for r in ab]) - 1)
        rows.append([label, fmt(base, 1), fmt(raw, 1), "%+.1f %%" % (100 * (raw / base - 1)),
                     err(startup), fmt(scale, 3), err(ab), "%.1f %%" % a_a,
                     "%.1f %%" % p_p, "16.8 %"])
    print_table("Overhead correction, 10 steps x 100k ranges (held-out runs: median of steps 2-10 of %d runs "
                "each, and the range of the runs' own medians; target |error| < 3 %%)" % args.runs,
                ["workload", "uninstrumented ms/step", "raw ms/step", "raw inflation",
                 "corrected, start-up calibration", "A/B scale", "corrected, A/B scale",
                 "noise: uninstr. vs uninstr.", "noise: profiled vs profiled", "RL-Scope worst (published)"],
                rows)


def faults_section(args):
    """Faults injected into real runs: events emitted, in the output, reported
    lost, and the program's loop time (bench/fault_bench.py)."""
    import fault_bench

    args.root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fault_bench.faults_section(args, clean_env, print_table)


def accuracy_section(args):
    """Correction accuracy measured inside one profiled run, at the default
    config (bench/accuracy_bench.py, rlscope_ray/in_run.py)."""
    import accuracy_bench

    args.root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    accuracy_bench.accuracy_section(args, print_table)


def sampler_section(args):
    """Cross-stack attribution: sampler cost, accuracy, py-spy beside it
    (bench/sampler_bench.py)."""
    import sampler_bench

    args.root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sampler_bench.sampler_section(args, print_table, clean_env, run_json)


def whole_process_section(args):
    """Whole-process attribution: coverage on torch with default threads,
    native pools and stacks, off-CPU reasons, a sample's cost with its stack
    walked (bench/whole_process_bench.py)."""
    import whole_process_bench

    args.root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    whole_process_bench.whole_process_section(args, print_table, clean_env)


def rundb_section(args):
    """The run database: size per million events beside the JSON, a
    cross-step question over 1,000 steps in SQL beside a script over the
    summaries (bench/rundb_bench.py; about 10 s)."""
    import rundb_bench

    rundb_bench.rundb_section(args, print_table)


def report_section(args):
    """The report at scale: 64 processes and 100 steps (quick: 32 and 25),
    written and rendered in headless Chromium, with and without its timeline
    pictures (bench/report_bench.py; about four minutes, three runs; quick 15 s)."""
    import report_bench

    report_bench.report_section(args, print_table)


def idle_section(args):
    """What a collector costs a process with nothing (or little) to record,
    and its wake-ups and /proc reads, side by side with no collector
    (bench/idle_bench.py; two runs of about 25 s)."""
    import idle_bench

    idle_bench.idle_section(args, print_table, clean_env)


def memory_section(args):
    """The memory sampler's cost per reading (a pread of /proc/self/statm on
    the flush thread, once per flush) beside reading /proc/self/status and a
    clock_gettime, and its share of a core at the default flush interval."""
    exe = os.path.join(args.build_dir, "bench", "memory_sampler_bench")
    r = run_json([exe], clean_env(), args.timeout_s)
    per_s = 1000 / 20  # flush.interval_ms default
    rows = [["pread of /proc/self/statm (ours)", r["statm_pread_ns"], f"{r['statm_pread_ns'] * per_s / 1e7:.4f} %"],
            ["open+read+parse /proc/self/status (VmRSS)", r["status_read_ns"],
             f"{r['status_read_ns'] * per_s / 1e7:.4f} %"],
            ["clock_gettime (floor)", r["clock_gettime_ns"], ""]]
    print_table("Memory sampler: ns per reading, and a core's share at one reading per 20 ms flush (a busy "
                "collector's; an idle one reads once a second)",
                ["reading", "ns", "share of a core"], rows)


def always_on_section(args):
    """Always on: the PPO demo's step time and bytes per step, the dense
    workload, and rlscope-ray diff on a known cause (bench/always_on_bench.py)."""
    import always_on_bench

    always_on_bench.run(args, print_table, fmt, clean_env)


SECTIONS = {
    "nvtx_pair": nvtx_pair_section,
    "python": python_section,
    "aggregator": aggregator_section,
    "gpu_conversion": gpu_conversion_section,
    "ray_startup": ray_startup_section,
    "demo": demo_section,
    "scale": scale_section,
    "verl": verl_section,
    "window": window_section,
    "alignment": alignment_section,
    "window_latency": window_latency_section,
    "exit": exit_section,
    "correction": correction_section,
    "faults": faults_section,
    "accuracy": accuracy_section,
    "sampler": sampler_section,
    "whole_process": whole_process_section,
    "rundb": rundb_section,
    "report": report_section,
    "memory": memory_section,
    "idle": idle_section,
    "always_on": always_on_section,
}


# `make bench`: the headline tables in a few minutes; --long: every section,
# at full size (about 40 minutes).
QUICK_SECTIONS = ["nvtx_pair", "python", "aggregator", "scale", "idle", "demo", "sampler", "whole_process", "rundb",
                  "report", "memory", "always_on"]
QUICK_PAIRS = 128 * 1024  # 16 chunks of 8192 a run (each run is mostly the 30 ms pauses between them)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build", help="CMake build directory (default: build)")
    parser.add_argument("--long", action="store_true",
                        help="every section at full size (default: the headline sections, quick)")
    parser.add_argument("--runs", type=int, default=None, help="runs per configuration (default 3; quick: 3, "
                        "the demo 1 pair)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="timed push+pop pairs per run (default 2097152; quick 131072)")
    parser.add_argument("--chunk", type=int, default=8192, help="pairs per timed chunk")
    parser.add_argument("--sleep-ms", type=int, default=30,
                        help="untimed pause between chunks so the collector drains its ring")
    parser.add_argument("--timeout-s", type=int, default=300, help="limit per benchmark process")
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS),
                        help="run only these sections (default: all with --long, else the headline ones)")
    args = parser.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)  # NVTX wants a loadable path
    args.quick = not args.long
    if args.pairs is None:
        args.pairs = QUICK_PAIRS if args.quick else 2 * 1024 * 1024
    sections = args.section or (list(SECTIONS) if args.long else QUICK_SECTIONS)
    # What the bench's programs leave on disk at exit (an aggregator gone
    # first) goes to a directory of the bench's own, removed at the end.
    spool_root = tempfile.mkdtemp(prefix="rlscope_bench_spool_")
    os.environ["RLSCOPE_SPOOL_DIR"] = spool_root
    t0 = time.monotonic()
    failed, walls = [], []
    for name in sections:
        runs = args.runs
        if runs is None:
            runs = 1 if (args.quick and name == "demo") else 3  # the demo: a Ray cluster per run
        started = time.monotonic()
        try:
            SECTIONS[name](argparse.Namespace(**{**vars(args), "runs": runs}))
        except Exception as e:  # noqa: BLE001 - one section's failure must not hide the others' tables
            failed.append(name)
            print_table(f"Section {name}: FAILED", ["section", "error"], [[name, f"{type(e).__name__}: {e}"]])
        walls.append(f"{name} {time.monotonic() - started:.0f} s")
    print(f"(bench: {', '.join(walls)}; {time.monotonic() - t0:.0f} s in all"
          + ("; `make bench-long` runs every section at full size)" if args.quick else ")"))
    shutil.rmtree(spool_root, ignore_errors=True)
    if failed:  # ours, not a peer's (peers that fail are rows of their sections)
        sys.exit(f"bench: sections failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()

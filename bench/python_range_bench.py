#!/usr/bin/env python3
"""One process of the `python` bench section: the cost of one Python range
around a small function, for one annotation API, under whatever NVTX tool and
rlscope environment the parent set.

    python_range_bench.py MODE [--ranges N] [--rounds R]

MODE: rlscope_range (`with rlscope_ray.range(...)`), python_cm (`with
NullRange(...)`: a plain Python class with __enter__/__exit__ doing nothing,
what a user writes), null_context (`with null_context.range(...)`, a C-level
context manager written the usual way: bench/null_context.c, found in
$RLSCOPE_BENCH_MODULES), rlscope_mark
(`rlscope_ray.mark(...)` beside the call), nvtx_annotate (`with
nvtx.annotate(...)`), nvtx_push_pop (`nvtx.push_range` / `nvtx.pop_range`),
torch_record_function (`with torch.profiler.record_function(...)` inside
`torch.profiler.profile(activities=[CPU])`).

Each round times N bare calls and N annotated calls back to back; the cost of
a range is the annotated loop's time less the bare loop's, per call. Prints
one JSON line: the median and min over the rounds, and the collector's counts
(events, dropped) when one runs.
"""
import argparse
import ctypes
import os
import json
import statistics
import sys
import time


def small():
    return None


def bare_loop(n):
    f = small
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f()
    return time.perf_counter_ns() - t0


def with_loop(cm):
    """The loop timing n calls of small() each inside `with cm("bench.range")`
    (cm and small bound to locals: the loop's own cost is the bare one's)."""

    def loop(n):
        f, rng = small, cm
        t0 = time.perf_counter_ns()
        for _ in range(n):
            with rng("bench.range"):
                f()
        return time.perf_counter_ns() - t0

    return loop


def make_loop(mode):
    """The annotated loop of MODE, and a context to run it in."""
    import contextlib

    if mode == "rlscope_range":
        import rlscope_ray

        return with_loop(rlscope_ray.range), contextlib.nullcontext()
    if mode == "python_cm":  # what a user writes: a class doing nothing
        class NullRange:
            __slots__ = ("name",)

            def __init__(self, name):
                self.name = name

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

        return with_loop(NullRange), contextlib.nullcontext()
    if mode == "null_context":  # bench/null_context.c, from RLSCOPE_BENCH_MODULES
        sys.path.insert(0, os.environ["RLSCOPE_BENCH_MODULES"])
        import null_context

        return with_loop(null_context.range), contextlib.nullcontext()
    if mode == "rlscope_mark":
        import rlscope_ray

        def loop(n):
            f, mark = small, rlscope_ray.mark
            t0 = time.perf_counter_ns()
            for _ in range(n):
                mark("bench.mark")
                f()
            return time.perf_counter_ns() - t0

        return loop, contextlib.nullcontext()
    if mode == "nvtx_annotate":
        import nvtx

        return with_loop(nvtx.annotate), contextlib.nullcontext()
    if mode == "nvtx_push_pop":
        import nvtx

        def loop(n):
            f, push, pop = small, nvtx.push_range, nvtx.pop_range
            t0 = time.perf_counter_ns()
            for _ in range(n):
                push("bench.range")
                f()
                pop()
            return time.perf_counter_ns() - t0

        return loop, contextlib.nullcontext()
    if mode == "torch_record_function":
        import torch

        profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        return with_loop(torch.profiler.record_function), profile
    raise SystemExit(f"unknown mode {mode!r}")


class _Stats(ctypes.Structure):  # rlscope_stats_t (collector/rlscope_collector.h)
    _fields_ = [(name, ctypes.c_uint64) for name in ("events", "dropped", "batches_sent", "batches_dropped",
                                                      "threads")]


def collector_counts():
    """(events, dropped) of this process's rlscope collector, whichever way it
    was loaded (rlscope_ray or NVTX injection); (None, None) without one."""
    path = os.environ.get("NVTX_INJECTION64_PATH", "")
    if not os.environ.get("RLSCOPE_AGGREGATOR") or "rlscope_collector" not in path:
        return None, None
    lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL) if os.path.exists(path) else None
    if lib is None or not lib.rlscope_collector_running():
        return None, None
    s = _Stats()
    lib.rlscope_collector_stats(ctypes.byref(s))
    return s.events, s.dropped


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("--ranges", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    loop, context = make_loop(args.mode)
    per_range = []
    with context:
        loop(min(args.ranges, 10_000))  # warm-up: first-call paths, name interning
        bare_loop(min(args.ranges, 10_000))
        for _ in range(args.rounds):
            bare = bare_loop(args.ranges)
            annotated = loop(args.ranges)
            per_range.append((annotated - bare) / args.ranges)
    out = {"mode": args.mode, "ns_per_range_median": statistics.median(per_range),
           "ns_per_range_min": min(per_range), "ranges": args.ranges, "rounds": args.rounds,
           "events": None, "dropped": None}
    out["events"], out["dropped"] = collector_counts()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

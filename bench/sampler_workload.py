#!/usr/bin/env python3
"""One process of the `sampler` bench section: a fixed amount of work (a pure
Python loop and a native loop, in turn) inside one captured range, under
whatever collector environment the parent set (capture_range: api). Prints one
JSON line: the work's thread CPU time and wall time, and the sampler's counts
and its handler's own time per sample, measured in place.
--faulthandler-after: Python's faulthandler enabled once sampling runs, so that
its SIGSEGV handler comes before the sampler's fault guard and the frame
reads go through the kernel (collector/safe_read.h). --no-frames: the Python
frame reader unregistered (a sample is its instruction address alone)."""
import argparse
import ctypes
import faulthandler
import json
import time

import rlscope_ray


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--python-iterations", type=int, default=200000)
    ap.add_argument("--native-iterations", type=int, default=20000000)
    ap.add_argument("--faulthandler-after", action="store_true")
    ap.add_argument("--no-frames", action="store_true")
    args = ap.parse_args()
    if args.no_frames:
        rlscope_ray._native.stop_python_frames()
    spin = ctypes.CDLL(args.lib).rlscope_test_spin
    spin.restype = ctypes.c_ulong
    spin.argtypes = [ctypes.c_ulong]
    rlscope_ray.start()
    with rlscope_ray.range("work"):
        if args.faulthandler_after:
            deadline = time.monotonic() + 60  # until the sampler (and its guard) is set up; a hang guard
            while rlscope_ray._native.running() and rlscope_ray.stats()["cpu_timers"] < 1:
                assert time.monotonic() < deadline, rlscope_ray.stats()
                time.sleep(0.001)
            faulthandler.enable()
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        x = 1
        for _ in range(args.rounds):
            for _ in range(args.python_iterations):
                x = (x * 69069 + 1) & 0x7FFFFFFF
            spin(args.native_iterations)
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
    rlscope_ray.stop()
    rlscope_ray.flush()
    s = rlscope_ray.stats()
    print(json.dumps({"cpu_ms": (c1 - c0) / 1e6, "wall_ms": (w1 - w0) / 1e6, "samples": s.get("cpu_samples", 0),
                      "signals": s.get("cpu_signals", 0),
                      "sample_cost_ns": rlscope_ray._native.cost("cpu_sample"),
                      "handler_ns": s.get("cpu_handler_ns", -1), "kernel_reads": s.get("cpu_kernel_reads", 0),
                      "frames_unread": s.get("cpu_frames_unread", 0)}))


if __name__ == "__main__":
    main()

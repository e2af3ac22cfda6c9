#!/usr/bin/env python3
"""One process of the `sampler` bench section: a fixed amount of work (a pure
Python loop and a native loop, in turn) inside one captured range, under
whatever collector environment the parent set (capture_range: api). Prints one
JSON line: the work's thread CPU time and wall time, and the sampler's counts."""
import argparse
import ctypes
import json
import time

import rlscope_ray


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--python-iterations", type=int, default=200000)
    ap.add_argument("--native-iterations", type=int, default=20000000)
    args = ap.parse_args()
    spin = ctypes.CDLL(args.lib).rlscope_test_spin
    spin.restype = ctypes.c_ulong
    spin.argtypes = [ctypes.c_ulong]
    rlscope_ray.start()
    with rlscope_ray.range("work"):
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
                      "sample_cost_ns": rlscope_ray._native.cost("cpu_sample")}))


if __name__ == "__main__":
    main()

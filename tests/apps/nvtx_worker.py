"""A worker instrumented only with the `nvtx` package, as verl's workers are.

Knows nothing of rlscope. Runs iterations for --duration seconds and writes a
JSON report of each range it opened: name, thread, begin (CLOCK_MONOTONIC ns,
the collector's clock) and the duration it measured itself.
"""
import argparse
import json
import threading
import time

import nvtx


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--report", required=True)
    ap.add_argument("--ready", help="file to create once the first range is recorded")
    args = ap.parse_args()

    ranges = []

    def record(name, thread, t0, t1):
        ranges.append({"name": name, "thread": thread, "begin_ns": t0, "us": (t1 - t0) / 1e3})

    deadline = time.monotonic() + args.duration
    i = 0
    while time.monotonic() < deadline:
        t0 = time.monotonic_ns()
        nvtx.push_range("py_iter", payload=i)
        a0 = time.monotonic_ns()
        with nvtx.annotate("py_annotated", domain="py_domain", category="compute"):
            spin(0.004)
        record("py_annotated", "main", a0, time.monotonic_ns())
        nvtx.mark("py_mark")
        r0 = time.monotonic_ns()
        rng = nvtx.start_range("py_async")

        def finish():
            spin(0.002)
            nvtx.end_range(rng)
            record("py_async", "ender", r0, time.monotonic_ns())

        t = threading.Thread(target=finish, name="ender")
        t.start()
        t.join()
        spin(0.002)
        nvtx.pop_range()
        record("py_iter", "main", t0, time.monotonic_ns())
        if i == 0 and args.ready:
            open(args.ready, "w").close()
        i += 1
        time.sleep(0.001)
    with open(args.report, "w") as f:
        json.dump({"ranges": ranges, "iterations": i}, f)


if __name__ == "__main__":
    main()

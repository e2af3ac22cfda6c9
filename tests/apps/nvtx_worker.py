"""A worker instrumented only with the `nvtx` package, as verl's workers are.

Knows nothing of rlscope. Runs iterations until --stop-file exists (or for
--duration seconds, whichever comes first) and writes a JSON report of each
range it opened: name, thread, and its begin and end bracketed by the
program's own CLOCK_MONOTONIC readings (the collector's clock) just before
and just after the NVTX call: the recorded begin lies in [begin_ns,
begin_hi_ns], the end in [end_lo_ns, end_ns], however long a preemption
between the reading and the call; `us` is end_ns - begin_ns.
"""
import argparse
import json
import os
import threading
import time

import nvtx


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=1.0, help="at most this long (s)")
    ap.add_argument("--stop-file", help="stop once this file exists")
    ap.add_argument("--armed-file", help="create this file once the collector records (rlscope_ray's "
                                         "armed flag; the only use of rlscope_ray here)")
    ap.add_argument("--report", required=True)
    ap.add_argument("--ready", help="file to create once the first range is recorded")
    args = ap.parse_args()

    ranges = []

    def record(name, thread, b0, b1, e0, e1):
        ranges.append({"name": name, "thread": thread, "begin_ns": b0, "begin_hi_ns": b1, "end_lo_ns": e0,
                       "end_ns": e1, "us": (e1 - b0) / 1e3})

    now = time.monotonic_ns
    armed = None
    if args.armed_file:
        from rlscope_ray import _native

        armed = _native.armed
    deadline = time.monotonic() + args.duration
    i = 0
    while time.monotonic() < deadline and not (args.stop_file and os.path.exists(args.stop_file)):
        if armed is not None and armed():
            open(args.armed_file, "w").close()
            armed = None
        t0 = now()
        nvtx.push_range("py_iter", payload=i)
        t1 = now()
        a0 = now()
        with nvtx.annotate("py_annotated", domain="py_domain", category="compute"):
            a1 = now()
            spin(0.004)
            a2 = now()
        record("py_annotated", "main", a0, a1, a2, now())
        nvtx.mark("py_mark")
        r0 = now()
        rng = nvtx.start_range("py_async")
        r1 = now()

        def finish():
            spin(0.002)
            e0 = now()
            nvtx.end_range(rng)
            record("py_async", "ender", r0, r1, e0, now())

        t = threading.Thread(target=finish, name="ender")
        t.start()
        t.join()
        spin(0.002)
        p0 = now()
        nvtx.pop_range()
        record("py_iter", "main", t0, t1, p0, now())
        if i == 0 and args.ready:
            open(args.ready, "w").close()
        i += 1
        time.sleep(0.001)
    with open(args.report, "w") as f:
        json.dump({"ranges": ranges, "iterations": i}, f)


if __name__ == "__main__":
    main()

"""A dense-annotation workload with a known uninstrumented step time.

    python dense_steps.py --steps N --ranges R [--style push|annotate|start|nested|torch] [--report FILE]
                          [--untooled-steps 3,8,...]

Each step (rlscope_ray.step, the controller convention) runs R iterations
of a small pure-Python function, each inside an `nvtx` push/pop range, the
way verl-style code annotates with the `nvtx` package (--style annotate: the
`nvtx.annotate` context manager with a color, whose caller-side cost is not
the push/pop pair start-up calibration times; --style start: start_range
and end_range, as verl's marked_timer opens its ranges; --style nested: R/4 times an
`nvtx.annotate` holding a `rlscope_ray.range` holding two push/pop ranges,
the three APIs nested as real code mixes them; --style torch: R float32
matmuls of 192x192 on torch's intra-op threads, each in an `nvtx.annotate`).
--untooled-steps: those steps run inside rlscope_ray.nvtx_fast.untooled(),
the same code as it runs with no tool attached (make bench, section
accuracy: the in-run reference; bench only). The program times its
own steps (perf_counter) and writes them to --report as JSON. Run it once
without the collector (the uninstrumented time) and once under it: overhead
correction should bring the profile's step time back to the former.
Under test costs (RLSCOPE_TEST_COSTS, collector/test_clock.h) the report
also holds, per step, the test clock just after the step began and just
after it ended (`test_clock_ns`): what the profiler's virtual costs added.
"""
import argparse
import contextlib
import json
import time

import nvtx
import rlscope_ray
from rlscope_ray import _native, nvtx_fast


def work(x: int) -> int:
    for _ in range(3):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def one_step(s: int, args: argparse.Namespace, x: int, mats, sleep_ms: float = 0.0,  # type: ignore[no-untyped-def]
             spin: bool = False, extra_ranges: int = 0, then_sleep_ms: float = 0.0):
    """Step `s`: its ranges around the work, in --style, `extra_ranges` more
    push/pop pairs, and `sleep_ms` asleep (or that much of this thread's CPU
    time spinning, then `then_sleep_ms` asleep); (x, the test clock just
    after the step began)."""
    with rlscope_ray.step(s):
        g0 = _native.test_clock_ns()
        for _ in range(extra_ranges):
            nvtx.push_range("op")
            nvtx.pop_range()
        if sleep_ms and spin:
            until = time.thread_time() + sleep_ms / 1e3
            while time.thread_time() < until:
                x = work(x)
            time.sleep(then_sleep_ms / 1e3)
        elif sleep_ms:
            time.sleep(sleep_ms / 1e3)
        if args.style == "push":
            for _ in range(args.ranges):
                nvtx.push_range("op")
                x = work(x)
                nvtx.pop_range()
        elif args.style == "start":
            for _ in range(args.ranges):
                rng = nvtx.start_range("op")
                x = work(x)
                nvtx.end_range(rng)
        elif args.style == "annotate":
            for _ in range(args.ranges):
                with nvtx.annotate("op", color="green"):
                    x = work(x)
        elif args.style == "torch":
            a, b = mats
            for _ in range(args.ranges):
                with nvtx.annotate("mm", color="green"):
                    a @ b
        else:
            for _ in range(args.ranges // 4):
                with nvtx.annotate("outer", color="green"):
                    with rlscope_ray.range("mid"):
                        nvtx.push_range("op")
                        x = work(x)
                        nvtx.pop_range()
                        nvtx.push_range("op2")
                        x = work(x)
                        nvtx.pop_range()
    return x, g0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ranges", type=int, default=100000)
    ap.add_argument("--style", choices=("push", "annotate", "start", "nested", "torch"), default="push")
    ap.add_argument("--report")
    ap.add_argument("--untooled-steps", default="", help="comma-separated steps run untooled (bench only)")
    ap.add_argument("--sleep-step", type=int, default=0, help="this step also sleeps --sleep-ms (made slow)")
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--spin", action="store_true",
                    help="--sleep-step spins --sleep-ms of this thread's CPU time instead of sleeping")
    ap.add_argument("--extra-ranges", type=int, default=0, help="--sleep-step records this many more push/pop pairs")
    ap.add_argument("--then-sleep-ms", type=float, default=0.0, help="--spin's step then sleeps this long")
    args = ap.parse_args()
    untooled = {int(v) for v in args.untooled_steps.split(",") if v.strip()}
    x, mats = 1, None
    if args.style == "torch":
        import torch

        mats = torch.randn(192, 192), torch.randn(192, 192)
        for _ in range(20):  # torch's pool started and warm before any step
            mats[0] @ mats[1]
    steps_ms, clock = [], []
    for s in range(1, args.steps + 1):
        with nvtx_fast.untooled() if s in untooled else contextlib.nullcontext():
            t0 = time.perf_counter()
            slow = s == args.sleep_step
            x, g0 = one_step(s, args, x, mats, args.sleep_ms if slow else 0.0, args.spin,
                             args.extra_ranges if slow else 0, args.then_sleep_ms)
            clock.append([g0, _native.test_clock_ns()])
            steps_ms.append((time.perf_counter() - t0) * 1e3)
    if args.report:
        with open(args.report, "w") as f:
            # stats: the collector's counters just before exit (rlscope_ray.stats).
            json.dump({"steps_ms": steps_ms, "x": x, "test_clock_ns": clock, "stats": rlscope_ray.stats()}, f)
    print(json.dumps(steps_ms))


if __name__ == "__main__":
    main()

"""A program whose step times are fixed, for testing `rlscope-ray calibrate`
exactly, at any load.

    python fixed_steps.py [--steps 4]

It reports its steps itself to RLSCOPE_STEP_TIMES (as rlscope_ray.step
would): 20 ms each when it runs uninstrumented, 28 ms when it runs under the
profiler (RLSCOPE_AGGREGATOR set). Under the profiler it also gives its
collector test costs (collector/test_clock.h) before starting it, and
records 400 ranges per step at 10 us each: the aggregator removes exactly
4 ms per step at correction.scale 1. So calibrate must find inflation 40 %,
corrected error +20 % at scale 1, and scale 2. (Each range is preceded by
a 20 us sleep and each step sleeps 10 ms, so that a correction at scale 2
never charges an event more than the time since its thread's previous one,
which the aggregator would cap, nor removes more than the step lasted.)
"""
import argparse
import os
import time

PLAIN_NS, PROFILED_NS = 20_000_000, 28_000_000
RANGES, PUSH_COST_NS = 400, 10_000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    times = os.environ.pop("RLSCOPE_STEP_TIMES", None)  # reported here, not by rlscope_ray.step
    profiled = bool(os.environ.get("RLSCOPE_AGGREGATOR"))
    if profiled:
        os.environ["RLSCOPE_TEST_COSTS"] = f"push={PUSH_COST_NS},pop=0"
    import rlscope_ray  # starts the collector, with the test costs

    for n in range(1, args.steps + 1):
        with rlscope_ray.step(n):
            for _ in range(RANGES):
                time.sleep(0.00002)
                with rlscope_ray.range("op"):
                    pass
            time.sleep(0.01)
        if times:
            with open(times, "a", encoding="ascii") as f:
                f.write(f"{n} {PROFILED_NS if profiled else PLAIN_NS}\n")


if __name__ == "__main__":
    main()

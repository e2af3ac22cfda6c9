"""A Ray controller that waits on an actor carrying dense annotations, as
verl's trainer waits on its workers.

    python ray_wait_app.py --steps N --ranges R [--report FILE]

Each step (rlscope_ray.step) calls the actor's `generate` inside a range
"gen" and waits for it (ray.get); `generate` runs R iterations of a small
Python function, each in an `nvtx` push/pop range. With RLSCOPE_AGGREGATOR
in the environment (as `rlscope-ray calibrate` and the tests set it) the
driver joins that aggregator through rlscope_ray.init(aggregator=...),
with the config in RLSCOPE_CONFIG (JSON), and the actor is profiled as
rank 0; without it, this is plain Ray. The driver times its own steps and
writes them to --report as JSON, with the test clock around each step
under test costs (as tests/apps/dense_steps.py). --pad-ms N: the driver
sleeps N ms inside "gen" before the call and after its result (keeps the
actor's work well inside the window whatever the clocks' alignment error).
--untooled-steps: those steps run untooled in the driver and the actor
(rlscope_ray.nvtx_fast.untooled(); make bench, section accuracy).
"""
import argparse
import contextlib
import json
import os
import time

import nvtx
import ray

import rlscope_ray
from rlscope_ray import _native, nvtx_fast


@ray.remote(num_cpus=0)
class Generator:
    def generate(self, ranges: int, untooled: bool = False) -> int:
        x = 1
        with nvtx_fast.untooled() if untooled else contextlib.nullcontext():
            for _ in range(ranges):
                nvtx.push_range("op")
                for _ in range(3):
                    x = (x * 1103515245 + 12345) & 0xFFFFFFFF
                nvtx.pop_range()
        return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ranges", type=int, default=50000)
    ap.add_argument("--report")
    ap.add_argument("--pad-ms", type=float, default=0.0)
    ap.add_argument("--untooled-steps", default="", help="comma-separated steps run untooled (bench only)")
    args = ap.parse_args()
    untooled = {int(v) for v in args.untooled_steps.split(",") if v.strip()}
    profiled = "RLSCOPE_AGGREGATOR" in os.environ
    ray_args = dict(num_cpus=1, include_dashboard=False, log_to_driver=False)
    if profiled:
        rlscope_ray.init(json.loads(os.environ.get("RLSCOPE_CONFIG") or "{}"),
                         aggregator=os.environ["RLSCOPE_AGGREGATOR"], **ray_args)
        actor = Generator.options(runtime_env={"rlscope": {"rank": 0}}).remote()
    else:
        ray.init(**ray_args)
        actor = Generator.remote()
    ray.get(actor.generate.remote(10))  # the actor is up (and calibrated, when profiled)
    steps_ms, clock = [], []
    for s in range(1, args.steps + 1):
        with nvtx_fast.untooled() if s in untooled else contextlib.nullcontext():
            t0 = time.perf_counter()
            with rlscope_ray.step(s):
                g0 = _native.test_clock_ns()
                with rlscope_ray.range("gen"):
                    time.sleep(args.pad_ms / 1e3)
                    ray.get(actor.generate.remote(args.ranges, s in untooled))
                    time.sleep(args.pad_ms / 1e3)
            clock.append([g0, _native.test_clock_ns()])
            steps_ms.append((time.perf_counter() - t0) * 1e3)
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"steps_ms": steps_ms, "test_clock_ns": clock}, f)
    print(json.dumps(steps_ms))
    if profiled:
        rlscope_ray.shutdown()
    else:
        ray.shutdown()


if __name__ == "__main__":
    main()

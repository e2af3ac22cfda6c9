"""A controller that waits on a child process over pipes, the child
carrying dense annotations and inheriting the controller's environment (so
it claims RLSCOPE_ROLE=controller too, as a child of a profiled driver does).

    python wait_pair.py --steps N --ranges R [--report FILE] [--profile-child] [--link]

This process is the controller: it starts the worker (this file, --worker)
over pipes, and each step (rlscope_ray.step) sends it "go" inside a range
"gen" and waits for its reply; then runs a short "adv" of its own. The
worker answers each "go" with R iterations of a small Python function, each
in an `nvtx` push/pop range, inside a range "generate". The controller
times its own steps and writes them to --report as JSON, with the test
clock around each step under test costs (as tests/apps/dense_steps.py).
The child inherits this process's claim on the profiler's environment: it is
profiled as this process's child (a worker) unless the config says
`children: none`; --profile-child clears the claim (RLSCOPE_OWNER_PID=) so
that it is profiled as a process of its own, still saying
RLSCOPE_ROLE=controller. --link links the wait to the
work by a key (the child's "generate" is rlscope_ray.range(..., link=key),
the controller says rlscope_ray.waited(key) once the reply is in), and the
controller also says it waited for a key nothing carries ("nobody").
"""
import argparse
import json
import os
import subprocess
import sys
import time

import nvtx
import rlscope_ray
from rlscope_ray import _native


def work(x: int) -> int:
    for _ in range(3):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def worker(ranges: int) -> None:
    x = 1
    print("ready", flush=True)  # imported (and calibrated, when profiled)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "go":
            break
        with rlscope_ray.range("generate", link=words[1] if len(words) > 1 else None):
            for _ in range(ranges):
                nvtx.push_range("op")
                x = work(x)
                nvtx.pop_range()
        print(f"done {x}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ranges", type=int, default=50000)
    ap.add_argument("--report")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--profile-child", action="store_true")
    ap.add_argument("--link", action="store_true")
    args = ap.parse_args()
    if args.worker:
        worker(args.ranges)
        return
    env = dict(os.environ, RLSCOPE_OWNER_PID="") if args.profile_child else None
    child = subprocess.Popen([sys.executable, __file__, "--worker", "--ranges", str(args.ranges)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "ready"
    steps_ms, clock = [], []
    x = 1
    for s in range(1, args.steps + 1):
        t0 = time.perf_counter()
        with rlscope_ray.step(s):
            g0 = _native.test_clock_ns()
            with rlscope_ray.range("gen"):
                key = f"batch-{s}"
                child.stdin.write(f"go {key}\n" if args.link else "go\n")
                child.stdin.flush()
                reply = child.stdout.readline()
                assert reply.startswith("done"), reply
                if args.link:
                    rlscope_ray.waited(key)
                    rlscope_ray.waited("nobody")
            with rlscope_ray.range("adv"):
                for _ in range(2000):
                    x = work(x)
        clock.append([g0, _native.test_clock_ns()])
        steps_ms.append((time.perf_counter() - t0) * 1e3)
    child.stdin.close()
    child.wait(timeout=30)
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"steps_ms": steps_ms, "test_clock_ns": clock}, f)
    print(json.dumps(steps_ms))


if __name__ == "__main__":
    main()

"""A small Ray job profiled through rlscope_ray.init(), as a user writes it.

Exercises: plugin registration by init() on a local cluster, per-instance
.options(runtime_env={"rlscope": {...}}) with different ranks, a job-level
"rlscope" value inherited by an actor without its own, opt-out, bad values
(reported at actor creation), a CPU-only actor (method spans only), NVTX
ranges inside an actor, and 200 short steps that create no actor. Writes a JSON report of what it did for the test.
"""
import json
import os
import sys
import time

import nvtx
import ray

import rlscope_ray

out, report = sys.argv[1], sys.argv[2]
session = rlscope_ray.init(config={"steps": [1, 2], "flush": {"step_grace_ms": 10000}}, output_dir=out,
                           runtime_env={"rlscope": {"role": "worker"}},
                           num_cpus=2, include_dashboard=False, log_to_driver=False)


@ray.remote(num_cpus=0)
class Learner:
    def update_actor(self, n):
        acc = 0.0
        for i in range(n):  # CPU-only, no NVTX: visible through its method span
            acc += i * 0.5
        return acc

    def pid(self):
        import os
        return os.getpid()


@ray.remote(num_cpus=0)
class Rollout:
    def gen(self, n):
        with nvtx.annotate("sample_tokens", domain="rollout"):
            time.sleep(0.005)
        return n

    def pid(self):
        import os
        return os.getpid()


learners = [Learner.options(runtime_env={"rlscope": {"rank": r}}).remote() for r in (0, 1)]
rollout = Rollout.remote()  # no runtime_env of its own: inherits the job's "rlscope"
opted_out = Learner.options(runtime_env={"rlscope": {"enabled": False}}).remote()
errors = {}
for key, value in {"steps": {"steps": "5-2"}, "rank": {"rank": -1}, "typo": {"stpes": [1]},
                   "type": ["not", "a", "dict"]}.items():
    bad = Learner.options(runtime_env={"rlscope": value}).remote()
    try:
        ray.get(bad.pid.remote(), timeout=120)
        errors[key] = None
    except Exception as e:  # RuntimeEnvSetupError (possibly wrapped in ActorDiedError)
        errors[key] = f"{type(e).__name__}: {e}"

pids = {"learner0": ray.get(learners[0].pid.remote()), "learner1": ray.get(learners[1].pid.remote()),
        "rollout": ray.get(rollout.pid.remote()), "opted_out": ray.get(opted_out.pid.remote())}
for step in (1, 2):
    with rlscope_ray.step(step):
        with nvtx.annotate("gen"):
            ray.get(rollout.gen.remote(step))
        with nvtx.annotate("update_actor"):
            ray.get([a.update_actor.remote(300000) for a in learners + [opted_out]])
# Steps after which no actor was created: the controller's reporter reads
# Ray's actor table once a second, not at each step's begin (looks counted).
from rlscope_ray import session as session_module  # noqa: E402

looks = []
read_table = session_module.profiled_actors


def counted_look():
    looks.append(time.monotonic())
    return read_table()


session_module.profiled_actors = counted_look
began = time.monotonic()
for step in range(3, 203):
    with rlscope_ray.step(step):
        time.sleep(0.002)
ended = time.monotonic()
quiet = {"steps": 200, "seconds": ended - began, "looks": sum(began <= t <= ended for t in looks),
         "actors_created": session_module._duties._actors_created}
nice = {"driver": os.getpriority(os.PRIO_PROCESS, 0),
        "aggregator": os.getpriority(os.PRIO_PROCESS, session.aggregator.pid)}
out_dir = rlscope_ray.shutdown()
with open(report, "w") as f:
    json.dump({"pids": pids, "errors": errors, "out": out_dir, "nice": nice, "quiet": quiet}, f)

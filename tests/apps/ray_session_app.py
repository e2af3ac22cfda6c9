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
# Steps after which no actor was created, none still starting: their begins
# leave the controller's reporter to its second (the wake-ups they give it
# counted: the reporter reads Ray's actor table at each).
from rlscope_ray import session as session_module  # noqa: E402

duties = session_module._duties
deadline = time.monotonic() + 60  # a hang guard: the reporter has looked since the last creation
while (duties._actors_looked != duties._actors_created or duties._starting_since is not None) and \
        time.monotonic() < deadline:
    time.sleep(0.05)
wakes = [0]
wake = duties._wake
set_wake = wake.set


def counted_set():
    wakes[0] += 1
    set_wake()


wake.set = counted_set
for step in range(3, 203):
    with rlscope_ray.step(step):
        time.sleep(0.002)
wake.set = set_wake
quiet = {"steps": 200, "step_wakes": wakes[0], "actors_created": session_module._duties._actors_created}
nice = {"driver": os.getpriority(os.PRIO_PROCESS, 0),
        "aggregator": os.getpriority(os.PRIO_PROCESS, session.aggregator.pid)}
out_dir = rlscope_ray.shutdown()
with open(report, "w") as f:
    json.dump({"pids": pids, "errors": errors, "out": out_dir, "nice": nice, "quiet": quiet}, f)

"""Time from session start to the first actor answering, with and without
rlscope. One measurement per process (Ray starts once per process).

    python bench/ray_startup_bench.py plain|plain-env|rlscope|rlscope-disabled

plain-env gives the actor a runtime_env of its own (env_vars), so like the
rlscope modes it gets a fresh worker process instead of a prestarted one.
prints {"mode", "init_s", "first_actor_s", "total_s"}.
"""
import json
import sys
import tempfile
import time

import ray

mode = sys.argv[1]
t0 = time.perf_counter()
if mode.startswith("plain"):
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
else:
    import rlscope_ray

    rlscope_ray.init(output_dir=tempfile.mkdtemp(prefix="rlscope_bench_"), num_cpus=1,
                     include_dashboard=False, log_to_driver=False)
t1 = time.perf_counter()


@ray.remote(num_cpus=0)
class Actor:
    def ping(self):
        return 1


runtime_env = {"plain": None, "plain-env": {"env_vars": {"BENCH": "1"}}, "rlscope": {"rlscope": {"rank": 0}},
               "rlscope-disabled": {"rlscope": {"enabled": False}}}[mode]
actor = Actor.options(runtime_env=runtime_env).remote()
ray.get(actor.ping.remote())
t2 = time.perf_counter()
print(json.dumps({"mode": mode, "init_s": t1 - t0, "first_actor_s": t2 - t1, "total_s": t2 - t0}))
if mode.startswith("plain"):
    ray.shutdown()
else:
    rlscope_ray.shutdown()

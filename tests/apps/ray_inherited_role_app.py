"""verl's shape, by hand: the driver is not profiled; a controller *actor*
(verl's TaskRunner) has runtime_env {"rlscope": {"role": "controller", ...}}
and creates two worker actors without a runtime_env of their own, which
inherit the TaskRunner's, role included. Each step (an nvtx start/end range
"step", as verl's marked_timer opens it) calls both workers.

    python ray_inherited_role_app.py ENDPOINT STEPS
"""
import json
import os
import sys
import time

import nvtx
import ray

from rlscope_ray.ray_plugin import PLUGIN_SPEC


@ray.remote(num_cpus=0)
class Worker:
    def work(self, n: int) -> int:
        x = 0
        for i in range(n):
            with nvtx.annotate("chunk"):
                x += i
        return os.getpid()

    def recording(self) -> bool:
        from rlscope_ray import _native
        return bool(_native.armed())


@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self, steps: int) -> dict:
        workers = [Worker.remote() for _ in range(2)]  # no runtime_env: the TaskRunner's is inherited
        pids = ray.get([w.work.remote(1) for w in workers])
        for step in range(1, steps + 1):
            r = nvtx.start_range("step")
            g = nvtx.start_range("update_actor")
            ray.get([w.work.remote(2000) for w in workers])
            nvtx.end_range(g)
            nvtx.end_range(r)
            # The window of step 2 opens as step 1 ends; step 2 is shorter
            # than its broadcast may take on a busy machine: it begins once
            # both workers record (what this app checks is the roles, not
            # how fast the broadcast travels; a late one is counted and said,
            # tests/test_capture.py).
            deadline = time.time() + 60
            while step == 1 and not all(ray.get([w.recording.remote() for w in workers])):
                assert time.time() < deadline, "the workers never armed"
                time.sleep(0.01)
        return {"task_runner": os.getpid(), "workers": pids}


def main() -> None:
    endpoint, steps = sys.argv[1], int(sys.argv[2])
    os.environ["RAY_RUNTIME_ENV_PLUGINS"] = json.dumps([PLUGIN_SPEC])  # a local cluster started here
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    runner = TaskRunner.options(runtime_env={"rlscope": {"role": "controller", "aggregator": endpoint,
                                                         "steps": [2]}}).remote()
    print(json.dumps(ray.get(runner.run.remote(steps))))
    ray.shutdown()


if __name__ == "__main__":
    main()

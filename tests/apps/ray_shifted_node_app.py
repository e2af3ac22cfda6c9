"""A Ray job across two nodes on one machine where the second node's raylet
(and so its workers) runs in a time namespace whose CLOCK_MONOTONIC is
shifted by +777 s from the host's. The controller calls each actor inside its
own range. The report holds this process's own namespace offset (the host's
clock minus ours is not 0 when the suite itself runs in a time namespace):
the shifted node's clock minus the driver's (and the aggregator's) is
777 s minus it."""
import json
import os
import subprocess
import sys
import time

import ray
from ray.cluster_utils import Cluster

import rlscope_ray
from rlscope_ray.ray_plugin import PLUGIN_SPEC

out, report = sys.argv[1], sys.argv[2]
os.environ["RAY_RUNTIME_ENV_PLUGINS"] = json.dumps([PLUGIN_SPEC])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1},
                                                        "include_dashboard": False})
ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
shifted = subprocess.Popen(["unshare", "--fork", "--time", "--monotonic", "777", ray_cli, "start",
                            "--address", cluster.address, "--num-cpus", "1", "--resources", '{"shifted": 1}',
                            "--block"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
try:
    rlscope_ray.init(config={"steps": [2], "flush": {"step_grace_ms": 10000}}, address=cluster.address,
                     output_dir=out, log_to_driver=False)
    deadline = time.time() + 60
    while len([n for n in ray.nodes() if n["Alive"]]) < 2:
        assert time.time() < deadline, "the shifted node never joined"
        time.sleep(0.5)

    @ray.remote(num_cpus=0)
    class Learner:
        def update_actor(self):
            return sum(i * i for i in range(100000))

        def recording(self):
            from rlscope_ray import _native
            return bool(_native.armed())

    learners = [Learner.options(resources={res: 0.01}, runtime_env={"rlscope": {"rank": r}}).remote()
                for r, res in enumerate(("head", "shifted"))]
    ray.get([a.update_actor.remote() for a in learners])
    time.sleep(1.5)  # clock probes: a burst at connect and one a second later
    for step in (1, 2, 3):
        with rlscope_ray.step(step):
            for r, a in enumerate(learners):
                with rlscope_ray.range(f"call_rank{r}"):
                    ray.get(a.update_actor.remote())
            # Step 1 is shorter than the window's broadcast may take on a busy
            # machine: step 2 begins once both learners record (what this app
            # checks is the clock, not how fast the broadcast travels).
            deadline = time.time() + 60
            while step == 1 and not all(ray.get([a.recording.remote() for a in learners])):
                assert time.time() < deadline, "the learners never armed"
                time.sleep(0.01)
    rlscope_ray.shutdown()
finally:
    ray.shutdown()
    os.killpg(shifted.pid, 15)
    shifted.wait(timeout=60)
    cluster.shutdown()
own_offset_ns = 0
try:  # "monotonic <s> <ns>": this process's time namespace, relative to the host
    with open("/proc/self/timens_offsets") as f:
        for line in f:
            name, sec, nsec = line.split()
            if name in ("monotonic", "1"):
                own_offset_ns = int(sec) * 1_000_000_000 + int(nsec)
except OSError:
    pass  # a kernel without time namespaces: the host's clock
with open(report, "w") as f:
    json.dump({"ok": True, "shift_ns": 777_000_000_000 - own_offset_ns}, f)

"""A Ray job across a 3-node cluster on one machine (ray.cluster_utils.Cluster):
the head and one node have the rlscope plugin registered, a third was started
without it. One profiled actor per node; the driver joins with address=."""
import json
import os
import sys

import ray
from ray.cluster_utils import Cluster

import rlscope_ray
from rlscope_ray.ray_plugin import PLUGIN_SPEC

out, report = sys.argv[1], sys.argv[2]
os.environ["RAY_RUNTIME_ENV_PLUGINS"] = json.dumps([PLUGIN_SPEC])  # inherited by the nodes' raylets
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1},
                                                        "include_dashboard": False})
with_plugin = cluster.add_node(num_cpus=1, resources={"with_plugin": 1})
without_plugin = cluster.add_node(num_cpus=1, resources={"without_plugin": 1},
                                  env_vars={"RAY_RUNTIME_ENV_PLUGINS": "[]"})
cluster.wait_for_nodes()
rlscope_ray.init(config={"steps": [1], "flush": {"step_grace_ms": 10000}}, address=cluster.address,
                 output_dir=out, log_to_driver=False)


@ray.remote(num_cpus=0)
class Worker:
    def work(self):
        return sum(i * i for i in range(200000))


workers = [Worker.options(resources={res: 0.01}, runtime_env={"rlscope": {"rank": rank}}).remote()
           for rank, res in enumerate(("head", "with_plugin", "without_plugin"))]
ray.get([w.work.remote() for w in workers])
with rlscope_ray.step(1):
    ray.get([w.work.remote() for w in workers])
rlscope_ray.shutdown()
nodes = {"head": cluster.head_node.node_id, "with_plugin": with_plugin.node_id,
         "without_plugin": without_plugin.node_id}
ray.shutdown()
cluster.shutdown()
with open(report, "w") as f:
    json.dump({"nodes": nodes}, f)

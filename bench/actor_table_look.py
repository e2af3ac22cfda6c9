"""What one look of the controller's reporter at Ray's actor table costs
(rlscope_ray.session: profiled_actors, then _actors_starting's three reads
by state), and what Ray's GCS spends answering it, on a local cluster with
ACTORS actors: GCS CPU (its process's, from /proc) and the caller's (the
whole process: Ray's own threads carry the RPCs), each less what it spends
in as long idle, and wall time, per look, over LOOKS looks (after 10). Prints
one JSON line. Run by bench/always_on_bench.py (section always_on).

  python bench/actor_table_look.py [--actors 4] [--looks 200]
"""
import argparse
import json
import os
import time


def process_cpu_s(pid):
    """A process's CPU time (s): its user and system clock ticks (10 ms each
    here: about 0.05 ms a look over 200 looks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gcs_pid():
    """This cluster's GCS (the one ray.init started here, not another's)."""
    import ray

    return ray._private.worker._global_node.all_processes["gcs_server"][0].process.pid


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--looks", type=int, default=200)
    args = parser.parse_args()
    import ray

    from rlscope_ray import session

    ray.init(num_cpus=args.actors, include_dashboard=False)
    try:
        @ray.remote(num_cpus=0.5)
        class Profiled:
            def ping(self):
                return 1

        # Not profiled (no collector): a look reads the whole table either
        # way, profiled or not.
        actors = [Profiled.options(runtime_env={"env_vars": {"RLSCOPE_BENCH": "1"}}).remote()
                  for _ in range(args.actors)]
        ray.get([a.ping.remote() for a in actors])
        time.sleep(1.0)

        gcs = gcs_pid()

        def measure(body, n):
            g0, c0, w0 = process_cpu_s(gcs), time.process_time(), time.monotonic()
            for _ in range(n):
                body()
            return (process_cpu_s(gcs) - g0) / n, (time.process_time() - c0) / n, (time.monotonic() - w0) / n

        def look():
            session.profiled_actors()
            session._actors_starting()

        for _ in range(10):  # warm: imports, the GCS connection
            look()
        # The GCS's and this process's own pace (Ray's threads), per 50 ms idle.
        idle_gcs, idle_caller, idle_wall = measure(lambda: time.sleep(0.05), 40)
        gcs_s, caller_s, wall_s = measure(look, args.looks)
        print(json.dumps({"actors": args.actors, "looks": args.looks,
                          "gcs_ms": 1000 * max(0.0, gcs_s - idle_gcs * wall_s / idle_wall),
                          "caller_ms": 1000 * max(0.0, caller_s - idle_caller * wall_s / idle_wall),
                          "wall_ms": 1000 * wall_s}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

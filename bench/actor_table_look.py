"""What one look of the controller's reporter at Ray's actor table costs
(rlscope_ray.session: profiled_actors, then _actors_starting's three reads
by state), and what Ray's GCS spends answering it, on a local cluster with
ACTORS actors: GCS CPU (its process's, from /proc, less what it
spends in as long idle), the caller's CPU (the whole process: Ray's own
threads carry the RPCs) and wall time, per look, over LOOKS looks. Prints
one JSON line. Run by bench/always_on_bench.py (section always_on).

  python bench/actor_table_look.py [--actors 4] [--looks 200]
"""
import argparse
import json
import os
import time


def gcs_cpu_s():
    """The GCS process's CPU time (s): its user and system clock ticks."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "gcs_server":
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    raise RuntimeError("no gcs_server process found")


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

        def measure(body, n):
            g0, c0, w0 = gcs_cpu_s(), time.process_time(), time.monotonic()
            for _ in range(n):
                body()
            return (gcs_cpu_s() - g0) / n, (time.process_time() - c0) / n, (time.monotonic() - w0) / n

        idle_gcs, _, idle_wall = measure(lambda: time.sleep(0.05), 40)  # the GCS's own pace, per 50 ms
        gcs, caller, wall = measure(lambda: (session.profiled_actors(), session._actors_starting()), args.looks)
        gcs_net = max(0.0, gcs - idle_gcs * wall / idle_wall)
        print(json.dumps({"actors": args.actors, "looks": args.looks, "gcs_ms": 1000 * gcs_net,
                          "caller_ms": 1000 * caller, "wall_ms": 1000 * wall}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

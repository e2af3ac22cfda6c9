#!/usr/bin/env python3
"""A cluster's worth of collectors on one host: N mostly idle worker processes
(scale_worker: a 50 us NVTX range every 5 ms) and one controller that runs
a few steps, all streaming to one aggregator. Used by tests/test_scale.py
(small N) and bench/scale_bench.py (large N).

    scale_run.py --build-dir B --out DIR --workers N [--steps 5] [--step-ms 200]

The controller tells the aggregator which worker processes to expect (by
pid, named worker-I), so a worker whose collector never registered is
reported missing by name. Prints one JSON line: what the aggregator wrote
(steps, processes registered, missing, events received and lost) and
the aggregator's peak RSS.
"""
import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time

CONTROLLER = r"""
import json, os, sys, time
import rlscope_ray
from rlscope_ray import _native
expected, steps, step_ms, work = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
_native.report_expected(expected)
for n in range(1, steps + 1):
    with rlscope_ray.step(n):
        with rlscope_ray.range("gen"):
            end = time.perf_counter() + step_ms / 1000
            while time.perf_counter() < end:
                pass
    time.sleep(0.05)
open(os.path.join(work, "steps_done"), "w").close()
deadline = time.monotonic() + 600  # a hang guard: the harness says when (its workers said goodbye)
while not os.path.exists(os.path.join(work, "may_exit")) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def wait_for(path, proc, timeout_s):
    """Until path exists (proc still running), or the timeout."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def vm_hwm_kb(pid):
    """A running process's peak resident set so far, KiB (0 once it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--step-ms", type=float, default=200)
    ap.add_argument("--grace-ms", type=int, default=10000)
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--relays", type=int, default=0,
                    help="relays between the workers and the root (worker i uses relay i mod R); the controller "
                         "connects to the root, as a driver on the root's node does")
    ap.add_argument("--kill-relays", action="store_true",
                    help="kill every relay (SIGKILL) once the first step is done and start it again on the same "
                         "endpoint: the collectors' spools must replay what it held")
    ap.add_argument("--netns-hosts", type=int, default=0,
                    help="run the workers (and relays) in this many network namespaces, each a host with its own "
                         "loopback that reaches the root only over a veth pair (host h: worker i with i mod H = h; "
                         "with --relays, one relay per host); needs root and iproute2")
    ap.add_argument("--ghosts", type=int, default=0, help="expected processes that never profile")
    ap.add_argument("--controller-config", default=None, help="RLSCOPE_CONFIG of the controller only")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rlscope_scale_")
    stop = os.path.join(work, "stop")
    base = {k: v for k, v in os.environ.items()  # (the spool root stays: the caller's)
            if not ((k.startswith("RLSCOPE_") and k != "RLSCOPE_SPOOL_DIR") or k in ("NVTX_INJECTION64_PATH", "RANK"))}
    if args.netns_hosts and args.relays and args.relays != args.netns_hosts:
        raise SystemExit("--netns-hosts H with --relays R: one relay per host, R must be H")
    hosts = NetnsHosts(args.netns_hosts) if args.netns_hosts else None
    try:
        run(args, work, stop, base, hosts)
    finally:
        if hosts is not None:
            hosts.remove()


class NetnsHosts:
    """H network namespaces, each a "host": its own loopback, and a veth pair
    to this namespace (10.201.h.1 here, 10.201.h.2 there)."""

    def __init__(self, n):
        self.names = []
        tag = os.getpid() % 100000
        try:
            for h in range(n):
                ns, veth = "rls%dh%d" % (tag, h), "rlv%dh%d" % (tag, h)
                self.names.append(ns)
                for cmd in (["ip", "netns", "add", ns],
                            ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
                            ["ip", "addr", "add", "10.201.%d.1/24" % h, "dev", veth],
                            ["ip", "link", "set", veth, "up"],
                            ["ip", "netns", "exec", ns, "ip", "addr", "add", "10.201.%d.2/24" % h, "dev", "eth0"],
                            ["ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up"],
                            ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]):
                    subprocess.run(cmd, check=True, capture_output=True, text=True)
        except Exception:
            self.remove()
            raise

    def prefix(self, h):
        return ["ip", "netns", "exec", self.names[h]]

    @staticmethod
    def root_address(h):
        return "10.201.%d.1" % h

    def remove(self):
        for ns in self.names:  # its end of the veth pair goes with it
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run(args, work, stop, base, hosts):
    import rlscope_ray
    from rlscope_ray.aggregator_process import start_aggregator

    worker_exe = os.path.join(args.build_dir, "tests", "apps", "scale_worker")
    t0 = time.monotonic()
    peak_rss_kb = [0]
    # With namespace hosts the root listens on every interface (the hosts
    # reach it over their veth pairs); the controller still uses loopback.
    listen = "tcp://0.0.0.0:*" if hosts else "tcp://127.0.0.1:*"
    secret = secrets.token_hex(16)  # as rlscope_ray.init makes one per run
    with start_aggregator(args.out, work_dir=work, args=["--grace-ms", str(args.grace_ms), "--exit-when-done"],
                          log=os.path.join(work, "aggregator.log"), listen=listen, secret=secret,
                          connect_host="127.0.0.1" if hosts else None) as agg:
        port = agg.endpoint.rsplit(":", 1)[1]

        def root_for(h):
            """The root's endpoint as host h reaches it."""
            return "tcp://%s:%s" % (hosts.root_address(h), port) if hosts else agg.endpoint

        # Its peak RSS (VmHWM), read until it exits.
        def watch_rss():
            while agg.proc.poll() is None:
                peak_rss_kb[0] = max(peak_rss_kb[0], vm_hwm_kb(agg.proc.pid))
                time.sleep(0.02)

        threading.Thread(target=watch_rss, daemon=True).start()
        env = dict(base, RLSCOPE_AGGREGATOR=agg.endpoint, RLSCOPE_SECRET=secret,
                   NVTX_INJECTION64_PATH=rlscope_ray.collector_path())
        def start_relay(r, listen):
            endpoint_file = os.path.join(work, "relay-%d.endpoint" % r)
            if os.path.exists(endpoint_file):
                os.unlink(endpoint_file)
            proc = subprocess.Popen((hosts.prefix(r) if hosts else [])
                                    + [rlscope_ray.aggregator_path(), "--relay-to", root_for(r), "--listen", listen,
                                       "--endpoint-file", endpoint_file],
                                    stdout=open(os.path.join(work, "relay-%d.log" % r), "a"), stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60  # a hang guard
            while not os.path.exists(endpoint_file) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if not os.path.exists(endpoint_file):
                with open(os.path.join(work, "relay-%d.log" % r)) as f:
                    raise SystemExit("relay %d did not start: %s" % (r, f.read()[-2000:]))
            with open(endpoint_file) as f:
                return proc, f.read().strip()

        relays = [start_relay(r, "tcp://127.0.0.1:*") for r in range(args.relays)]  # rlscope-ray-aggregator --relay-to
        workers = []
        for i in range(args.workers):
            report = os.path.join(work, "worker-%d.txt" % i)
            h = i % args.netns_hosts if hosts else 0
            workers.append(subprocess.Popen(
                (hosts.prefix(h) if hosts else [])
                + [worker_exe, "--stop-file", stop, "--report", report, "--max-s", str(args.timeout_s)],
                env=dict(env, RLSCOPE_ROLE="worker", RLSCOPE_RANK=str(i),
                         RLSCOPE_AGGREGATOR=relays[i % len(relays)][1] if relays else root_for(h)),
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(work, "worker-%d.err" % i), "w")))
        started_s = time.monotonic() - t0
        # Processes the controller expects that never profile (not_profiled, by name).
        ghosts = [subprocess.Popen(["sleep", str(args.timeout_s)]) for _ in range(args.ghosts)]
        expected = ([{"pid": str(w.pid), "name": "worker-%d" % i} for i, w in enumerate(workers)]
                    + [{"pid": str(g.pid), "name": "ghost-%d" % i} for i, g in enumerate(ghosts)])
        ctrl_env = dict(env, RLSCOPE_ROLE="controller")
        if args.controller_config:
            ctrl_env["RLSCOPE_CONFIG"] = args.controller_config
        ctrl = subprocess.Popen([sys.executable, "-c", CONTROLLER, json.dumps(expected), str(args.steps),
                                 str(args.step_ms), work], env=ctrl_env, stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(work, "controller.err"), "w"))
        # The workers stop once the steps are done and say goodbye (with what
        # they recorded) while the controller still runs; then it exits, and
        # the aggregator with it once every step is written.
        if args.kill_relays:
            wait_for(os.path.join(args.out, "step_1", "summary.json"), ctrl, args.timeout_s)
            for r, (proc, endpoint) in enumerate(relays):
                proc.kill()
                proc.wait()
                relays[r] = start_relay(r, endpoint)
        wait_for(os.path.join(work, "steps_done"), ctrl, args.timeout_s)
        open(stop, "w").close()
        worker_rc = [w.wait(timeout=args.timeout_s) for w in workers]
        for g in ghosts:
            g.kill()
            g.wait()
        open(os.path.join(work, "may_exit"), "w").close()
        ctrl_rc = ctrl.wait(timeout=args.timeout_s)
        # It exits by itself once the controller is done and every step is written.
        deadline = time.monotonic() + args.grace_ms / 1000 + 60
        while agg.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        exited_by_itself = agg.proc.poll() is not None  # else stopped below (SIGTERM): it writes what it has
        relay_logs = []
        for r, (proc, _) in enumerate(relays):
            proc.terminate()
            proc.wait(timeout=60)
            with open(os.path.join(work, "relay-%d.log" % r)) as f:
                relay_logs.append(f.read()[-500:])
    wall_s = time.monotonic() - t0
    run = {}
    run_path = os.path.join(args.out, "run.json")
    if os.path.exists(run_path):
        with open(run_path) as f:
            run = json.load(f)
    procs = run.get("processes", [])
    errors = ""
    with open(os.path.join(work, "aggregator.log")) as f:
        errors = f.read()[-2000:]
    print(json.dumps({
        "workers": args.workers,
        "controller_rc": ctrl_rc,
        "aggregator_exited_by_itself": exited_by_itself,
        "controller_stderr": open(os.path.join(work, "controller.err")).read()[-2000:],
        "workers_failed": sum(1 for rc in worker_rc if rc != 0),
        "workers_started_s": round(started_s, 2),
        "wall_s": round(wall_s, 2),
        "steps_written": run.get("steps_written", []),
        "processes_registered": len(procs),
        "relays": args.relays,
        "netns_hosts": args.netns_hosts,
        "via_relay": sum(1 for p in procs if p.get("via_relay")),
        "relay_logs": relay_logs,
        "controller_registered": any(p.get("role") == "controller" for p in procs),
        "not_profiled": run.get("not_profiled", []),
        "events_received": sum(p.get("events_received", 0) for p in procs),
        "events_dropped": sum(p.get("dropped", 0) for p in procs),
        # Workers that said goodbye whose events are not all received or counted dropped.
        "unaccounted": {p["label"]: p["events_recorded"] - p["events_received"] - p["dropped"] for p in procs
                        if p.get("events_recorded") is not None
                        and p["events_recorded"] != p["events_received"] + p["dropped"]},
        "said_bye": sum(1 for p in procs if p.get("said_bye")),
        "processes_lost": sum(1 for p in procs if p.get("lost")),
        "aggregator_peak_rss_mb": round(peak_rss_kb[0] / 1024, 1),
        "aggregator_log_tail": errors,
    }))


if __name__ == "__main__":
    main()

"""The faults section of run_bench.py: each fault injected into a real run of
a dense-annotation program, and where its events went.

For each fault, one run of tests/apps/dense_steps.py (the process that steps,
STEPS steps of RANGES `nvtx` push/pop ranges each, steps: all): events
emitted (what the program recorded: 2 per range, 2 per step), events in the
output (the step traces: 2 per slice), events the run reports lost
(run.json processes[].dropped, or the collector's own count when no
aggregator ever answered), events neither (must be 0), and the program's own
median step time beside the run without a fault (the host's loop time).
The faults at exit (the aggregator down when the program ends and started
again after; killed and started again just before its end; the node's relay
killed before its end) add what was recovered from the spool files the
program left on disk (run.json recovered.events: every record taken up, CPU
samples and the profiler's own included, so it can exceed what was emitted),
and the program's exit time: from its report's appearance (the end of its
main) to its exit.
Profiled runs take the production path (the real clock, start-up
calibration, costs measured in place, the fast lanes), as tests/test_drops.py
does: the calibration's own events are never shipped, so the count is
exact there too.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

STEPS = 100
RANGES = 20000
EMITTED = STEPS * (2 * RANGES + 2)
SECRET = "fault-bench-secret"  # as rlscope_ray.init makes one per run


def _app(args):
    return [sys.executable, os.path.join(args.root, "tests", "apps", "dense_steps.py"), "--steps", str(STEPS),
            "--ranges", str(RANGES)]


def _wait_for_line(log, text, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(log) and text in open(log).read():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def _count_output(out):
    """Events in the step traces (2 per slice of the controller), and steps written."""
    events, steps = 0, 0
    if not os.path.isdir(out):
        return 0, 0
    for d in os.listdir(out):
        path = os.path.join(out, d, "trace.json")
        if not d.startswith("step_") or not os.path.exists(path):
            continue
        steps += 1
        trace = json.load(open(path))["traceEvents"]
        events += 2 * sum(1 for e in trace if e.get("ph") == "X" and e.get("name") in ("op", "step"))
    return events, steps


EXIT_FAULTS = ("down at exit", "restart at exit", "relay killed at exit")


def _run_key():
    from rlscope_ray import _native

    return _native.run_key(SECRET)


def _recovered(out):
    try:
        return json.load(open(os.path.join(out, "run.json")))["recovered"]["events"]
    except (OSError, ValueError, KeyError):
        return 0


def _reported_lost(out):
    try:
        run = json.load(open(os.path.join(out, "run.json")))
    except (OSError, ValueError):
        return 0
    return sum(p["dropped"] for p in run["processes"])


def faults_section(args, clean_env, print_table):
    from rlscope_ray import collector_path
    from rlscope_ray.aggregator_process import start_aggregator

    agg_cmd = [os.path.join(args.build_dir, "aggregator", "rlscope-ray-aggregator")]
    spool_root = os.environ.get("RLSCOPE_SPOOL_DIR")  # each run sets its own; restored at the end
    rows = []
    baseline_ms = None

    def run(name, config="{}", fault=None, profiled=True):
        nonlocal baseline_ms
        work = tempfile.mkdtemp(prefix="rlscope_fault_bench_")
        out = os.path.join(work, "out")
        report = os.path.join(work, "report.json")
        env = clean_env()
        agg = None
        port = None
        if profiled:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            listen = f"tcp://127.0.0.1:{port}"
            # This run's spool root, for the program and every aggregator it meets (restored at the end).
            os.environ["RLSCOPE_SPOOL_DIR"] = os.path.join(work, "spool")
            if fault != "no aggregator":
                agg = start_aggregator(out, listen=listen, command=agg_cmd, args=["--exit-when-done"],
                                       log=os.path.join(work, "agg.log"), work_dir=work, config={"steps": "all"},
                                       secret=SECRET)
            env.update(RLSCOPE_AGGREGATOR=listen, RLSCOPE_ROLE="controller", NVTX_INJECTION64_PATH=collector_path(),
                       RLSCOPE_CONFIG=config, RLSCOPE_SECRET=SECRET,
                       RLSCOPE_SPOOL_DIR=os.environ["RLSCOPE_SPOOL_DIR"])
        relay = None
        if fault == "relay killed at exit":
            endpoint_file = os.path.join(work, "relay_endpoint")
            relay = subprocess.Popen(agg_cmd + ["--relay-to", listen, "--listen", "tcp://127.0.0.1:*",
                                                "--endpoint-file", endpoint_file], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while not os.path.exists(endpoint_file):
                time.sleep(0.02)
            env["RLSCOPE_AGGREGATOR"] = open(endpoint_file).read().strip()
        proc = subprocess.Popen(_app(args) + ["--report", report], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        note = ""
        if fault == "aggregator restart" and _wait_for_line(os.path.join(work, "agg.log"), "step 5 written", proc):
            agg.proc.send_signal(signal.SIGKILL)
            agg.proc.wait()
            time.sleep(0.5)
            agg = start_aggregator(out, listen=listen, command=agg_cmd, args=["--exit-when-done"],
                                   log=os.path.join(work, "agg2.log"), work_dir=work, config={"steps": "all"},
                                   secret=SECRET)
            note = "killed after step 5 was written, started again 0.5 s later"
        if fault == "stranger" and _wait_for_line(os.path.join(work, "agg.log"), "step 3 written", proc):
            victim = json.load(open(os.path.join(out, "run.json")))["resume"]["controller_session"]
            for _ in range(3):
                subprocess.run([os.path.join(args.build_dir, "tests", "apps", "stranger"), listen, victim,
                                os.path.join(work, "stranger.json")], check=True, timeout=60)
            note = "3 connections: hello as controller, goodbye and batch in the controller's name, garbage"
        # Down at exit: killed once step 10 is written; the rest of the run
        # ends while it is down. Restarted, or the relay killed, at exit: the
        # moment the program's main returns (its report appears), while the
        # aggregator still writes the steps it is behind on and the program's
        # exit drains what was not acknowledged.
        ended = None
        if fault == "down at exit" and _wait_for_line(os.path.join(work, "agg.log"), "step 10 written", proc):
            agg.proc.send_signal(signal.SIGKILL)
            agg.proc.wait()
            note = "killed once step 10 was written, started again after the program exited"
        elif fault in EXIT_FAULTS and fault != "down at exit":
            while proc.poll() is None and not os.path.exists(report):
                time.sleep(0.002)
            ended = time.monotonic()
            victim = relay if fault == "relay killed at exit" else agg.proc
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            if fault == "restart at exit":
                agg = start_aggregator(out, listen=listen, command=agg_cmd, args=["--exit-when-done"],
                                       log=os.path.join(work, "agg2.log"), work_dir=work, config={"steps": "all"},
                                       secret=SECRET)
            note = ("killed as the program's main returned" +
                    (", started again at once" if fault == "restart at exit" else ", not started again") +
                    ("" if proc.poll() is None else "; the program had exited already"))
        elif fault in EXIT_FAULTS:
            note = "NOT injected: the program ended before step 10 was written"
        while proc.poll() is None:  # the end of its main: its report appears
            if ended is None and os.path.exists(report):
                ended = time.monotonic()
            time.sleep(0.005)
        exit_ms = (time.monotonic() - ended) * 1000 if ended is not None else float("nan")
        _, stderr = proc.communicate(timeout=args.timeout_s)
        if fault == "down at exit" and "NOT" not in note:  # started again once the program is gone
            agg = start_aggregator(out, listen=listen, command=agg_cmd, args=["--exit-when-done"],
                                   log=os.path.join(work, "agg2.log"), work_dir=work, config={"steps": "all"},
                                   secret=SECRET)
        if agg is not None:
            agg.stop(timeout=60)
        if fault == "no aggregator":  # by hand, as a user would: rlscope-ray recover
            subprocess.run(agg_cmd + ["--recover", "--out", out, "--spool-dir",
                                      os.path.join(env["RLSCOPE_SPOOL_DIR"], _run_key())],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=args.timeout_s)
        rep = json.load(open(report))
        median = statistics.median(rep["steps_ms"])
        if fault is None and profiled:
            baseline_ms = median
        events_out, steps = _count_output(out)
        lost = _reported_lost(out)
        if fault == "no aggregator":
            # Nothing reached a run: the program left it all on disk at exit
            # (said on stderr), and `recover` wrote the run from it.
            note = ("left on disk at exit, said" if "left on this node's disk" in stderr else "NOT left on disk") + \
                ", then rlscope-ray recover" + \
                ("; said after 5 s of silence" if "no answer from the aggregator" in stderr else "")
        if fault == "stranger":
            r = json.load(open(os.path.join(out, "run.json")))
            note += f"; refused {r['refused_frames']} frames ({r['refused_hellos']} hellos)"
        if fault == "tiny rings":
            note = "buffers.per_thread_kb 4, max_mb 1, flush.interval_ms 200; " + (
                "said once on stderr" if stderr.count("dropping events") == 1 else "not said")
        if fault in EXIT_FAULTS:
            note += "; " + ("left on disk at exit, said" if "left on this node's disk" in stderr
                            else "delivered before exit")
        emitted = EMITTED if profiled else "-"
        unaccounted = EMITTED - events_out - lost if profiled else "-"
        rows.append([name, emitted, events_out if profiled else "-", _recovered(out) if profiled else "-",
                     lost if profiled else "-", unaccounted, f"{steps}/{STEPS}" if profiled else "-", f"{median:.1f}",
                     "-" if baseline_ms is None or not profiled else f"{median / baseline_ms:.2f}",
                     f"{exit_ms:.0f}", note])
        if relay is not None and relay.poll() is None:
            relay.kill()
            relay.wait()
        shutil.rmtree(work, ignore_errors=True)

    run("no profiler", profiled=False)
    run("no fault")
    run("tiny rings, 1 MB cap (drops)", '{"buffers": {"per_thread_kb": 4, "max_mb": 1}, "flush": {"interval_ms": 200}}',
        "tiny rings")
    run("aggregator killed and restarted", fault="aggregator restart")
    run("stranger on the port", fault="stranger")
    run("no aggregator at all", '{"flush": {"exit_timeout_ms": 0}}', fault="no aggregator")
    run("aggregator down at exit, started after", fault="down at exit")
    run("aggregator restarted just before exit", fault="restart at exit")
    run("relay killed before exit", fault="relay killed at exit")
    if spool_root is None:
        os.environ.pop("RLSCOPE_SPOOL_DIR", None)
    else:
        os.environ["RLSCOPE_SPOOL_DIR"] = spool_root
    print_table(f"Faults: dense_steps.py, {STEPS} steps of {RANGES} nvtx ranges (one run each)",
                ["fault", "events emitted", "in the output", "recovered from disk", "reported lost", "unaccounted",
                 "steps written", "median step ms", "vs no fault", "exit ms", "notes"], rows)

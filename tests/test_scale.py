"""Many collectors, one aggregator (small here; `make bench` runs hundreds):
every process registers or is reported missing by name, every event a
process recorded arrives or is counted dropped, the steps are written; and a
run that writes nothing says why, never silently."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT

WORKERS = 24


def _netns_missing() -> str:
    """Why network namespaces cannot be hosts here ("" when they can)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "network namespaces as hosts need root and iproute2 (ip)"
    name = "rlsprobe%d" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add is not permitted here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


NETNS = pytest.mark.skipif(bool(_netns_missing()), reason=_netns_missing() or "ok")


@pytest.mark.parametrize("relays,kill,hosts", [
    (0, False, 0), (3, False, 0), (3, True, 0),
    pytest.param(0, False, 3, marks=NETNS), pytest.param(3, False, 3, marks=NETNS)],
    ids=["direct", "through-relays", "relays-killed-and-restarted", "netns-hosts-direct", "netns-hosts-relays"])
def test_many_collectors_register_account_for_every_event_and_write_every_step(build_dir, tmp_path, relays, kill,
                                                                               hosts):
    """through relays: the workers reach the root through three relays
    (rlscope-ray-aggregator --relay-to), the controller straight; killed:
    every relay is killed (SIGKILL) once step 1 is written and started again
    on the same endpoint, and what it held is replayed from the spools.
    netns hosts: the workers run in three network namespaces, each a host
    with its own loopback that reaches the root over a veth pair only (with
    relays: one per host, on that host's loopback)."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/scale_run.py"), "--build-dir", str(build_dir),
                        "--out", str(out), "--workers", str(WORKERS), "--ghosts", "1", "--steps", "3",
                        "--step-ms", "100", "--timeout-s", "300", "--relays", str(relays),
                        "--netns-hosts", str(hosts)]
                       + (["--kill-relays"] if kill else []),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.splitlines()[-1])
    assert res["aggregator_exited_by_itself"], res["aggregator_log_tail"]
    assert res["controller_rc"] == 0 and res["workers_failed"] == 0, res
    assert res["steps_written"] == [1, 2, 3], res["aggregator_log_tail"]
    assert res["processes_registered"] == WORKERS + 1 and res["controller_registered"]
    # The one expected process that never profiled is named, with a reason.
    assert [p["name"] for p in res["not_profiled"]] == ["ghost-0"]
    assert "never connected" in res["not_profiled"][0]["reason"]
    # Every worker said goodbye with what it recorded: received + dropped.
    assert res["said_bye"] >= WORKERS and res["unaccounted"] == {}
    run = json.loads((out / "run.json").read_text())
    workers = [p for p in run["processes"] if p["role"] == "worker"]
    assert sorted(p["rank"] for p in workers) == list(range(WORKERS))
    assert all(p["via_relay"] == (relays > 0) for p in workers)
    if relays:  # each relay forwarded its share up and the root's answers down, and saw no collector go
        assert len(res["relay_logs"]) == relays
        assert all(log.count("listening on") == (2 if kill else 1) for log in res["relay_logs"]), res["relay_logs"]
    assert all(p["events_recorded"] is not None and p["events_recorded"] > 0 for p in workers)
    trace = json.loads((out / "step_2" / "trace.json").read_text())
    ranks_in_step = {e["pid"] for e in trace["traceEvents"] if e.get("name") == "work"}
    assert len(ranks_in_step) == WORKERS  # each worker's ranges cut into the step


def test_a_run_with_no_controller_says_why_it_wrote_nothing(build_dir, aggregator_factory, tmp_path):
    """Workers stream, no controller ever connects: the aggregator's log,
    run.json and the report say no step was written and why."""
    agg = aggregator_factory(exit_when_done=False)
    stop = tmp_path / "stop"
    workers = [subprocess.Popen([str(build_dir / "tests/apps/scale_worker"), "--stop-file", str(stop)],
                                env=agg.env(role="worker", rank=i)) for i in range(3)]
    deadline = time.monotonic() + 60  # a hang guard: until all three registered
    while time.monotonic() < deadline:
        if (agg.out / "run.json").exists():
            run = json.loads((agg.out / "run.json").read_text())
            if len(run["processes"]) == 3:
                break
        time.sleep(0.1)
    stop.touch()
    assert all(w.wait(timeout=60) == 0 for w in workers)
    log = agg.stop()
    why = "no step written: 3 processes connected and sent"
    assert why in log and "but no controller did" in log, log
    run = json.loads((agg.out / "run.json").read_text())
    assert run["steps_written"] == [] and any(n.startswith(why) for n in run["config_notes"])
    from rlscope_ray.report import render_report

    assert "but no controller did" in render_report(agg.out)


def test_a_controller_that_began_no_step_is_named(aggregator_factory):
    agg = aggregator_factory()
    r = subprocess.run([sys.executable, "-c", "import rlscope_ray, os; print(os.getpid())"],
                       env=agg.env(role="controller", inject=False), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    log = agg.wait()
    assert f"no step written: the controller (pid {r.stdout.strip()} on " in log, log
    assert "began no step" in log

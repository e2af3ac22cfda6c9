"""Faults injected into real runs: the aggregator killed and started again,
its disk full, a worker killed, a stranger on its port, a profiled process
that forks. Each checks what the run's directory shows against what the
programs recorded: every range is in the output or counted lost.

The programs wait at a step for a file the test creates once the fault is
in place (a handshake, not a timing), so each outcome is the same on a slow
machine."""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import ROOT, Trace, small_disk

STEPS = 10
MS = 1_000_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout  # a hang guard, not a timing
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def _written(log: Path, step: int) -> bool:
    return log.exists() and f"step {step} written" in log.read_text()


def _controller(agg, tmp: Path, go: Path, wait_before: int, steps: int = STEPS, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/step_controller.py"), "--steps", str(steps), "--step-ms", "60",
         "--gap-ms", "30", "--wait-before", str(wait_before), str(go), "--report", str(tmp / "controller.json")],
        env=agg.env(role="controller", config="steps: all"), **popen)


def _worker(agg, tmp: Path, stop: Path) -> subprocess.Popen:
    """A worker that records from before step 1: returns once its first range is in."""
    ready = tmp / "worker_ready"
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "600", "--stop-file", str(stop),
         "--ready", str(ready), "--report", str(tmp / "worker.json")], env=agg.env(rank=0, config="steps: all"))
    _wait_for(ready.exists, "the worker's first range")
    return worker


def _account_worker(out: Path, tmp: Path, steps: List[int]) -> Dict[str, int]:
    """The worker's py_iter ranges against the step traces: every range
    surely inside a step (its bracketed begin and end 1 ms inside the
    controller's bracketed step bounds) is in that step's trace, and the
    trace holds no more than the ranges that overlap the step."""
    ctrl = {s["step"]: s for s in json.loads((tmp / "controller.json").read_text())["steps"]}
    ranges = [r for r in json.loads((tmp / "worker.json").read_text())["ranges"] if r["name"] == "py_iter"]
    inside_total = traced_total = 0
    for n in steps:
        s = ctrl[n]
        inside = [r for r in ranges if r["begin_ns"] >= s["begin_hi_ns"] + MS and r["end_ns"] <= s["end_lo_ns"] - MS]
        overlapping = [r for r in ranges if r["end_ns"] >= s["begin_ns"] - MS and r["begin_ns"] <= s["end_ns"] + MS]
        trace = Trace(out / f"step_{n}" / "trace.json")
        pids = [p for p, name in trace.process_names.items() if "nvtx_worker.py" in name]
        assert len(pids) == 1, (n, trace.process_names, json.loads((out / "run.json").read_text())["processes"])
        traced = trace.slices(pids[0], "py_iter")
        assert len(inside) <= len(traced) <= len(overlapping), (n, len(inside), len(traced), len(overlapping))
        inside_total += len(inside)
        traced_total += len(traced)
    return {"inside": inside_total, "traced": traced_total}


def _controller_steps_whole(out: Path, steps: List[int]) -> None:
    for n in steps:
        trace = Trace(out / f"step_{n}" / "trace.json")
        ctrl = trace.pid_of("(controller)")
        assert len(trace.slices(ctrl, "step")) == 1, n
        assert sorted(s["name"] for s in trace.slices(ctrl) if s["name"] in ("gen", "update_actor")) == \
            ["gen", "update_actor"], n
        assert json.loads((out / f"step_{n}" / "summary.json").read_text())["step"] == n


def test_an_aggregator_killed_mid_run_and_started_again_loses_no_step(aggregator_factory, tmp_path):
    port = _free_port()
    listen = f"tcp://127.0.0.1:{port}"
    secret = "the-secret-of-this-run"
    first = aggregator_factory(config="steps: all\n", listen=listen, log=tmp_path / "first.log", secret=secret)
    go, stop = tmp_path / "go", tmp_path / "stop"
    worker = _worker(first, tmp_path, stop)
    controller = _controller(first, tmp_path, go, wait_before=7)
    # Killed without warning once step 3 is written: steps 4-6 are in flight
    # or done but not written, and what it held of them in memory is gone.
    _wait_for(lambda: _written(tmp_path / "first.log", 3), "step 3 written")
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    before = json.loads((first.out / "run.json").read_text())
    assert before["final"] is False and 3 in before["steps_written"]
    second = aggregator_factory(config="steps: all\n", listen=listen, out=first.out, log=tmp_path / "second.log",
                                secret=secret)
    go.touch()
    assert controller.wait(timeout=300) == 0
    stop.touch()
    assert worker.wait(timeout=120) == 0
    log = second.wait(timeout=60)
    run = json.loads((first.out / "run.json").read_text())
    assert run["final"] is True
    assert run["steps_written"] == list(range(1, STEPS + 1)), (run["steps_written"], log)
    assert run["resume"]["resumes"] == 1
    assert any("resumed this run directory" in n for n in run["config_notes"])
    assert not list(first.out.rglob("*.tmp"))
    _controller_steps_whole(first.out, list(range(1, STEPS + 1)))
    # Nothing dropped, and every range matched: a range open when its step
    # was written kept its open in the spool for the replay.
    for p in run["processes"]:
        assert p["dropped"] == 0, p
        assert p["unmatched"] == 0, p
    counts = _account_worker(first.out, tmp_path, list(range(1, STEPS + 1)))
    assert counts["inside"] > 0


def test_another_runs_unfinished_directory_is_not_taken_up_unless_asked(aggregator_factory, tmp_path):
    out = tmp_path / "out"
    # A run killed before its end leaves run.json not final.
    first = aggregator_factory(config="steps: all\n", out=out, log=tmp_path / "first.log", secret="run-a")
    # It listens before it writes run.json: under load a kill at once found none (soak).
    _wait_for(lambda: (out / "run.json").exists(), "the first run's run.json")
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    assert json.loads((out / "run.json").read_text())["final"] is False
    # Another run (another secret) on the same directory starts afresh and says so.
    other = aggregator_factory(config="steps: all\n", out=out, log=tmp_path / "other.log", secret="run-b",
                               exit_when_done=False)
    log = other.stop()
    assert "is an unfinished run that is not this one" in log, log
    run = json.loads((out / "run.json").read_text())
    assert run["resume"]["resumes"] == 0 and run["resume"]["run_key"] != ""
    assert not any("resumed this run directory" in n for n in run["config_notes"])
    # The same run's secret takes it up; so does --resume for any.
    for n, (secret, args) in enumerate([("run-b", []), (None, ["--resume"])], start=1):
        unfinished = json.loads((out / "run.json").read_text())
        unfinished["final"] = False  # as if this one had been killed too
        (out / "run.json").write_text(json.dumps(unfinished))
        aggregator_factory(config="steps: all\n", out=out, log=tmp_path / f"again{n}.log", secret=secret,
                           exit_when_done=False, args=args).stop()
        assert json.loads((out / "run.json").read_text())["resume"]["resumes"] == n


def test_a_stranger_without_the_secret_gets_nothing_in_and_cannot_end_the_run(aggregator_factory, build_dir,
                                                                              tmp_path):
    agg = aggregator_factory(config="steps: all\n", secret="s3cret-of-this-run")
    go, stop = tmp_path / "go", tmp_path / "stop"
    worker = _worker(agg, tmp_path, stop)
    controller = _controller(agg, tmp_path, go, wait_before=4)
    _wait_for(lambda: _written(agg.log, 2), "step 2 written")
    # What a local user could read before: run.json names the controller's session.
    victim = json.loads((agg.out / "run.json").read_text())["resume"]["controller_session"]
    assert int(victim, 16) != 0
    subprocess.run([str(build_dir / "tests/apps/stranger"), agg.endpoint, victim, str(tmp_path / "stranger.json")],
                   check=True, timeout=60)
    go.touch()
    assert controller.wait(timeout=300) == 0
    stop.touch()
    assert worker.wait(timeout=120) == 0
    agg.wait(timeout=60)
    seen = json.loads((tmp_path / "stranger.json").read_text())
    assert seen["other"] == 0  # it was told it is refused, and nothing of the run
    run = json.loads((agg.out / "run.json").read_text())
    assert run["steps_written"] == list(range(1, STEPS + 1))  # its goodbye did not end the run
    assert run["refused_hellos"] == 1 and run["refused_frames"] >= 6, run
    assert run["decode_errors"] == 1
    assert [p["pid"] for p in run["processes"]].count(4242) == 0
    assert all(e.get("name") != "ghost" for e in run["expected"])
    for n in range(1, STEPS + 1):
        text = (agg.out / f"step_{n}" / "trace.json").read_text()
        assert "stranger" not in text and "evil" not in text and "forged" not in text
    _controller_steps_whole(agg.out, list(range(1, STEPS + 1)))
    # The profile is its user's only.
    assert stat.S_IMODE(agg.out.stat().st_mode) == 0o700
    assert stat.S_IMODE((agg.out / "run.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((agg.out / "step_1").stat().st_mode) == 0o700
    assert stat.S_IMODE((agg.out / "step_1" / "trace.json").stat().st_mode) == 0o600


def test_a_collector_without_the_secret_is_refused(aggregator_factory, tmp_path):
    agg = aggregator_factory(config="steps: all\n", secret="the-right-one")
    env = agg.env(role="controller", config="steps: all")
    env["RLSCOPE_SECRET"] = "a-wrong-one"
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/step_controller.py"), "--steps", "2", "--step-ms",
                        "20", "--gap-ms", "10", "--report", str(tmp_path / "c.json")], env=env, timeout=120,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "refused this process:" in line]
    assert len(said) == 1 and "RLSCOPE_SECRET" in said[0], r.stderr
    assert "never received (it refused this process)" in r.stderr  # and at exit, what that lost
    agg.stop()
    run = json.loads((agg.out / "run.json").read_text())
    assert run["processes"] == [] and run["steps_written"] == []
    assert run["refused_hellos"] == 1 and run["refused_frames"] >= 1, run


def test_a_full_disk_stops_the_aggregator_at_once_and_a_restart_writes_the_rest(aggregator_factory, tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        out = disk / "out"
        filler = disk / "filler"
        port = _free_port()
        listen = f"tcp://127.0.0.1:{port}"
        secret = "the-secret-of-this-run"
        first = aggregator_factory(config="steps: all\n", listen=listen, out=out, log=tmp_path / "first.log",
                                   secret=secret)
        go = tmp_path / "go"
        controller = _controller(first, tmp_path, go, wait_before=7)
        _wait_for(lambda: _written(tmp_path / "first.log", 2), "step 2 written")
        # The disk fills: the next write fails, and the aggregator says so and exits.
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], stderr=subprocess.DEVNULL)
        rc = first.proc.wait(timeout=120)
        log = (tmp_path / "first.log").read_text()
        assert rc == 3, log
        assert "No space left on device" in log and "stopping" in log, log
        assert not list(out.rglob("*.tmp"))
        kept = json.loads((out / "run.json").read_text())
        assert kept["final"] is False and kept["steps_written"][:2] == [1, 2]
        for n in kept["steps_written"]:
            assert (out / f"step_{n}" / "trace.json").stat().st_size > 0
        # Room again: started on the same directory, it takes the run up from the collectors' spools.
        filler.unlink()
        second = aggregator_factory(config="steps: all\n", listen=listen, out=out, log=tmp_path / "second.log",
                                    secret=secret)
        go.touch()
        assert controller.wait(timeout=300) == 0
        second.wait(timeout=60)
        run = json.loads((out / "run.json").read_text())
        assert run["final"] is True and run["steps_written"] == list(range(1, STEPS + 1)), run["steps_written"]
        _controller_steps_whole(out, list(range(1, STEPS + 1)))


def test_a_worker_killed_mid_run_is_marked_lost_once_and_later_steps_do_not_wait(aggregator_factory, tmp_path):
    agg = aggregator_factory(config="steps: all\n", grace_ms=60000)  # only "lost" can release a step early
    go, stop = tmp_path / "go", tmp_path / "stop"
    worker = _worker(agg, tmp_path, stop)
    controller = _controller(agg, tmp_path, go, wait_before=4)
    _wait_for(lambda: _written(agg.log, 2), "step 2 written")
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    go.touch()
    assert controller.wait(timeout=300) == 0
    agg.wait(timeout=120)
    run = json.loads((agg.out / "run.json").read_text())
    assert run["steps_written"] == list(range(1, STEPS + 1))
    (w,) = [p for p in run["processes"] if p["name"] == "nvtx_worker.py"]
    assert w["lost"] is True
    assert sum("went silent" in n for n in run["config_notes"]) == 1
    last = json.loads((agg.out / f"step_{STEPS}" / "summary.json").read_text())
    trace = Trace(agg.out / f"step_{STEPS}" / "trace.json")
    assert not any("nvtx_worker.py" in name for name in trace.process_names.values())
    assert last["reason"] == "complete"


def test_a_forked_child_is_not_profiled_and_is_counted(aggregator_factory, tmp_path):
    agg = aggregator_factory(config="steps: all\n")
    code = (
        "import os, nvtx, rlscope_ray\n"
        "for n in (1, 2):\n"
        "    with rlscope_ray.step(n):\n"
        "        nvtx.push_range('parent_work'); nvtx.pop_range()\n"
        "        if n == 1:\n"
        "            pid = os.fork()\n"
        "            if pid == 0:\n"
        "                import rlscope_ray as r\n"
        "                nvtx.push_range('child_work'); nvtx.pop_range()\n"
        "                with r.step(7): pass\n"
        "                os._exit(0)\n"
        "            os.waitpid(pid, 0)\n")
    r = subprocess.run([sys.executable, "-c", code], env=agg.env(role="controller", config="steps: all"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sum("forked" in line for line in r.stderr.splitlines()) == 1, r.stderr
    agg.wait()
    run = json.loads((agg.out / "run.json").read_text())
    (p,) = run["processes"]  # the child is not a second process, nor a second controller
    assert p["labels"]["forked_children"] == "1"
    assert run["steps_written"] == [1, 2]
    text = (agg.out / "step_1" / "trace.json").read_text()
    assert "parent_work" in text and "child_work" not in text

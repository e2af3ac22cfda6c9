"""Programs that end while their aggregator is away: what they could not
deliver is left on their node's disk (native/spool_file.h) and taken up by a
restarted aggregator, a node's relay, or `rlscope-ray recover`; nothing is
lost, and a full disk is counted and said without harming the program.

Each scenario is a real run (a controller stepping, a worker recording) with
the aggregator killed by SIGKILL at a handshake, never at a time: the
programs wait for files the test creates once the fault is in place."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, small_disk
from test_faults import (STEPS, _account_worker, _controller_steps_whole, _free_port, _wait_for, _written)

SECRET = "the-secret-of-this-run"


def _spool_dir(spool_root: Path) -> Path:
    from rlscope_ray import _native

    return spool_root / _native.run_key(SECRET)


def _start(aggregator_factory, tmp: Path, listen: str, name: str, spool_root: Path, out: Path = None, **kw):
    """An aggregator whose spool root is `spool_root` (its environment), on `listen`."""
    os.environ["RLSCOPE_SPOOL_DIR"] = str(spool_root)
    try:
        return aggregator_factory(config="steps: all\n", listen=listen, log=tmp / f"{name}.log", secret=SECRET,
                                  out=out, **kw)
    finally:
        os.environ["RLSCOPE_SPOOL_DIR"] = os.environ["RLSCOPE_TEST_SPOOL_ROOT"]


@pytest.fixture(autouse=True)
def _own_spool_root(tmp_path, monkeypatch):
    root = tmp_path / "spool"
    monkeypatch.setenv("RLSCOPE_SPOOL_DIR", str(root))
    monkeypatch.setenv("RLSCOPE_TEST_SPOOL_ROOT", str(root))
    return root


def _programs(agg, tmp: Path, wait_before: int, endpoint: str = None, controller_spool: Path = None):
    """The controller (waits for tmp/go before step `wait_before`) and a
    recording worker (ends at tmp/stop); their stderr in tmp/*.err. The
    worker connects to `endpoint` when given (a relay); the controller's
    spool root is `controller_spool` when given (another host's disk)."""
    go, stop, ready = tmp / "go", tmp / "stop", tmp / "worker_ready"
    ctrl_env = agg.env(role="controller", config="steps: all")
    if controller_spool:
        ctrl_env["RLSCOPE_SPOOL_DIR"] = str(controller_spool)
    worker_env = agg.env(rank=0, config="steps: all")
    if endpoint:
        worker_env["RLSCOPE_AGGREGATOR"] = endpoint
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "600", "--stop-file", str(stop),
         "--ready", str(ready), "--report", str(tmp / "worker.json")], env=worker_env,
        stderr=open(tmp / "worker.err", "w"))
    _wait_for(ready.exists, "the worker's first range")
    controller = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/step_controller.py"), "--steps", str(STEPS), "--step-ms", "60",
         "--gap-ms", "30", "--wait-before", str(wait_before), str(go), "--report", str(tmp / "controller.json")],
        env=ctrl_env, stderr=open(tmp / "controller.err", "w"))
    return controller, worker


def _end_programs(tmp: Path, controller, worker) -> None:
    (tmp / "go").touch()
    assert controller.wait(timeout=300) == 0, (tmp / "controller.err").read_text()
    (tmp / "stop").touch()
    assert worker.wait(timeout=120) == 0, (tmp / "worker.err").read_text()


def _kill(agg) -> None:
    agg.proc.send_signal(signal.SIGKILL)
    agg.proc.wait()


def _killed_once_step_3_is_written(aggregator_factory, tmp: Path, spool_root: Path):
    """The first aggregator, killed once step 3 is written, and the programs
    (the controller waiting before step 7); returns (aggregator, its listen
    endpoint, controller, worker)."""
    listen = f"tcp://127.0.0.1:{_free_port()}"
    first = _start(aggregator_factory, tmp, listen, "first", spool_root)
    controller, worker = _programs(first, tmp, wait_before=7)
    _wait_for(lambda: _written(tmp / "first.log", 3), "step 3 written")
    _kill(first)
    return first, listen, controller, worker


def _database_steps(out: Path, agg):
    """The steps run.duckdb holds after an update (rlscope_ray.rundb), once
    the follower beside `agg` (gone or stopped) made its last one: it holds
    the database's lock while it does (a handshake; the bound is a hang's).
    None without the duckdb package."""
    try:
        import duckdb
    except ImportError:
        return None
    from rlscope_ray import rundb

    if agg._agg.follower is not None:
        agg._agg.follower.wait(timeout=300)
    rundb.update(str(out))
    con = duckdb.connect(str(out / "run.duckdb"), read_only=True)
    try:
        return sorted(s for (s,) in con.execute("SELECT step FROM steps").fetchall())
    finally:
        con.close()


def _every_step_and_range(out: Path, tmp: Path) -> dict:
    run = json.loads((out / "run.json").read_text())
    assert run["final"] is True
    assert run["steps_written"] == list(range(1, STEPS + 1)), run["steps_written"]
    _controller_steps_whole(out, list(range(1, STEPS + 1)))
    for p in run["processes"]:
        assert p["dropped"] == 0, p
        # (A worker that ends after the run is over, its aggregator gone, says no goodbye.)
        assert p["said_bye"] is True or p["role"] == "worker", p
    counts = _account_worker(out, tmp, list(range(1, STEPS + 1)))
    assert counts["inside"] > 0
    return run


def test_programs_that_end_while_the_aggregator_is_down_are_written_when_it_starts_again(aggregator_factory,
                                                                                        tmp_path,
                                                                                        _own_spool_root):
    first, listen, controller, worker = _killed_once_step_3_is_written(aggregator_factory, tmp_path, _own_spool_root)
    before = json.loads((first.out / "run.json").read_text())
    db_steps = _database_steps(first.out, first)  # a query while it is down: the steps the first one wrote
    assert db_steps is None or db_steps == sorted(before["steps_written"]) and db_steps[:3] == [1, 2, 3], db_steps
    run_id = before["run_id"]
    _end_programs(tmp_path, controller, worker)  # while no aggregator runs
    left = sorted(_spool_dir(_own_spool_root).glob("*.spool"))
    assert len(left) == 2, left  # the controller's and the worker's
    for who in ("controller", "worker"):
        err = (tmp_path / f"{who}.err").read_text()
        assert "left on this node's disk" in err and "lost" not in err, err
    assert all(os.stat(p).st_mode & 0o077 == 0 for p in left)  # the user's only
    assert os.stat(_spool_dir(_own_spool_root)).st_mode & 0o077 == 0
    second = _start(aggregator_factory, tmp_path, listen, "second", _own_spool_root, out=first.out)
    log = second.wait(timeout=120)
    run = _every_step_and_range(first.out, tmp_path)
    assert run["recovered"]["files"] == 2 and run["recovered"]["processes"] == 2, run["recovered"]
    assert run["recovered"]["events"] > 0
    assert "left on disk at its exit" in log
    assert not list(_spool_dir(_own_spool_root).glob("*"))  # taken up, removed
    # The same run, taken up: its id and its database stay, and the database
    # gets the steps the second aggregator wrote.
    assert run["run_id"] == run_id and "held an earlier run" not in log
    assert db_steps is None or _database_steps(first.out, second) == list(range(1, STEPS + 1))


def test_an_aggregator_started_again_just_before_the_programs_end_loses_nothing(aggregator_factory, tmp_path,
                                                                              _own_spool_root):
    listen = f"tcp://127.0.0.1:{_free_port()}"
    first = _start(aggregator_factory, tmp_path, listen, "first", _own_spool_root)
    controller, worker = _programs(first, tmp_path, wait_before=STEPS)  # holds before its last step
    _wait_for(lambda: _written(tmp_path / "first.log", 3), "step 3 written")
    _kill(first)
    second = _start(aggregator_factory, tmp_path, listen, "second", _own_spool_root, out=first.out)
    _end_programs(tmp_path, controller, worker)  # at once: reconnect, replay, or leave it on disk
    second.wait(timeout=120)
    _every_step_and_range(first.out, tmp_path)
    assert not list(_spool_dir(_own_spool_root).glob("*.spool"))


def test_through_a_relay_whose_root_is_down_at_the_end_the_relay_delivers_the_files(aggregator_factory, tmp_path,
                                                                                   _own_spool_root):
    """The root has a spool root of its own (another host's disk): only the
    node's relay can bring what the worker left there."""
    import rlscope_ray

    listen = f"tcp://127.0.0.1:{_free_port()}"
    root_spool = tmp_path / "root_host_spool"
    first = _start(aggregator_factory, tmp_path, listen, "first", root_spool)
    relay_env = dict(os.environ, RLSCOPE_SECRET=SECRET, RLSCOPE_SPOOL_DIR=str(_own_spool_root))
    relay_ep = tmp_path / "relay_endpoint"
    relay = subprocess.Popen([rlscope_ray.aggregator_path(), "--relay-to", listen, "--listen", "tcp://127.0.0.1:*",
                              "--endpoint-file", str(relay_ep)], env=relay_env,
                             stdout=open(tmp_path / "relay.log", "w"), stderr=subprocess.STDOUT)
    try:
        _wait_for(relay_ep.exists, "the relay's endpoint")
        # The controller (straight to the root) leaves its file on the root's host.
        controller, worker = _programs(first, tmp_path, wait_before=7, endpoint=relay_ep.read_text().strip(),
                                       controller_spool=root_spool)
        _wait_for(lambda: _written(tmp_path / "first.log", 3), "step 3 written")
        _kill(first)
        _end_programs(tmp_path, controller, worker)
        assert len(list(_spool_dir(_own_spool_root).glob("*.spool"))) == 1  # the worker's, on the relay's node
        second = _start(aggregator_factory, tmp_path, listen, "second", root_spool, out=first.out,
                        exit_when_done=False)
        _wait_for(lambda: not list(_spool_dir(_own_spool_root).glob("*.spool")), "the relay delivered the file")
        second.stop()
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(timeout=30)
    run = _every_step_and_range(first.out, tmp_path)
    assert run["recovered"]["files"] == 1, run["recovered"]  # the controller's, on the root's host
    (w,) = [p for p in run["processes"] if p["role"] == "worker"]
    assert w["via_relay"] is True
    assert "1 delivered" in (tmp_path / "relay.log").read_text()


def test_recover_takes_up_what_was_left_when_no_aggregator_came_back(aggregator_factory, tmp_path,
                                                                     _own_spool_root):
    first, _, controller, worker = _killed_once_step_3_is_written(aggregator_factory, tmp_path, _own_spool_root)
    _end_programs(tmp_path, controller, worker)
    assert json.loads((first.out / "run.json").read_text())["final"] is False
    cli = [sys.executable, "-m", "rlscope_ray.cli", "recover", str(first.out)]
    env = {k: v for k, v in os.environ.items() if k != "RLSCOPE_SECRET"}  # by hand: the run's key is in run.json
    r = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 spool files in" in r.stdout, r.stdout
    run = _every_step_and_range(first.out, tmp_path)
    assert run["recovered"]["processes"] == 2 and run["recovered"]["events"] > 0
    # Once taken, nothing is left to take: a second recover changes nothing.
    again = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 spool files in" in again.stdout, again.stdout + again.stderr
    assert json.loads((first.out / "run.json").read_text())["recovered"] == run["recovered"]
    bad = subprocess.run([sys.executable, "-m", "rlscope_ray.cli", "recover", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a run directory" in bad.stderr


def test_a_full_disk_at_exit_is_counted_and_said_and_the_program_ends_as_it_would(tmp_path, build_dir):
    with small_disk(tmp_path / "disk", "64k") as disk:
        import rlscope_ray

        (disk / "run").mkdir()  # the spool root, on a disk then filled
        subprocess.run(["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=4k"], stderr=subprocess.DEVNULL)

        env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCOPE_")}
        # No aggregator ever answers: all it records waits in the spool to the end.
        env.update(RLSCOPE_AGGREGATOR=f"tcp://127.0.0.1:{_free_port()}", RLSCOPE_SECRET=SECRET,
                   RLSCOPE_SPOOL_DIR=str(disk / "run"), RLSCOPE_ROLE="controller",
                   RLSCOPE_CONFIG="{steps: all, flush: {exit_timeout_ms: 200}}",
                   NVTX_INJECTION64_PATH=rlscope_ray.collector_path())
        r = subprocess.run([sys.executable, str(ROOT / "tests/apps/dense_steps.py"), "--steps", "3", "--ranges",
                            "50", "--report", str(tmp_path / "dense.json")], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        said = [line for line in r.stderr.splitlines() if "never received" in line]
        assert len(said) == 1 and "No space left on device" in said[0] and "they are lost" in said[0], r.stderr
        recorded = json.loads((tmp_path / "dense.json").read_text())["stats"]["events"]
        assert int(said[0].split("exiting with ")[1].split()[0]) >= recorded > 0  # every recorded event, counted
        assert "left on this node's disk" not in r.stderr
        assert not list(disk.rglob("*.tmp")) and not list(disk.rglob("*.spool"))

"""Start an aggregator daemon as a child process and wait until it listens.

The one way the package, its examples, benchmarks and tests launch one::

    with start_aggregator("out", config={"steps": [2, 3]}, args=["--exit-when-done"]) as agg:
        env["RLSCOPE_AGGREGATOR"] = agg.endpoint
        ...
        agg.stop(timeout=60)  # it exits by itself once the controller said bye

Contract: start_aggregator() returns only once the daemon has written its
endpoint file, i.e. it accepts connections at `endpoint`. If the daemon exits
first, or writes nothing within `deadline_s`, it is killed and
AggregatorStartError is raised with the end of its output in the message.
Its stdout and stderr go to one log file (or to a pipe). stop() is safe to call
more than once and on a daemon that has exited.

Beside the daemon runs its run database's follower (rlscope_ray.rundb_follow
`follow OUT --pid PID`, docs/run_database.md), with the daemon's nice value, its
output in rundb.log beside the daemon's log: it updates OUT/run.duckdb as steps
are written and exits after the daemon; stop() waits for it up to 10 s, then
leaves it to finish. `database=False` starts none.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._native import names as _names

ENV_DISABLE = _names.ENV_DISABLE

PathLike = Union[str, "os.PathLike[str]"]
SECRET = _names.ENV_SECRET  # RLSCOPE_SECRET: the daemon reads it


class AggregatorStartError(RuntimeError):
    """The aggregator exited, or wrote no endpoint file before the deadline."""


class AggregatorProcess:
    """A running aggregator: `endpoint` to connect to, `proc`, `log_path`
    (None when its output goes to the pipe `proc.stdout`)."""

    def __init__(self, endpoint: str, proc: subprocess.Popen, log_path: Optional[str], work_dir: str):
        self.endpoint = endpoint
        self.proc = proc
        self.log_path = log_path
        self.work_dir = work_dir  # holds the endpoint file (and a config given as a dict)
        self.follower: Optional[subprocess.Popen] = None  # the run database's (rlscope_ray.rundb_follow)

    def stop(self, timeout: float = 0.0, term_timeout: float = 30.0) -> Optional[int]:
        """Waits `timeout` s for it to exit by itself, then SIGTERM (it writes
        what is pending, then exits), `term_timeout` s more, then SIGKILL.
        Returns its exit status."""
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=term_timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self._stop_follower()
        return self.proc.returncode

    def _stop_follower(self, timeout: float = 10.0) -> None:
        """Waits up to `timeout` s for the database follower's last update
        (it exits once the daemon has); past that it is left to finish on
        its own, so that a large catch-up never holds the caller's teardown
        (and `rlscope-ray query` catches up whatever it did not)."""
        if self.follower is None or self.follower.poll() is not None:
            return
        try:
            self.follower.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

    def output(self, lines: int = 50) -> str:
        """The last `lines` lines of its log (or of its pipe, once it has exited)."""
        if self.log_path is not None:
            try:
                with open(self.log_path, errors="replace") as f:
                    text = f.read()
            except OSError:
                return ""
        elif self.proc.stdout is not None and self.proc.poll() is not None:
            text = self.proc.stdout.read()
            text = text.decode(errors="replace") if isinstance(text, bytes) else text
        else:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])

    def __enter__(self) -> "AggregatorProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# The follower's command: this very package, wherever the caller found it,
# found after the standard library (its directory appended to sys.path).
_FOLLOWER = "import sys; sys.path.append({here!r}); from rlscope_ray.rundb_follow import main; sys.exit(main())"


def _start_follower(out: PathLike, pid: int, beside: str, env: Dict[str, str],
                    increment: int) -> Optional[subprocess.Popen]:
    """The run database's follower of the daemon `pid`, its output in
    rundb.log beside `beside` (the daemon's log file, or its work directory);
    None when it cannot start (the run goes on without its database)."""
    log_dir = beside if os.path.isdir(beside) else os.path.dirname(beside)
    env = {k: v for k, v in env.items() if k != SECRET}
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(log_dir, "rundb.log"), "w") as log:
            return subprocess.Popen([sys.executable, "-c", _FOLLOWER.format(here=here), "follow", os.fspath(out),
                                     "--pid", str(pid)], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env,
                                    preexec_fn=(lambda: os.nice(increment)) if increment else None)
    except OSError:
        return None


def _aggregator_command(command: Optional[Sequence[str]], out: PathLike,
                        config: Union[PathLike, Dict[str, Any], None], listen: str, args: Sequence[str],
                        connect_host: Optional[str], work: str, endpoint_file: str) -> List[str]:
    """start_aggregator's command line (a dict config is written into `work`)."""
    if command is None:
        from .collector import aggregator_path

        command = [aggregator_path()]
    cmd = [*command, "--listen", listen, "--out", os.fspath(out)]
    if isinstance(config, dict):
        cfg_path = os.path.join(work, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(config, f)
        cmd += ["--config", cfg_path]
    elif config is not None:
        cmd += ["--config", os.fspath(config)]
    cmd += ["--endpoint-file", endpoint_file, *args]
    if connect_host:  # clock probes go there too (aggregator/probe_server.h), relayed collectors' included
        cmd += ["--probe-host", connect_host]
    return cmd


def start_aggregator(out: PathLike, *, config: Union[PathLike, Dict[str, Any], None] = None,
                     listen: str = "tcp://127.0.0.1:*", args: Sequence[str] = (),
                     command: Optional[Sequence[str]] = None, log: Union[PathLike, int, None] = None,
                     env: Optional[Mapping[str, str]] = None, nice: Union[bool, int] = False,
                     connect_host: Optional[str] = None, work_dir: Optional[PathLike] = None,
                     deadline_s: float = 30.0, secret: Optional[str] = None, database: bool = True
                     ) -> AggregatorProcess:
    """Launch `command --listen LISTEN --out OUT [--config C] --endpoint-file F ARGS`.

    out: its output directory. config: a config file, or a dict written as
        JSON into work_dir. args: more options (--exit-when-done,
        --exit-with-parent, --grace-ms N, ...).
    command: what to run before the options; default the package's daemon
        (rlscope_ray.aggregator_path()); a prefix such as `unshare ...` or
        `python -m rlscope_ray.cli aggregator` goes here.
    log: the file for its stdout and stderr (default work_dir/aggregator.log),
        or subprocess.PIPE for the caller to read proc.stdout.
    nice: run at a lower CPU priority (so it does not slow down what it
        profiles on a small machine): an increment of this process's nice
        value (os.nice), True the lowest priority (19).
    connect_host: the address others connect to when it binds 0.0.0.0 (the
        endpoint file then says tcp://0.0.0.0:PORT).
    work_dir: where the endpoint file goes; default a new temporary directory.
    secret: the run's secret (RLSCOPE_SECRET in its environment, never its
        command line): it then takes hellos that carry it only.
    """
    work = os.fspath(work_dir) if work_dir is not None else tempfile.mkdtemp(prefix="rlscope_aggregator_")
    os.makedirs(work, exist_ok=True)
    endpoint_file = os.path.join(work, "endpoint")
    if os.path.exists(endpoint_file):
        os.unlink(endpoint_file)  # a previous aggregator's
    cmd = _aggregator_command(command, out, config, listen, args, connect_host, work, endpoint_file)
    log_path = None if isinstance(log, int) else os.fspath(log or os.path.join(work, "aggregator.log"))
    stdout = log if isinstance(log, int) else open(log_path, "w")
    try:
        increment = 19 if nice is True else int(nice)
        child_env = dict(os.environ if env is None else env)
        # Never a profiled process itself, nor a profiled one's child
        # (collector/children.h) when a profiled program starts it.
        child_env[ENV_DISABLE] = "1"
        if secret:
            child_env[SECRET] = secret
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_env,
                                preexec_fn=(lambda: os.nice(increment)) if increment else None)
    finally:
        if not isinstance(stdout, int):
            stdout.close()  # the child has its own copy
    agg = AggregatorProcess("", proc, log_path, work)
    deadline = time.monotonic() + deadline_s
    while not os.path.exists(endpoint_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            why = (f"it exited with status {proc.returncode}" if proc.poll() is not None
                   else f"it wrote no endpoint file within {deadline_s:g} s")
            agg.stop(term_timeout=5)
            where = f"; its log is {log_path}" if log_path else ""
            raise AggregatorStartError(f"the aggregator did not start ({why}){where}:\n{agg.output()}")
        time.sleep(0.02)
    with open(endpoint_file) as f:
        agg.endpoint = f.read().strip()
    agg.follower = _start_follower(out, proc.pid, log_path or work, child_env, increment) if database else None
    if connect_host:
        host, port = agg.endpoint.rsplit(":", 1)
        if host.endswith("//0.0.0.0"):
            agg.endpoint = f"tcp://{connect_host}:{port}"
    return agg

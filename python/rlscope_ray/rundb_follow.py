"""The run database's follower: beside an aggregator, it updates
``<run_dir>/run.duckdb`` (rundb.py) as steps are written, and serves the
metrics endpoint (metrics.py) when the run's config sets one.

    python -m rlscope_ray.rundb_follow follow RUN_DIR --pid AGG_PID [--interval S] [--metrics-port P]
    python -m rlscope_ray.rundb_follow update RUN_DIR

The aggregator's process starts it (aggregator_process.py). It looks at the
run directory every interval while the aggregator runs, then once more, and
exits 0 whatever happens to the database: a run never fails because of it.
Its last log line is rundb.DONE_LINE.
"""
from __future__ import annotations

import os
import re
import select
import sys
import time
from typing import Optional, Sequence

from ._native import names as _names
from .rundb import (DISK_RESERVE_BYTES, DONE_LINE, NoRoom, RunDirError, db_path, output_formats, read_run_json,
                    run_id, update)


class _Watched:
    """Whether the aggregator `pid` runs, through a pidfd where the system
    has one (readable once the process exited, reaped or not: one poll of
    it a look), else _alive's reads. Reading /proc/<pid>/stat at every look
    cost a quarter of a millisecond of CPU each (cold caches)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._poll = None
        try:
            self._fd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfd (before Linux 5.3, Python 3.9), or gone already
            self._fd = None
            return
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)

    def alive(self) -> bool:
        if self._poll is None:
            return _alive(self.pid)
        return not self._poll.poll(0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class _Followed:
    """What the follower knows of the database between looks."""

    def __init__(self) -> None:
        self.run_id: Optional[str] = None  # the run the database was updated for (None: not yet)
        self.steps: set = set()            # written steps in it


# run.json's first bytes, where the aggregator writes its run_id (after
# its format): what a look reads when nothing else is new.
_RUN_ID_HEAD = re.compile(rb'^\{\s*"format"\s*:\s*"[^"]*"\s*,\s*"run_id"\s*:\s*"([^"]*)"')


def _nothing_new(run_dir: str, known: _Followed) -> bool:
    """Whether a look can skip run.json: no step directory that is not in
    the database (a step is written as its directory before run.json lists
    it), and the same run, by the run_id at the head of run.json. Reading
    run.json whole (11 KB of JSON on the demo, its processes' list most of
    it) was most of the follower's CPU, about 0.4 ms a look with cold
    caches, at every look for the whole run. Anything unexpected: not
    skipped (a step directory that never goes into the database, a failed
    export's, keeps every look reading run.json, as all looks did)."""
    if known.run_id is None:
        return False
    try:
        with open(os.path.join(run_dir, "run.json"), "rb") as f:
            head = _RUN_ID_HEAD.match(f.read(256))
        steps = {n[5:] for n in os.listdir(run_dir) if n.startswith("step_")}
    except OSError:
        return False
    return (head is not None and head.group(1).decode() == known.run_id
            and all(n.isdigit() and int(n) in known.steps for n in steps))


def _follow_once(run_dir: str, log, known: _Followed, last: bool) -> Optional[bool]:
    """One look; an update when run.json lists a step not in the database,
    or names another run than the one it was of (a new run began in the
    directory: the update replaces the database). Figures-only steps go in
    at the last look only (and whenever `rlscope-ray query` catches up):
    their rows cost about a millisecond of CPU a step, which beside a
    training job is the run's time. run.json is read only when a step's
    directory or the run is new, and at the last look (_nothing_new). True
    once the run's formats leave db out, None when run.json is not (yet, or
    not wholly) readable."""
    if not last and _nothing_new(run_dir, known):
        return False
    try:
        run = read_run_json(run_dir)
    except RunDirError:
        return None
    if _names.FORMAT_DB not in output_formats(run):
        return True
    if known.run_id != run_id(run):
        known.__init__()
    written = {int(s) for s in run.get("steps_written") or []}
    if not last and known.run_id is not None and written <= known.steps:
        return False  # nothing new: the database is not opened
    added = update(run_dir, run, keep_free=DISK_RESERVE_BYTES, figures_only=last)
    known.run_id = run_id(run)
    # In it now: every written step whose summary is there (written whole, by rename).
    known.steps.update(n for n in written if os.path.exists(os.path.join(run_dir, f"step_{n}", "summary.json")))
    full = [n for n in added if n in written]
    if full:
        print(f"rundb: steps {full} into {db_path(run_dir)}", file=log, flush=True)
    if len(added) > len(full):
        print(f"rundb: {len(added) - len(full)} figures-only steps into {db_path(run_dir)}", file=log, flush=True)
    return False


def follow(run_dir: str, pid: int, interval_s: float = 1.0, log=sys.stderr, sleep=time.sleep,
           metrics_port: Optional[int] = None) -> int:
    """Updates run_dir's database while process `pid` (the aggregator) runs,
    then once more; exits 0 whatever happens to the database, its last line
    DONE_LINE however it ends. `sleep(interval_s)` between looks (a test
    counts looks with its own). Serves the metrics endpoint on the run's
    metrics.port, or on `metrics_port` (0: any free port) when given."""
    try:
        return _follow(run_dir, pid, interval_s, log, sleep, metrics_port)
    finally:
        print(DONE_LINE, file=log, flush=True)


def _start_metrics(run_dir: str, log, port_override: Optional[int] = None):
    """The metrics endpoint (rlscope_ray.metrics) when the run's config
    sets metrics.port (or `port_override`, not None): its StepMetrics,
    serving; False when it is off or cannot be (said once); None while
    run.json cannot be read yet."""
    try:
        run = read_run_json(run_dir)
        from . import settings

        config = settings.merge([(str(run.get("config_yaml") or ""), "run.json config_yaml", False)])
    except RunDirError:
        return None
    except Exception as e:  # never the run's failure
        print(f"rundb: no metrics: the run's config cannot be read: {e}", file=log, flush=True)
        return False
    m = config.get("metrics") or {}
    port, host = int(m.get("port") or 0), str(m.get("host") or "127.0.0.1")
    if port_override is not None:
        port = port_override
    if port == 0 and port_override is None:
        return False
    try:
        from . import metrics

        step_metrics = metrics.StepMetrics()
        server = metrics.serve(step_metrics, port, host)
    except Exception as e:  # no prometheus_client, the port taken: said, the database goes on
        print(f"rundb: no metrics on {host}:{port}: {type(e).__name__}: {e}", file=log, flush=True)
        return False
    print(f"rundb: metrics on http://{host}:{server.server_address[1]}/metrics", file=log, flush=True)
    return step_metrics


def _follow(run_dir: str, pid: int, interval_s: float, log, sleep, metrics_port: Optional[int] = None) -> int:
    try:
        import duckdb  # noqa: F401
        db = True
    except ImportError as e:
        print(f"rundb: no run database ({e}); pip install duckdb to have one", file=log, flush=True)
        db = False
    os.umask(0o077)
    known = _Followed()
    watched = _Watched(pid)
    try:
        return _looks(run_dir, watched, interval_s, log, sleep, metrics_port, db, known)
    finally:
        watched.close()


def _looks(run_dir: str, watched: _Watched, interval_s: float, log, sleep, metrics_port: Optional[int], db: bool,
           known: _Followed) -> int:
    said_no_room = False
    said_failed = ""
    step_metrics = None  # None: not decided yet (no run.json); False: off
    while True:
        last = not watched.alive()
        if step_metrics is None:
            step_metrics = _start_metrics(run_dir, log, metrics_port)
        if step_metrics:
            try:
                step_metrics.follow(run_dir)
            except Exception as e:  # never the run's failure
                print(f"rundb: metrics update failed: {type(e).__name__}: {e}", file=log, flush=True)
        if not db:
            if step_metrics is False or last:
                return 0
            sleep(interval_s)
            continue
        try:
            if _follow_once(run_dir, log, known, last):
                print("rundb: output.formats leaves db out; no run database", file=log, flush=True)
                db = False
                continue
            said_no_room = False
        except NoRoom as e:  # the run's own files first: tried again at the next look
            if not said_no_room:
                print(f"rundb: {e}; no update until there is room (rlscope-ray query catches up)",
                      file=log, flush=True)
            said_no_room = True
        except Exception as e:  # never the run's failure: said (once while it repeats), and tried again
            said = f"rundb: update failed: {type(e).__name__}: {e}"
            if said != said_failed:
                print(said, file=log, flush=True)
            said_failed = said
        if last:
            return 0
        sleep(interval_s)


def main(argv: Optional[Sequence[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rlscope_ray.rundb_follow",
                                     description="The run database's follower, and its update by hand.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("follow", help="update RUN_DIR's database while the aggregator PID runs")
    f.add_argument("run_dir", metavar="RUN_DIR")
    f.add_argument("--pid", type=int, required=True, help="the aggregator's pid")
    f.add_argument("--interval", type=float, default=1.0, help="seconds between looks at run.json")
    f.add_argument("--metrics-port", type=int, help="serve the metrics here (0: a free port), whatever the run's "
                   "metrics.port")
    u = sub.add_parser("update", help="ingest RUN_DIR's written steps not yet in its database")
    u.add_argument("run_dir", metavar="RUN_DIR")
    ns = parser.parse_args(argv)
    if ns.cmd == "follow":
        return follow(ns.run_dir, ns.pid, ns.interval, metrics_port=ns.metrics_port)
    try:
        print(" ".join(str(s) for s in update(ns.run_dir)))
    except RunDirError as e:
        print(f"rundb: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The run database (rlscope_ray.rundb): run.duckdb kept beside a real
multi-process run by its follower, `rlscope-ray query` and `rlscope-ray stats`."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_local_demo

duckdb = pytest.importorskip("duckdb", reason="the run database needs the duckdb package (requirements-dev.txt)")

from rlscope_ray import rundb, rundb_follow  # noqa: E402  (after the skip: it needs duckdb to run)

SUBTASKS = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"]


def wait_for_the_follower(tmp: Path) -> None:
    """Until the run database's follower (its log under `tmp`, the run's
    TMPDIR) said its last update is done: it outlives the demo by up to the
    time that update takes (a handshake; the bound is for a hang)."""
    deadline = time.monotonic() + 300
    while not any(rundb.DONE_LINE in log.read_text() for log in tmp.glob("rlscope_aggregator_*/rundb.log")):
        assert time.monotonic() < deadline, "the follower never finished"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def run(build_dir, tmp_path_factory):
    """The subprocess demo (a controller, ranks 0-2) writing steps 2 and 3; what
    its run.duckdb held once its follower was done, before anyone else touched it."""
    base = tmp_path_factory.mktemp("rundb")
    tmp = base / "tmp"  # the aggregator's work directory (its follower's log) goes under TMPDIR
    tmp.mkdir()
    r, out = run_local_demo(build_dir, base, "steps: [2, 3]\nflush: {step_grace_ms: 3000}\n",
                            env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    wait_for_the_follower(tmp)
    followed = None
    if (out / "run.duckdb").exists():
        con = duckdb.connect(str(out / "run.duckdb"), read_only=True)
        followed = sorted(s for (s,) in con.execute("SELECT step FROM steps").fetchall())
        con.close()
    return out, followed


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlscope_ray.cli", *args], capture_output=True, text=True,
                          timeout=120)


def query(out: Path, sql: str) -> list:
    r = cli("query", str(out), sql)
    assert r.returncode == 0, r.stderr
    return list(csv.DictReader(io.StringIO(r.stdout)))


def summaries(out: Path) -> dict:
    run = json.loads((out / "run.json").read_text())
    return {n: json.loads((out / f"step_{n}" / "summary.json").read_text()) for n in run["steps_written"]}


def test_the_follower_beside_the_aggregator_wrote_every_step_without_a_query(run):
    out, followed = run
    # Nobody called update: the follower beside the aggregator wrote every step.
    assert followed == [2, 3]


def _steps_in(db: Path) -> list:
    """The steps in a database no one is writing now ([] while it has no tables)."""
    if not db.exists():
        return []
    con = duckdb.connect(str(db), read_only=True)
    try:
        return sorted(s for (s,) in con.execute("SELECT step FROM steps").fetchall())
    except duckdb.CatalogException:
        return []
    finally:
        con.close()


def test_the_follower_updates_while_the_aggregator_still_runs(run, tmp_path):
    """A run directory growing step by step, its "aggregator" a process that
    keeps running: after each look the follower took, the steps written by
    then are in the database while that process still runs. The looks are
    counted, not timed: the follower's sleep between them drives the run."""
    out, _ = run
    live = tmp_path / "live"
    live.mkdir()
    run_json = json.loads((out / "run.json").read_text())
    standin = subprocess.Popen(["sleep", "300"])  # the aggregator, still running

    def write_step(n: int) -> None:
        shutil.copytree(out / f"step_{n}", live / f"step_{n}")
        (live / "run.json").write_text(json.dumps(dict(run_json, steps_written=list(range(2, n + 1)))))

    seen = []  # after each look: (steps in the database, whether the stand-in ran)

    def between_looks(_interval: float) -> None:
        seen.append((_steps_in(live / "run.duckdb"), standin.poll() is None))
        if len(seen) == 1:
            write_step(3)
        elif len(seen) == 2:
            standin.kill()  # the aggregator exits: one more look, then the follower does
            standin.wait()
        else:
            raise AssertionError(f"the follower kept looking after its aggregator exited: {seen}")

    write_step(2)
    try:
        assert rundb_follow.follow(str(live), standin.pid, log=io.StringIO(), sleep=between_looks) == 0
    finally:
        standin.kill()
        standin.wait()
    assert seen == [([2], True), ([2, 3], True)]
    assert _steps_in(live / "run.duckdb") == [2, 3]


def test_a_follower_that_sees_a_new_run_begin_in_its_directory_replaces_the_database(run, tmp_path):
    """A new run in the directory while the follower runs (it was started
    beside the new aggregator, which then replaced the old run's files):
    at its next look the database is the new run's, not the old one's with
    the new steps skipped as known."""
    out, _ = run
    live = tmp_path / "live"
    shutil.copytree(out, live)
    (live / "run.duckdb").unlink()
    old = json.loads((live / "run.json").read_text())
    standin = subprocess.Popen(["sleep", "300"])  # the aggregator, still running
    seen = []

    def between_looks(_interval: float) -> None:
        con = duckdb.connect(str(live / "run.duckdb"), read_only=True)
        seen.append(con.execute("SELECT value FROM meta WHERE key = 'run_id'").fetchone()[0])
        con.close()
        if len(seen) == 1:  # the new run: the same step numbers, another id
            (live / "run.json").write_text(json.dumps(dict(old, run_id="0123456789abcdef")))
        else:
            standin.kill()
            standin.wait()

    try:
        assert rundb_follow.follow(str(live), standin.pid, log=io.StringIO(), sleep=between_looks) == 0
    finally:
        standin.kill()
        standin.wait()
    assert seen[:2] == [old["run_id"], "0123456789abcdef"], seen


def test_a_look_with_nothing_new_reads_no_run_json_and_the_aggregators_exit_is_seen_through_its_pidfd(
        run, tmp_path, monkeypatch):
    """run.json is read at the first look, when a step directory or the run
    is new, and at the last look, not at the looks between (reading it whole
    was most of the follower's CPU: about 0.4 ms a look, for the whole run).
    The aggregator's exit, reaped or not, ends the looks."""
    out, _ = run
    live = tmp_path / "live"
    live.mkdir()
    run_json = json.loads((out / "run.json").read_text())
    (live / "run.json").write_text(json.dumps(dict(run_json, steps_written=[2])))
    shutil.copytree(out / "step_2", live / "step_2")
    standin = subprocess.Popen(["sleep", "300"])  # the aggregator, still running
    reads = []
    real_read = rundb_follow.read_run_json
    monkeypatch.setattr(rundb_follow, "read_run_json", lambda d: reads.append(len(looks)) or real_read(d))
    looks = []

    def between_looks(_interval: float) -> None:
        looks.append(_steps_in(live / "run.duckdb"))
        if len(looks) == 2:  # a new step
            shutil.copytree(out / "step_3", live / "step_3")
            (live / "run.json").write_text(json.dumps(dict(run_json, steps_written=[2, 3])))
        elif len(looks) == 4:  # a new run in the directory: the same steps, another id
            (live / "run.json").write_text(json.dumps(dict(run_json, run_id="0123456789abcdef",
                                                           steps_written=[2, 3])))
        elif len(looks) == 6:
            standin.kill()  # exited, not reaped: a zombie until the end of the test
            os.waitid(os.P_PID, standin.pid, os.WEXITED | os.WNOWAIT)
        elif len(looks) > 6:
            raise AssertionError(f"the follower kept looking after its aggregator exited: {looks}")

    if hasattr(os, "pidfd_open"):  # watched through its pidfd here, not /proc
        watched = rundb_follow._Watched(standin.pid)
        assert watched._fd is not None and watched.alive()
        watched.close()
    try:
        assert rundb_follow.follow(str(live), standin.pid, log=io.StringIO(), sleep=between_looks) == 0
        assert standin.poll() is not None  # (reaped only now)
    finally:
        standin.kill()
        standin.wait()
    # Looks 0-6; run.json read at look 0 (the first; twice: the metrics'
    # config too), 2 (step 3's directory), 4 (the new run id) and 6 (the
    # last), none between.
    assert reads == [0, 0, 2, 4, 6], reads
    assert looks == [[2], [2], [2, 3], [2, 3], [2, 3], [2, 3]], looks


def test_sql_answers_equal_the_summaries(run):
    out, _ = run
    sums = summaries(out)
    steps = query(out, "SELECT step, duration_ms, corrected_ms FROM steps ORDER BY step")
    assert [int(s["step"]) for s in steps] == sorted(sums)
    for row in steps:
        s = sums[int(row["step"])]
        assert float(row["duration_ms"]) == pytest.approx(s["duration_ms"])
        assert float(row["corrected_ms"]) == pytest.approx(s["correction"]["duration_ms"])
    spans = query(out, "SELECT step, session, count(*) AS n FROM spans GROUP BY step, session")
    got = {(int(r["step"]), r["session"]): int(r["n"]) for r in spans}
    want = {(n, p["session"]): p["spans"] for n, s in sums.items() for p in s["processes"] if p["spans"]}
    assert got == want and len(want) == 2 * 4  # 4 processes per step
    inst = query(out, "SELECT step, session, count(*) AS n FROM instants GROUP BY step, session")
    assert {(int(r["step"]), r["session"]): int(r["n"]) for r in inst} == {
        (n, p["session"]): p["instants"] for n, s in sums.items() for p in s["processes"] if p["instants"]}
    # Each worker's update_actor range lasts what its trace slice says, on its rank.
    ranks = query(out, "SELECT DISTINCT rank FROM spans WHERE name = 'update_actor' AND rank IS NOT NULL "
                       "ORDER BY rank")
    assert [r["rank"] for r in ranks] == ["0", "1", "2"]


def test_update_is_idempotent(run):
    out, _ = run
    from rlscope_ray import rundb

    before = query(out, "SELECT count(*) AS n FROM spans")
    assert rundb.update(str(out)) == []
    assert query(out, "SELECT count(*) AS n FROM spans") == before


def test_stats_prints_its_three_tables_with_the_runs_ranks_and_subtasks(run):
    out, _ = run
    r = cli("stats", str(out))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for title in ("Sub-task time per rank across steps", "Step-time trend", "Stragglers across steps"):
        assert title in text
    per_rank = text.split("Step-time trend")[0]
    rows = [line.split() for line in per_rank.splitlines() if line.split() and line.split()[0] in SUBTASKS]
    assert {(row[0], row[1]) for row in rows} >= {(t, str(k)) for t in SUBTASKS if t != "adv" for k in (0, 1, 2)}
    trend = text.split("Step-time trend")[1].split("Stragglers")[0]
    assert [line.split()[0] for line in trend.splitlines() if line.split() and line.split()[0].isdigit()] == \
        ["2", "3"]
    stragglers = text.split("Stragglers across steps")[1]
    assert "update_actor" in stragglers


def test_bad_sql_gets_duckdbs_message_and_a_nonzero_exit(run):
    out, _ = run
    r = cli("query", str(out), "SELEC step FROM steps")
    assert r.returncode == 2
    assert "syntax error" in r.stderr and "Traceback" not in r.stderr
    r = cli("query", str(out), "SELECT nope FROM steps")
    assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr
    # Read-only: a query cannot change the database.
    r = cli("query", str(out), "DELETE FROM steps")
    assert r.returncode == 2 and "read-only" in r.stderr.lower()


def test_a_second_run_into_the_same_directory_replaces_the_first_runs_steps_and_database(build_dir, tmp_path):
    """`make demo` twice into one directory: what the directory answers, in
    files and in SQL, is the second run's alone."""
    r, out = run_local_demo(build_dir, tmp_path, "steps: [2, 3]\nflush: {step_grace_ms: 3000}\n")
    assert r.returncode == 0, r.stderr
    first = json.loads((out / "run.json").read_text())
    assert [int(s["step"]) for s in query(out, "SELECT step FROM steps ORDER BY step")] == [2, 3]
    (out / "report.html").write_text("the first run's report")
    r, out = run_local_demo(build_dir, tmp_path, "steps: [2]\nflush: {step_grace_ms: 3000}\n", steps=2)
    assert r.returncode == 0, r.stderr
    second = json.loads((out / "run.json").read_text())
    assert second["run_id"] and second["run_id"] != first["run_id"] and second["steps_written"] == [2]
    assert not (out / "step_3").exists() and not (out / "report.html").exists()
    pids = {p["pid"] for p in second["processes"]}
    assert pids.isdisjoint({p["pid"] for p in first["processes"]})
    assert [int(s["step"]) for s in query(out, "SELECT step FROM steps")] == [2]
    assert {int(p["pid"]) for p in query(out, "SELECT DISTINCT pid FROM processes")} == pids
    assert {int(p["pid"]) for p in query(out, "SELECT DISTINCT pid FROM spans")} <= pids
    assert query(out, "SELECT value FROM meta WHERE key = 'run_id'") == [{"value": second["run_id"]}]


def test_a_database_left_by_another_run_is_rebuilt_not_read(run, tmp_path):
    """Where the aggregator could not remove it (or a copy brought it), a
    database whose run_id is not run.json's is replaced before a query."""
    out, _ = run
    other = tmp_path / "other"
    shutil.copytree(out, other)
    run_json = json.loads((other / "run.json").read_text())
    run_json["run_id"] = "0123456789abcdef"  # another run, with the same steps on disk
    (other / "run.json").write_text(json.dumps(run_json))
    con = duckdb.connect(str(other / "run.duckdb"))
    con.execute("UPDATE steps SET duration_ms = -1")  # what only the stale database says
    con.close()
    steps = query(other, "SELECT step, duration_ms, (SELECT value FROM meta WHERE key = 'run_id') AS id FROM steps "
                         "ORDER BY step")
    sums = summaries(other)
    assert [int(s["step"]) for s in steps] == sorted(sums)
    assert all(float(s["duration_ms"]) == pytest.approx(sums[int(s["step"])]["duration_ms"]) for s in steps)
    assert {s["id"] for s in steps} == {"0123456789abcdef"}


def test_a_database_an_earlier_version_built_is_rebuilt_with_this_schema(run, tmp_path):
    """A run.duckdb of another schema (an earlier version's, without the
    processes' clock columns) is rebuilt from the run's files, not refused."""
    out, _ = run
    old = tmp_path / "old_schema"
    shutil.copytree(out, old)
    con = duckdb.connect(str(old / "run.duckdb"))
    con.execute("ALTER TABLE processes DROP COLUMN clock_fitness")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    rows = query(old, "SELECT DISTINCT clock_basis, clock_fitness FROM processes")
    assert rows == [{"clock_basis": "same_clock", "clock_fitness": "good"}], rows
    assert query(old, "SELECT value FROM meta WHERE key = 'schema_version'") == [{"value": str(rundb.SCHEMA_VERSION)}]


def test_a_directory_of_an_older_format_or_no_run_is_said(run, tmp_path):
    out, _ = run
    old = tmp_path / "old"
    shutil.copytree(out, old)
    (old / "run.duckdb").unlink()
    run_json = json.loads((old / "run.json").read_text())
    run_json["format"] = "rlscope-ray run v0"
    (old / "run.json").write_text(json.dumps(run_json))
    for cmd in (("query", str(old), "SELECT 1"), ("stats", str(old)), ("stats", str(tmp_path))):
        r = cli(*cmd)
        assert r.returncode == 1, r
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "'rlscope-ray run v0'" in cli("stats", str(old)).stderr
    assert "not a run directory" in cli("stats", str(tmp_path)).stderr
    assert not (old / "run.duckdb").exists()


@pytest.mark.parametrize("formats, db", [("[json]", False), ("[json, db]", True), (None, True)])
def test_the_follower_writes_only_when_the_formats_hold_db(run, tmp_path, formats, db):
    """run.json's output_formats, as the aggregator resolved them, whatever
    the config's text says; None: a run.json from before that key, read
    with the config's defaults (which hold db)."""
    out, _ = run
    d = tmp_path / "run"
    shutil.copytree(out, d)
    (d / "run.duckdb").unlink()
    run_json = json.loads((d / "run.json").read_text())
    assert run_json["output_formats"] == ["json", "pftrace", "db"]  # the default, as the aggregator resolved it
    if formats is None:
        del run_json["output_formats"]
        run_json["config_yaml"] += "output:\n  formats: [json]\n"  # not read
    else:
        run_json["output_formats"] = [f.strip() for f in formats.strip("[]").split(",")]
    (d / "run.json").write_text(json.dumps(run_json))
    gone = subprocess.Popen(["true"])
    gone.wait()  # an aggregator that has exited: one update, then the follower exits
    r = subprocess.run([sys.executable, "-m", "rlscope_ray.rundb_follow", "follow", str(d), "--pid", str(gone.pid)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (d / "run.duckdb").exists() == db, r.stderr


def test_async_ranges_and_gpu_records_have_their_rows(run, tmp_path):
    """Records the CPU-only demo has none of, added to a copy of its step 2
    as chrome_trace.cc writes them: a start/end range ("b"/"e"), a kernel on
    its stream's track with its launch's API call."""
    out, _ = run
    d = tmp_path / "run"
    shutil.copytree(out, d)
    (d / "run.duckdb").unlink()
    path = d / "step_2" / "trace.json"
    text = path.read_text()
    pid = next(e["pid"] for e in json.loads(text)["traceEvents"]
               if e["ph"] == "M" and e["name"] == "process_name" and "rank 0)" in e["args"]["name"])
    extra = [
        {"ph": "b", "name": "rollout", "cat": "nvtx.async", "id": 7, "pid": pid, "tid": 77, "ts": 1000.5,
         "args": {"payload": 3}},
        {"ph": "e", "name": "rollout", "cat": "nvtx.async", "id": 7, "pid": pid, "tid": 77, "ts": 1250.75},
        {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_api", "pid": pid, "tid": pid, "ts": 1100.0,
         "dur": 5.0, "args": {"correlation": 42}},
        {"ph": "X", "name": "gemm_kernel", "cat": "gpu", "pid": pid, "tid": 4294967296, "ts": 1110.0,
         "dur": 20.5, "args": {"correlation": 42, "device": 0, "stream": 7, "grid": [1, 1, 1], "block": [32, 1, 1]}},
    ]
    body, tail = text.rstrip().rsplit("]}", 1)
    path.write_text(body.rstrip("\n") + "".join("\n," + json.dumps(e) for e in extra) + "\n]}" + tail + "\n")
    from rlscope_ray import rundb

    assert rundb.update(str(d)) == [2, 3]
    (r,) = query(d, "SELECT rank, tid, begin_ns, end_ns, dur_ns, args->>'payload' AS payload FROM spans "
                    "WHERE async AND step = 2")
    assert (r["rank"], r["tid"], r["begin_ns"], r["end_ns"], r["dur_ns"], r["payload"]) == (
        "0", "77", "1000500", "1250750", "250250", "3")
    gpu = query(d, "SELECT name, category, device, stream, correlation, dur_ns FROM gpu_activities ORDER BY name")
    assert [(g["name"], g["category"], g["device"], g["stream"], g["correlation"], g["dur_ns"]) for g in gpu] == [
        ("cudaLaunchKernel", "cuda_api", "", "", "42", "5000"), ("gemm_kernel", "gpu", "0", "7", "42", "20500")]
    # GPU records are not ranges.
    assert query(d, "SELECT count(*) AS n FROM spans WHERE name IN ('gemm_kernel', 'cudaLaunchKernel')") == [{"n": "0"}]


def test_a_run_whose_formats_leave_db_out_has_no_database(build_dir, tmp_path):
    tmp = tmp_path / "tmp"  # the aggregator's work directory goes under TMPDIR
    tmp.mkdir()
    r, out = run_local_demo(build_dir, tmp_path, "steps: [2]\nflush: {step_grace_ms: 3000}\noutput: {formats: [json]}\n",
                            steps=2, env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    assert (out / "step_2" / "summary.json").exists() and not (out / "run.duckdb").exists()
    (log,) = tmp.glob("rlscope_aggregator_*/rundb.log")  # the follower ran, and said why it wrote nothing
    assert "output.formats leaves db out" in log.read_text()


def test_an_update_that_would_leave_the_disk_too_full_writes_nothing(run, tmp_path):
    """The follower keeps room on the disk for the run's own files."""
    out, _ = run
    d = tmp_path / "run"
    shutil.copytree(out, d)
    (d / "run.duckdb").unlink()
    from rlscope_ray import rundb

    with pytest.raises(rundb.NoRoom, match="MiB free"):
        rundb.update(str(d), keep_free=shutil.disk_usage(d).free + 1)
    assert not (d / "run.duckdb").exists()
    assert rundb.update(str(d), keep_free=0) == [2, 3]


def test_without_duckdb_the_follower_says_so_and_exits_0(run, tmp_path):
    out, _ = run
    d = tmp_path / "run"
    shutil.copytree(out, d)
    (d / "run.duckdb").unlink()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "duckdb.py").write_text("raise ImportError('No module named duckdb (test shim)')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "rlscope_ray.rundb_follow", "follow", str(d), "--pid", str(os.getpid())],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0
    assert r.stderr.count("no run database") == 1 and "pip install duckdb" in r.stderr
    assert not (d / "run.duckdb").exists()

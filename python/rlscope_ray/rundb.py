"""The run database: ``<run_dir>/run.duckdb``, SQL over every written step.

    update(run_dir) -> [steps added]      # idempotent; ingests written steps not yet in it

Its follower, beside an aggregator, updates it as steps are written
(rundb_follow.py).

Tables and columns: docs/run_database.md. The database belongs to its run:
it records run.json's ``run_id``, and a database of another run (a new run
written into the same directory) is replaced, never added to or read as this
run's. Each written step (run.json
``steps_written``) is ingested once, in one transaction, from its
``summary.json`` (Python's json) and its ``trace.json`` (DuckDB's CSV and JSON
readers, one event per line). DuckDB lets one process write a database file;
every update opens, writes and closes it, so others (``rlscope-ray query``) can
read it between updates, and a lock held by another process is retried for a
few seconds. The follower writes only when the run's ``output.formats`` holds
``db`` (the default), and only while the disk keeps DISK_RESERVE_BYTES free
beyond the new steps' JSON; without the duckdb package it says so once in its
log and exits 0: a run never fails because of its database.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _native, figures
from ._native import names as _names

SCHEMA_VERSION = 3  # 2: processes.clock_basis, clock_fitness; 3: figures-only steps, steps.detail, trigger, memory
DB_NAME = "run.duckdb"
RUN_FORMATS = (_names.RUN_FORMAT,)  # the run.json formats this module reads
LOCK_RETRY_S = 5.0
# The follower's last line, once its last update is done (or given up):
# what a caller that must see the database whole waits for.
DONE_LINE = "rundb: done"
BLOCK_SIZE = 65536
# The follower leaves this much of the run directory's disk free (and as much
# again as the JSON it is about to read): the run's own files come first.
DISK_RESERVE_BYTES = 64 << 20
# Figures-only steps' lines per transaction (about 900 steps of five
# processes at 1.8 KB a process): a catch-up's memory stays bounded
# whatever the run's length.
FIGURES_CHUNK_BYTES = 8 << 20

# Categories of the trace's slices that are not ranges (native/names.h kCat*).
CAT_CPU_SAMPLES = _names.CAT_CPU_SAMPLES
CAT_OFF_CPU = _names.CAT_OFF_CPU
GPU_CATS = (_names.CAT_KERNEL, _names.CAT_MEMCPY, _names.CAT_MEMSET, _names.CAT_CUDA_API, _names.CAT_CUDA_SYNC,
            _names.CAT_CUPTI_OVERHEAD)


class RunDirError(Exception):
    """A directory that is not a run directory this version reads; the message is one line."""


class NoRoom(Exception):
    """Too little free disk beside the run for an update (update's keep_free)."""


SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE IF NOT EXISTS steps (step BIGINT PRIMARY KEY, begin_ns BIGINT, end_ns BIGINT,
        duration_ms DOUBLE, corrected_ms DOUBLE, subtracted_ms DOUBLE, uncertainty_ms DOUBLE,
        systematic_ms DOUBLE, correction_enabled BOOLEAN, reason VARCHAR, processes BIGINT, spans BIGINT,
        instants BIGINT, dropped BIGINT, late_processes BIGINT, lost_processes BIGINT, not_profiled BIGINT,
        detail VARCHAR, trigger VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS processes (step BIGINT, session VARCHAR, label VARCHAR, host VARCHAR,
        pid BIGINT, rank BIGINT, role VARCHAR, name VARCHAR, selected BOOLEAN, spans BIGINT, instants BIGINT,
        gpu_records BIGINT, cpu_samples BIGINT, events_received BIGINT, dropped BIGINT, unmatched BIGINT,
        overhead_ms DOUBLE, overhead_uncertainty_ms DOUBLE, overhead_events BIGINT, profiler_thread_ms DOUBLE,
        clock_bound_ns BIGINT, clock_basis VARCHAR, clock_fitness VARCHAR, rss_end_mb DOUBLE,
        rss_change_mb DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS spans (step BIGINT, session VARCHAR, pid BIGINT, rank BIGINT, tid BIGINT,
        thread VARCHAR, name VARCHAR, category VARCHAR, async BOOLEAN, begin_ns BIGINT, end_ns BIGINT,
        dur_ns BIGINT, args JSON)""",
    """CREATE TABLE IF NOT EXISTS instants (step BIGINT, session VARCHAR, pid BIGINT, rank BIGINT, tid BIGINT,
        thread VARCHAR, name VARCHAR, category VARCHAR, ts_ns BIGINT, args JSON)""",
    """CREATE TABLE IF NOT EXISTS cpu_samples (step BIGINT, session VARCHAR, pid BIGINT, rank BIGINT,
        track BIGINT, thread VARCHAR, category VARCHAR, module VARCHAR, samples BIGINT, cpu_ms DOUBLE,
        begin_ns BIGINT, end_ns BIGINT, dur_ns BIGINT, args JSON)""",
    """CREATE TABLE IF NOT EXISTS off_cpu (step BIGINT, session VARCHAR, pid BIGINT, rank BIGINT,
        track BIGINT, thread VARCHAR, reason VARCHAR, looks BIGINT, off_cpu_ms DOUBLE,
        begin_ns BIGINT, end_ns BIGINT, dur_ns BIGINT)""",
    """CREATE TABLE IF NOT EXISTS gpu_activities (step BIGINT, session VARCHAR, pid BIGINT, rank BIGINT,
        tid BIGINT, thread VARCHAR, name VARCHAR, category VARCHAR, device BIGINT, stream BIGINT,
        correlation UBIGINT, bytes UBIGINT, begin_ns BIGINT, end_ns BIGINT, dur_ns BIGINT, args JSON)""",
    """CREATE TABLE IF NOT EXISTS subtasks (step BIGINT, subtask VARCHAR, rank BIGINT, session VARCHAR,
        process VARCHAR, role VARCHAR, occurrences BIGINT, window_ms DOUBLE, busy_ms DOUBLE,
        cpu_only_ms DOUBLE, gpu_only_ms DOUBLE, cpu_gpu_ms DOUBLE, idle_ms DOUBLE, overhead_ms DOUBLE,
        attribution JSON)""",
    """CREATE TABLE IF NOT EXISTS stragglers (step BIGINT, subtask VARCHAR, ranks BIGINT, slowest_rank BIGINT,
        slowest_process VARCHAR, slowest_ms DOUBLE, median_ms DOUBLE, fastest_ms DOUBLE, ratio DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS critical_path (step BIGINT, subtask VARCHAR, occurrence BIGINT,
        begin_ms DOUBLE, duration_ms DOUBLE, critical_rank BIGINT, critical_process VARCHAR,
        critical_ms DOUBLE, median_ms DOUBLE)""",
]

COLUMNS = {
    "steps": ["step", "begin_ns", "end_ns", "duration_ms", "corrected_ms", "subtracted_ms", "uncertainty_ms",
              "systematic_ms", "correction_enabled", "reason", "processes", "spans", "instants", "dropped",
              "late_processes", "lost_processes", "not_profiled", "detail", "trigger"],
    "processes": ["step", "session", "label", "host", "pid", "rank", "role", "name", "selected", "spans",
                  "instants", "gpu_records", "cpu_samples", "events_received", "dropped", "unmatched",
                  "overhead_ms", "overhead_uncertainty_ms", "overhead_events", "profiler_thread_ms",
                  "clock_bound_ns", "clock_basis", "clock_fitness", "rss_end_mb", "rss_change_mb"],
    "subtasks": ["step", "subtask", "rank", "session", "process", "role", "occurrences", "window_ms", "busy_ms",
                 "cpu_only_ms", "gpu_only_ms", "cpu_gpu_ms", "idle_ms", "overhead_ms", "attribution"],
    "stragglers": ["step", "subtask", "ranks", "slowest_rank", "slowest_process", "slowest_ms", "median_ms",
                   "fastest_ms", "ratio"],
    "critical_path": ["step", "subtask", "occurrence", "begin_ms", "duration_ms", "critical_rank",
                      "critical_process", "critical_ms", "median_ms"],
}


def db_path(run_dir: str) -> str:
    return os.path.join(run_dir, DB_NAME)


def read_run_json(run_dir: str) -> Dict[str, Any]:
    """run.json of a run directory this version reads, else RunDirError (one line)."""
    path = os.path.join(run_dir, "run.json")
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir} is not a directory")
    if not os.path.isfile(path):
        raise RunDirError(f"{run_dir} is not a run directory (no run.json)")
    try:
        with open(path) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path} cannot be read: {e}") from None
    fmt = run.get("format") if isinstance(run, dict) else None
    if fmt not in RUN_FORMATS:
        raise RunDirError(f"{run_dir}: run.json is of format {fmt!r}; this rlscope-ray reads "
                          f"{', '.join(repr(f) for f in RUN_FORMATS)} (write the run again with this version)")
    return run


def output_formats(run: Dict[str, Any]) -> List[str]:
    """The run's output formats: run.json's output_formats, the list its
    aggregator resolved and writes (aggregator/outputs.h); a run.json of an
    rlscope-ray from before that key ran with the defaults."""
    if isinstance(run.get("output_formats"), list):
        return [str(f) for f in run["output_formats"]]
    return list(_native.default_output_formats())


def _create(path: str) -> None:
    """A new database file of 64 KiB blocks: with DuckDB's default, 256 KiB,
    a three-step demo's database takes 3.1 MB (0.8 MB), a million spans 20 MB
    (17 MB; 16 KiB blocks: 39 MB). The default where DuckDB lacks the option."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {_sql_str(path)} AS db (BLOCK_SIZE {BLOCK_SIZE})")
    except duckdb.Error:
        pass
    finally:
        con.close()


def connect(path: str, read_only: bool = False, retry_s: float = LOCK_RETRY_S):
    """A DuckDB connection, retried while another process holds the file's lock."""
    import duckdb

    if not read_only and not os.path.exists(path):
        _create(path)
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.IOException as e:
            if "lock" not in str(e).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _num(d: Dict[str, Any], *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _summary_rows(s: Dict[str, Any]) -> Dict[str, List[tuple]]:
    """Rows of the summary tables for one step's summary.json."""
    step = s["step"]
    corr, totals = s.get("correction") or {}, s.get("totals") or {}
    rows: Dict[str, List[tuple]] = {t: [] for t in ("steps", "processes", "subtasks", "stragglers", "critical_path")}
    rows["steps"].append((step, s.get("begin_ns"), s.get("end_ns"), s.get("duration_ms"), corr.get("duration_ms"),
                          corr.get("subtracted_ms"), corr.get("uncertainty_ms"), corr.get("systematic_ms"),
                          corr.get("enabled"), s.get("reason"), totals.get("processes"), totals.get("spans"),
                          totals.get("instants"), totals.get("dropped"), len(s.get("late_processes") or []),
                          len(s.get("lost_processes") or []), len(s.get("not_profiled") or []),
                          s.get("detail") or "full", s.get("trigger")))
    for p in s.get("processes") or []:
        rows["processes"].append((step, p.get("session"), p.get("label"), p.get("host"), p.get("pid"), p.get("rank"),
                                  p.get("role"), p.get("name"), p.get("selected"), p.get("spans"), p.get("instants"),
                                  p.get("gpu_records"), p.get("cpu_samples"), p.get("events_received_total"),
                                  p.get("dropped_total"), p.get("unmatched_total"),
                                  _num(p, "overhead", "subtracted_ms"), _num(p, "overhead", "uncertainty_ms"),
                                  _num(p, "overhead", "events"), _num(p, "overhead", "profiler_thread_ms"),
                                  _num(p, "clock", "bound_ns"), (p.get("clock") or {}).get("basis"),
                                  p.get("clock_fitness"), _num(p, "memory", "rss_end_mb"),
                                  _num(p, "memory", "rss_change_mb")))
    for b in s.get("breakdown") or []:
        busy = sum(b.get(k) or 0.0 for k in ("cpu_only_ms", "gpu_only_ms", "cpu_gpu_ms"))
        att = b.get("attribution")
        rows["subtasks"].append((step, b.get("subtask"), b.get("rank"), b.get("session"), b.get("process"),
                                 b.get("role"), b.get("occurrences"), b.get("window_ms"), busy, b.get("cpu_only_ms"),
                                 b.get("gpu_only_ms"), b.get("cpu_gpu_ms"), b.get("idle_ms"), b.get("overhead_ms"),
                                 att))
    for g in s.get("stragglers") or []:
        rows["stragglers"].append((step, g.get("subtask"), g.get("ranks"), g.get("slowest_rank"),
                                   g.get("slowest_process"), g.get("slowest_ms"), g.get("median_ms"),
                                   g.get("fastest_ms"), g.get("ratio")))
    for c in (s.get("critical_path") or {}).get("segments") or []:
        rows["critical_path"].append((step, c.get("subtask"), c.get("occurrence"), c.get("begin_ms"),
                                      c.get("duration_ms"), c.get("critical_rank"), c.get("critical_process"),
                                      c.get("critical_ms"), c.get("median_ms")))
    return rows


def _insert_rows(con, rows: Dict[str, List[tuple]], tmp_dir: str) -> None:
    """Rows into their tables through newline-delimited JSON files that
    DuckDB reads (its executemany takes about a millisecond a row)."""
    for table, values in rows.items():
        if not values:
            continue
        cols = COLUMNS[table]
        path = os.path.join(tmp_dir, f"{table}.json")
        with open(path, "w") as f:
            for v in values:
                f.write(json.dumps(dict(zip(cols, v))))
                f.write("\n")
        types = dict(con.execute(f"SELECT column_name, data_type FROM duckdb_columns() "
                                 f"WHERE table_name = '{table}' AND schema_name = 'main'").fetchall())
        spec = ", ".join(f"{_sql_str(c)}: {_sql_str(types[c])}" for c in cols)
        con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM "
                    f"read_json({_sql_str(path)}, format='newline_delimited', columns={{{spec}}})")


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


_EVENT = ('{"ph":"VARCHAR","name":"VARCHAR","cat":"VARCHAR","pid":"BIGINT","tid":"BIGINT","ts":"DOUBLE",'
          '"dur":"DOUBLE","id":"VARCHAR","args":"JSON"}')


def _load_trace(con, trace_path: str, step: int) -> None:
    """The step's trace events into the temporary tables ev (one row per
    event, with the process's session/pid/rank) and threads."""
    lines = (f"read_csv({_sql_str(trace_path)}, columns={{'line': 'VARCHAR'}}, delim='\\x01', quote='', "
             "escape='', header=false, auto_detect=false, max_line_size=16777216)")
    con.execute("DROP TABLE IF EXISTS raw_ev; DROP TABLE IF EXISTS ev; DROP TABLE IF EXISTS threads")
    con.execute(f"""CREATE TEMP TABLE raw_ev AS SELECT unnest(json_transform(j, '{_EVENT}')) FROM
        (SELECT ltrim(line, ',') AS j FROM {lines} WHERE starts_with(ltrim(line, ','), '{{"ph"'))""")
    con.execute(f"""CREATE TEMP TABLE ev AS
        WITH tracks AS (SELECT pid AS trace_pid, args->>'name' AS label FROM raw_ev
                        WHERE ph = 'M' AND name = 'process_name')
        SELECT r.*, p.session, p.pid AS os_pid, p.rank FROM raw_ev r
        LEFT JOIN tracks t ON t.trace_pid = r.pid
        LEFT JOIN processes p ON p.step = {int(step)} AND p.label = t.label
        WHERE r.ph <> 'M'""")
    con.execute("""CREATE TEMP TABLE threads AS SELECT DISTINCT ON (pid, tid) pid, tid, args->>'name' AS thread
        FROM raw_ev WHERE ph = 'M' AND name = 'thread_name'""")


def _ingest_trace(con, trace_path: str, step: int) -> None:
    _load_trace(con, trace_path, step)
    n = int(step)
    ns = "CAST(round(e.ts * 1000) AS BIGINT)"
    dur = "CAST(round(e.dur * 1000) AS BIGINT)"
    who = f"{n}, e.session, e.os_pid, e.rank"
    join = "FROM ev e LEFT JOIN threads t ON t.pid = e.pid AND t.tid = e.tid"
    not_span = ", ".join(_sql_str(c) for c in (CAT_CPU_SAMPLES, CAT_OFF_CPU) + tuple(GPU_CATS))
    gpu = ", ".join(_sql_str(c) for c in GPU_CATS)
    con.execute(f"""INSERT INTO spans SELECT {who}, e.tid, t.thread, e.name, e.cat, false, {ns}, {ns} + {dur},
        {dur}, e.args {join} WHERE e.ph = 'X' AND coalesce(e.cat, '') NOT IN ({not_span})""")
    con.execute(f"""INSERT INTO spans SELECT {who}, e.tid, t.thread, e.name, e.cat, true, {ns},
        CAST(round(x.ts * 1000) AS BIGINT), CAST(round(x.ts * 1000) AS BIGINT) - {ns}, e.args {join}
        JOIN ev x ON x.ph = 'e' AND x.pid = e.pid AND x.id = e.id AND x.name = e.name AND x.cat = e.cat
        WHERE e.ph = 'b'""")
    con.execute(f"""INSERT INTO instants SELECT {who}, e.tid, t.thread, e.name, e.cat, {ns}, e.args {join}
        WHERE e.ph = 'i'""")
    con.execute(f"""INSERT INTO cpu_samples SELECT {who}, e.tid, t.thread, e.name, e.args->>'where',
        CAST(e.args->>'samples' AS BIGINT), CAST(e.args->>'cpu_ms' AS DOUBLE), {ns}, {ns} + {dur}, {dur},
        e.args {join} WHERE e.ph = 'X' AND e.cat = {_sql_str(CAT_CPU_SAMPLES)}""")
    con.execute(f"""INSERT INTO off_cpu SELECT {who}, e.tid, t.thread, regexp_replace(e.name, '^off CPU: ', ''),
        CAST(e.args->>'looks' AS BIGINT), CAST(e.args->>'off_cpu_ms' AS DOUBLE), {ns}, {ns} + {dur}, {dur}
        {join} WHERE e.ph = 'X' AND e.cat = {_sql_str(CAT_OFF_CPU)}""")
    con.execute(f"""INSERT INTO gpu_activities SELECT {who}, e.tid, t.thread, e.name, e.cat,
        CAST(e.args->>'device' AS BIGINT), CAST(e.args->>'stream' AS BIGINT),
        CAST(e.args->>'correlation' AS UBIGINT), CAST(e.args->>'bytes' AS UBIGINT), {ns}, {ns} + {dur}, {dur},
        e.args {join} WHERE e.ph = 'X' AND e.cat IN ({gpu})""")
    con.execute("DROP TABLE raw_ev; DROP TABLE ev; DROP TABLE threads")


def _read_summary(run_dir: str, step: int) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(run_dir, f"step_{step}", "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):  # not (wholly) there yet
        return None
    return summary if isinstance(summary, dict) and summary.get("step") == step else None


def _ingest_steps(con, run_dir: str, steps: Iterable[int], replace: Iterable[int] = ()) -> List[int]:
    """Written steps whose summary.json reads, in one transaction (the rows
    of those in `replace` deleted first); if that fails, each in its own, so
    that a step that cannot go in keeps no other out (its error is raised
    once the others are in). Returns the steps ingested."""
    summaries = [s for s in (_read_summary(run_dir, n) for n in steps) if s is not None]
    replace = set(replace)
    try:
        return _ingest_summaries(con, run_dir, summaries, replace=replace)
    except Exception as first:
        if len(summaries) < 2:
            raise
        ingested = []
        for s in summaries:
            try:
                ingested += _ingest_summaries(con, run_dir, [s], replace=replace & {s["step"]})
            except Exception:
                pass
        if len(ingested) < len(summaries):
            raise first
        return ingested


def _new_figures(con, run_dir: str) -> Tuple[List[Dict[str, Any]], int, int]:
    """figures.jsonl's lines past the offset the database took last (meta
    figures_offset), that offset, and the offset after them."""
    row = con.execute("SELECT value FROM meta WHERE key = 'figures_offset'").fetchone()
    start = int(row[0]) if row else 0
    figs, end = figures.read_from(run_dir, start, FIGURES_CHUNK_BYTES)
    return figs, start, end


# The tables whose rows are a step's (every one with a step column: all but meta).
STEP_TABLES = [re.match(r"CREATE TABLE IF NOT EXISTS (\w+) \(step BIGINT", t).group(1) for t in SCHEMA
               if re.match(r"CREATE TABLE IF NOT EXISTS \w+ \(step BIGINT", t)]


def _ingest_summaries(con, run_dir: str, summaries: List[Dict[str, Any]],
                      meta: Optional[Dict[str, str]] = None, replace: Iterable[int] = ()) -> List[int]:
    """In one transaction: the rows of the steps in `replace` deleted, the
    summaries' rows, then each one's trace.json, and the `meta` keys' values."""
    replace = sorted(set(replace))
    if not summaries and not meta:
        return []
    rows: Dict[str, List[tuple]] = {t: [] for t in COLUMNS}
    for s in summaries:
        for table, values in _summary_rows(s).items():
            rows.setdefault(table, []).extend(values)
    tmp = tempfile.mkdtemp(prefix="rlscope_rundb_")
    con.execute("BEGIN TRANSACTION")
    try:
        if replace:
            listed = ", ".join(str(int(n)) for n in replace)
            for table in STEP_TABLES:
                con.execute(f"DELETE FROM {table} WHERE step IN ({listed})")
        _insert_rows(con, rows, tmp)
        for s in summaries:
            trace = os.path.join(run_dir, f"step_{s['step']}", "trace.json")
            if os.path.isfile(trace):
                _ingest_trace(con, trace, s["step"])
        for key, value in (meta or {}).items():
            con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [s["step"] for s in summaries]


def run_id(run: Dict[str, Any]) -> str:
    """run.json's run_id ("" from an aggregator before ids)."""
    return str(run.get("run_id") or "")


def owner(con) -> Optional[str]:
    """The run_id a database was built for ("" before ids); None for a
    database with no table yet (new)."""
    if not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'meta' AND schema_name = 'main'").fetchone():
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'run_id'").fetchone()
    return row[0] if row else ""


def _schema_version(con) -> Optional[str]:
    """The schema a database was built with; None for a new one."""
    if owner(con) is None:
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return row[0] if row else None


def _remove(path: str) -> None:
    for p in (path, path + ".wal"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def _prepare(con, run: Dict[str, Any]) -> None:
    con.execute(SCHEMA[0])
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is not None and row[0] != str(SCHEMA_VERSION):
        raise RunDirError(f"{DB_NAME} has schema version {row[0]}, this rlscope-ray writes {SCHEMA_VERSION}; "
                          "delete it to have it rebuilt")
    for stmt in SCHEMA[1:]:
        con.execute(stmt)
    con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("run_format", str(run.get("format"))),
                     ("final", "true" if run.get("final") else "false"), ("run_id", run_id(run))])


def _check_room(run_dir: str, steps: Iterable[int], keep_free: int) -> None:
    """NoRoom unless the disk keeps `keep_free` bytes free beyond as much as
    the steps' JSON (a bound on what their rows take)."""
    need = keep_free
    for n in steps:
        for name in ("summary.json", "trace.json"):
            try:
                need += os.path.getsize(os.path.join(run_dir, f"step_{n}", name))
            except OSError:
                pass
    free = shutil.disk_usage(run_dir).free
    if free < need:
        raise NoRoom(f"{free >> 20} MiB free beside the run, under the {need >> 20} MiB an update keeps free")


def update(run_dir: str, run: Optional[Dict[str, Any]] = None, keep_free: int = 0,
           figures_only: bool = True) -> List[int]:
    """Ingests every step of run.json's steps_written not yet in run.duckdb
    (creating it, or replacing one built for another run: its run_id is
    not run.json's), and with `figures_only` every figures-only step of
    figures.jsonl's lines past the last update's (in transactions of
    FIGURES_CHUNK_BYTES of lines); returns the steps added, in order.
    Idempotent. keep_free: NoRoom, and nothing written, unless the disk
    keeps that many bytes free beyond the new steps' JSON (the follower
    keeps DISK_RESERVE_BYTES: the run's own files come first)."""
    run = run if run is not None else read_run_json(run_dir)
    written = sorted({int(s) for s in run.get("steps_written") or []})
    path = db_path(run_dir)
    created = not os.path.exists(path)
    if created and keep_free:
        _check_room(run_dir, written, keep_free)
    con = connect(path)
    if not created and (owner(con) not in (None, run_id(run))
                        or _schema_version(con) not in (None, str(SCHEMA_VERSION))):
        # Another run's, in this directory before this one, or built by an
        # earlier version (another schema): replaced, rebuilt from the run's files.
        con.close()
        _remove(path)
        created = True
        if keep_free:
            _check_room(run_dir, written, keep_free)
        con = connect(path)
    try:
        if created:
            os.chmod(path, 0o600)  # as the run's other files
        con.execute("SET memory_limit = '2GB'")  # beside a training job: a large step spills to disk
        _prepare(con, run)
        # Each step in it, and its detail ("full" or "figures").
        have = dict(con.execute("SELECT step, coalesce(detail, 'full') FROM steps").fetchall())
        # A step written in full replaces its figures-only rows (an aggregator
        # restarted on the run may write in full a step it had as figures).
        new = [s for s in written if have.get(s) != "full"]
        if keep_free and new:
            _check_room(run_dir, new, keep_free)
        added = _ingest_steps(con, run_dir, new, replace=[s for s in new if s in have])
        have.update((n, "full") for n in added)
        # Always on: figures.jsonl's new lines; a figures-only step is its
        # line (a full step is its summary.json, which says its trigger), its
        # last line when there are several (a restarted aggregator's replay).
        # Each chunk with the offset after it in one transaction: a catch-up
        # cut short goes on from there, its memory bounded by the chunk.
        while figures_only:
            figs, start, offset = _new_figures(con, run_dir)
            if offset == start:
                break  # nothing more, or a line still being written
            only = {f["step"]: figures.as_summary(f) for f in figs
                    if f.get("detail") == "figures" and have.get(f["step"]) != "full"}
            added += _ingest_summaries(con, run_dir, [only[n] for n in sorted(only)],
                                       meta={"figures_offset": str(offset)},
                                       replace=[n for n in only if n in have])
            have.update((n, "figures") for n in only)
    finally:
        con.close()
    return sorted(set(added))

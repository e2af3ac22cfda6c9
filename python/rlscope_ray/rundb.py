"""The run database: ``<run_dir>/run.duckdb``, SQL over every written step.

    update(run_dir) -> [steps added]      # idempotent; ingests written steps not yet in it
    python -m rlscope_ray.rundb follow RUN_DIR --pid AGG_PID
                                          # beside an aggregator: updates as steps are written

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
import select
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

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


# Figures-only steps' lines per transaction (about 900 steps of five
# processes at 1.8 KB a process): a catch-up's memory stays bounded
# whatever the run's length.
FIGURES_CHUNK_BYTES = 8 << 20


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

    parser = argparse.ArgumentParser(prog="python -m rlscope_ray.rundb", description="The run database.")
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

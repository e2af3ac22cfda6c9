"""``rlscope-ray query`` and ``rlscope-ray stats``: SQL over a run's database.

    rlscope-ray query RUN_DIR "SQL"     # CSV with a header on stdout
    rlscope-ray stats RUN_DIR [--format table|csv]

Both first catch RUN_DIR/run.duckdb up with the steps written since its last
update (rlscope_ray.rundb.update), then read it read-only. Exit status: 0; 1
for a directory that is not a run directory this version reads (one line);
2 for bad arguments or a query DuckDB refuses (its own message on stderr).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
from typing import Any, List, Optional, Sequence, Tuple

from . import rundb

# The canned tables of `stats`: (title, SQL). Sub-tasks in the order the
# summaries list them (the controller's order), ranks ascending.
STATS: List[Tuple[str, str]] = [
    ("Sub-task time per rank across steps (busy ms: CPU or GPU busy inside the sub-task's windows)", """
        SELECT subtask, rank, count(*) AS steps, round(avg(busy_ms), 3) AS mean_ms,
               round(min(busy_ms), 3) AS min_ms, round(max(busy_ms), 3) AS max_ms,
               round(avg(window_ms), 3) AS mean_window_ms
        FROM subtasks WHERE rank IS NOT NULL AND subtask <> 'step'
        GROUP BY subtask, rank
        ORDER BY min(min(rowid)) OVER (PARTITION BY subtask), rank"""),
    ("Step-time trend (ms; corrected: the profiler's overhead removed)", """
        SELECT step, round(duration_ms, 3) AS raw_ms, round(corrected_ms, 3) AS corrected_ms,
               round(subtracted_ms, 3) AS subtracted_ms, processes, spans, dropped
        FROM steps ORDER BY step"""),
    ("Stragglers across steps (the slowest rank of each sub-task per step)", """
        WITH s AS (SELECT subtask, slowest_rank, count(*) AS times, round(avg(slowest_ms - median_ms), 3)
                          AS mean_over_median_ms, round(avg(ratio), 3) AS mean_ratio, min(rowid) AS first
                   FROM stragglers GROUP BY subtask, slowest_rank),
             t AS (SELECT subtask, count(DISTINCT step) AS steps, min(rowid) AS first FROM stragglers
                   GROUP BY subtask)
        SELECT s.subtask, s.slowest_rank, s.times, t.steps, s.mean_over_median_ms, s.mean_ratio
        FROM s JOIN t USING (subtask) ORDER BY t.first, s.times DESC, s.slowest_rank"""),
]


def _cell(v: Any) -> str:
    return "" if v is None else str(v)


def _catch_up(prog: str, run_dir: str) -> Optional[int]:
    """Updates the database; an exit status when the command cannot go on."""
    try:
        import duckdb
    except ImportError:
        print(f"{prog}: the duckdb package is missing (pip install duckdb)", file=sys.stderr)
        return 1
    os.umask(0o077)  # the database is the user's only, as the run's other files
    try:
        rundb.update(run_dir)
    except rundb.RunDirError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    except duckdb.Error as e:  # held by a writer past the retries, or not a database
        print(f"{prog}: {rundb.db_path(run_dir)}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except OSError as e:  # a directory we may read but not write: query what is there
        if not os.path.isfile(rundb.db_path(run_dir)):
            print(f"{prog}: cannot write {rundb.db_path(run_dir)}: {e.strerror or e}", file=sys.stderr)
            return 1
    return None


def _open(prog: str, run_dir: str):
    """A read-only connection to the database of the directory's run, or
    None (said in one line): never one of another run (a directory we could
    not write, where the update could not replace it)."""
    import duckdb

    path = rundb.db_path(run_dir)
    try:
        con = rundb.connect(path, read_only=True)
        theirs, ours = rundb.owner(con), rundb.run_id(rundb.read_run_json(run_dir))
    except duckdb.Error as e:
        print(f"{prog}: {path}: {str(e).splitlines()[0]}", file=sys.stderr)
        return None
    except rundb.RunDirError as e:
        con.close()
        print(f"{prog}: {e}", file=sys.stderr)
        return None
    if theirs not in (None, ours):
        con.close()
        print(f"{prog}: {path} holds another run's rows (run {theirs or 'without an id'}), not those of "
              f"{run_dir}/run.json (run {ours or 'without an id'}), and could not be rebuilt here; run it where "
              f"the directory can be written", file=sys.stderr)
        return None
    return con


def _run(con, sql: str) -> Tuple[List[str], List[tuple]]:
    cur = con.execute(sql)
    header = [d[0] for d in cur.description or []]
    return header, cur.fetchall()


def _caught_up(prog: str, run_dir: str):
    """The run's database, caught up and open read-only; an exit status
    (int) when it cannot be (said on stderr)."""
    status = _catch_up(prog, run_dir)
    if status is not None:
        return status
    con = _open(prog, run_dir)
    return 1 if con is None else con


def _write_csv(header: List[str], rows: List[tuple]) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    if header:
        w.writerow(header)
    w.writerows([_cell(v) for v in r] for r in rows)


def query_main(args: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlscope-ray query",
                                     description="Run SQL over a run's database (docs/run_database.md); CSV out.")
    parser.add_argument("dir", metavar="RUN_DIR", help="the aggregator's output directory (holds run.json)")
    parser.add_argument("sql", metavar="SQL", help='e.g. "SELECT step, duration_ms FROM steps"')
    ns = parser.parse_args(args)
    con = _caught_up("rlscope-ray query", ns.dir)
    if isinstance(con, int):
        return con
    import duckdb

    try:
        header, rows = _run(con, ns.sql)
    except duckdb.Error as e:
        print(f"rlscope-ray query: {e}", file=sys.stderr)
        return 2
    finally:
        con.close()
    _write_csv(header, rows)
    return 0


def _print_table(title: str, header: List[str], rows: List[tuple]) -> None:
    cells = [header] + [[_cell(v) for v in r] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    print(f"** {title}:\n")
    for n, line in enumerate(cells):
        print("  ".join(c.rjust(w) if n and c.replace(".", "").lstrip("-").isdigit() else c.ljust(w)
                        for c, w in zip(line, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    if not rows:
        print("(none)")
    print()


def stats_main(args: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlscope-ray stats",
                                     description="Print the run's canned tables across steps, as `nsys stats` does.")
    parser.add_argument("dir", metavar="RUN_DIR", help="the aggregator's output directory (holds run.json)")
    parser.add_argument("--format", choices=("table", "csv"), default="table", help="how to print each table")
    ns = parser.parse_args(args)
    con = _caught_up("rlscope-ray stats", ns.dir)
    if isinstance(con, int):
        return con
    try:
        for title, sql in STATS:
            header, rows = _run(con, sql)
            if ns.format == "csv":
                print(f"# {title}")
                _write_csv(header, rows)
                print()
            else:
                _print_table(title, header, rows)
    finally:
        con.close()
    return 0

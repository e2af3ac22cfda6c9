"""The ``rlscope-ray`` command.

    rlscope-ray aggregator --listen tcp://127.0.0.1:5557 --out DIR [--config FILE]
    rlscope-ray check CONFIG          # validate; print the resolved config or the errors
    rlscope-ray check --keys          # every config key with its default and meaning
    rlscope-ray paths                 # where the collector library and daemon are
    rlscope-ray report DIR [--out FILE]   # one self-contained HTML page of a run
    rlscope-ray recover DIR [--spool-dir SPOOL]
                                      # what processes left on this node's disk at exit
                                      # (their aggregator was away) into the run DIR
    rlscope-ray calibrate [--runs K] [--config FILE] -- COMMAND [ARGS...]
                                      # A/B: the correction.scale for this workload
    rlscope-ray query DIR "SQL"       # SQL over the run's database DIR/run.duckdb, CSV out
    rlscope-ray stats DIR             # canned tables across steps (per rank, trend, stragglers)
    rlscope-ray diff RUN_A [RUN_B] [--a-steps N-M] [--b-steps N-M] [--report]
                                      # what changed beyond the steps' noise, and where it went
    rlscope-ray export hta RUN_DIR --step N --out DIR
                                      # per-rank traces of step N that Holistic Trace
                                      # Analysis loads (docs/exports.md)

The daemon and the config checker are native (the same code the collector
uses); this module only dispatches to them. ``report`` is pure Python
(rlscope_ray.report): it reads DIR/run.json and DIR/step_<N>/summary.json,
writes DIR/report.html (or FILE) and prints the path written; a DIR that is
missing or not an output directory is a one-line error and exit status 2.
``recover`` takes up the spool files a run's processes left on this node's
disk when their aggregator could not take them (by default the run's own
directory, found by the key in DIR/run.json: $RLSCOPE_SPOOL_DIR or
/tmp/rlscope-spool-<uid>, then the key), writes the steps they complete
into DIR and counts them in run.json's ``recovered``.
``calibrate`` runs COMMAND alternately with and without the profiler
(rlscope_ray.ab_calibration) and prints the scale; a failed run is a
one-line error naming its kept log, exit status 2.
``query`` and ``stats`` (rlscope_ray.rundb_cli) catch DIR/run.duckdb up with
the steps written since, then read it (docs/run_database.md): a DIR that is
not a run directory this version reads is one line and exit status 1; SQL that
DuckDB refuses, its message and exit status 2.
``diff`` (rlscope_ray.diff) compares the steps' figures (figures.jsonl) of two
runs or two step ranges; a run or range it cannot compare is one line and exit
status 1.
``export hta`` (rlscope_ray.hta_export, pure Python, HTA not needed) writes
DIR/rank_<r>.json per rank of RUN_DIR/step_<N>; a run or step directory that
is missing, or a run.json of an unknown format, is one line and exit status 1.
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional


def _exec_native(args: List[str]) -> int:
    from .collector import aggregator_path

    binary = aggregator_path()
    if not os.access(binary, os.X_OK):
        print(f"rlscope-ray: the aggregator binary is missing at {binary}; reinstall the package "
              "(pip install .)", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(binary, [binary] + args)
    return 2  # not reached


def _report(args: List[str]) -> int:
    import argparse

    from .report import ReportError, write_report

    parser = argparse.ArgumentParser(prog="rlscope-ray report",
                                     description="Write the self-contained HTML report of a run.")
    parser.add_argument("dir", metavar="DIR", help="the aggregator's output directory (holds run.json)")
    parser.add_argument("--out", metavar="FILE", help="where to write the page (default DIR/report.html)")
    ns = parser.parse_args(args)  # exits 2 with usage on bad arguments
    try:
        path = write_report(ns.dir, ns.out)
    except ReportError as e:
        print(f"rlscope-ray report: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"rlscope-ray report: cannot write {e.filename or ns.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _recover(args: List[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="rlscope-ray recover",
                                     description="Take up what a run's processes left on this node's disk at exit.")
    parser.add_argument("dir", metavar="DIR", help="the run's output directory (holds run.json)")
    parser.add_argument("--spool-dir", metavar="SPOOL",
                        help="the spool files' directory (default: the run's, by the key in DIR/run.json)")
    parser.add_argument("--config", metavar="FILE", help="the aggregator's config file, as for the run")
    ns = parser.parse_args(args)
    if not os.path.isfile(os.path.join(ns.dir, "run.json")):
        print(f"rlscope-ray recover: {ns.dir} is not a run directory (no run.json)", file=sys.stderr)
        return 2
    native = ["--recover", "--out", ns.dir]
    if ns.spool_dir:
        native += ["--spool-dir", ns.spool_dir]
    if ns.config:
        native += ["--config", ns.config]
    return _exec_native(native)


def _export(args: List[str]) -> int:
    import argparse

    from .hta_export import HtaExportError, export_hta

    parser = argparse.ArgumentParser(prog="rlscope-ray export",
                                     description="Write a step of a run in another tool's format.")
    parser.add_argument("kind", choices=["hta"], help="hta: per-rank traces for Holistic Trace Analysis")
    parser.add_argument("dir", metavar="RUN_DIR", help="the aggregator's output directory (holds run.json)")
    parser.add_argument("--step", type=int, required=True, metavar="N", help="the step to export")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write rank_<r>.json")
    ns = parser.parse_args(args)  # exits 2 with usage on bad arguments, an unknown kind among them
    try:
        paths, left_out = export_hta(ns.dir, ns.step, ns.out)
    except HtaExportError as e:
        print(f"rlscope-ray export hta: {e}", file=sys.stderr)
        return 1
    for label in left_out:
        print(f"left out (the controller, or no rank): {label}")
    for path in paths:
        print(path)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = __doc__ or ""
    if not argv or argv[0] in ("-h", "--help"):
        print(usage.strip())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "aggregator":
        return _exec_native(rest)
    if cmd == "check":
        if not rest:
            print("usage: rlscope-ray check CONFIG | --keys", file=sys.stderr)
            return 2
        return _exec_native(["check"] + rest)
    if cmd == "paths":
        from .collector import aggregator_path, collector_path

        print(f"collector: {collector_path()}")
        print(f"aggregator: {aggregator_path()}")
        return 0
    if cmd == "report":
        return _report(rest)
    if cmd == "recover":
        return _recover(rest)
    if cmd in ("query", "stats"):
        from . import rundb_cli

        return rundb_cli.query_main(rest) if cmd == "query" else rundb_cli.stats_main(rest)
    if cmd == "export":
        return _export(rest)
    if cmd == "diff":
        from .diff import main as diff_main

        return diff_main(rest)
    if cmd == "calibrate":
        from .ab_calibration import main as calibrate_main

        return calibrate_main(rest)
    print(f"rlscope-ray: unknown command '{cmd}'\n\n{usage.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

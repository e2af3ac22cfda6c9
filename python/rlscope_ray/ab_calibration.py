"""``rlscope-ray calibrate``: an explicit A/B calibration on the user's workload.

Start-up calibration (rlscope_ray.calibration, CostSampling::Calibrate) times
each annotation in a loop of its own, so its cost per event is right for
code like that loop and off for code that hides or amplifies it (caches,
branch predictors, what runs between annotations). This command measures
the real thing instead: it runs COMMAND alternately without the profiler
and under it (ABBA order, so drift hits both alike), times the same steps
in both (``rlscope_ray.step`` appends each step's wall time to
``RLSCOPE_STEP_TIMES``), and compares the inflation with the overhead the
aggregator removes at ``correction.scale: 1``:

    scale = sum over steps of (profiled - uninstrumented)
            / sum over steps of (raw - corrected at scale 1)

medians across runs per step, the first step left out when there are three
or more (it carries one-time start-up costs). Putting ``correction: {scale: S}`` in the
config then makes corrected steps of this workload land on uninstrumented
ones. The command gets its collector from the environment
(RLSCOPE_AGGREGATOR, RLSCOPE_ROLE=controller, NVTX_INJECTION64_PATH), as any
process started by hand does; a driver that calls ``rlscope_ray.init()``
starts its own aggregator and cannot be calibrated this way yet.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set

from . import _native, settings
from .collector import collector_path
from .aggregator_process import AggregatorStartError, start_aggregator

SCALE_MAX = 100.0  # the config's range for correction.scale



def _profiler_setting(key: str) -> bool:
    """An RLSCOPE_* setting the runs replace (where processes leave what an
    aggregator did not take, RLSCOPE_SPOOL_DIR, stays the user's)."""
    return key.startswith("RLSCOPE_") and key != _native.names.ENV_SPOOL_DIR

class CalibrationError(Exception):
    """A run failed or measured nothing usable; the message says which and where."""


@dataclass
class Estimate:
    steps: List[int]
    plain_ms: float  # per step, medians across runs, averaged over steps
    profiled_ms: float
    removed_ms: float  # overhead the aggregator removed at scale 1
    scale: float
    clamped: bool = False
    plain_spread: float = 0.0  # (max - min) / median of the uninstrumented runs' step totals

    @property
    def inflation(self) -> float:
        return self.profiled_ms / self.plain_ms - 1.0

    @property
    def corrected_error_at_scale_1(self) -> float:
        return (self.profiled_ms - self.removed_ms) / self.plain_ms - 1.0


def estimate_scale(plain: Sequence[Dict[int, float]], profiled: Sequence[Dict[int, float]],
                   removed: Sequence[Dict[int, float]]) -> Estimate:
    """The scale that makes corrected steps match uninstrumented ones.

    Each argument has one {step: ms} per run. Steps are those every run has
    (a profile may capture fewer steps than the program runs), but the first
    of three or more.
    """
    runs = list(plain) + list(profiled) + list(removed)
    if not plain or not profiled or len(removed) != len(profiled):
        raise CalibrationError("need at least one uninstrumented and one profiled run")
    common = set(runs[0])
    for r in runs[1:]:
        common &= set(r)
    steps = sorted(common)
    if len(steps) >= 3:
        # The first step carries one-time costs (imports, workers and their
        # collectors starting), which no per-event cost explains.
        steps = steps[1:]
    if not steps:
        raise CalibrationError("no step was both timed in every run and captured in every profile; does the "
                               "command mark steps with rlscope_ray.step(n), and does the config capture them?")

    def per_step(rs: Sequence[Dict[int, float]]) -> float:
        return sum(statistics.median(r[s] for r in rs) for s in steps) / len(steps)

    p, q, rem = per_step(plain), per_step(profiled), per_step(removed)
    if rem <= 0:
        raise CalibrationError("the profiled runs removed no overhead at scale 1: was any event recorded "
                               "(is correction.enabled false, or capture off)?")
    scale = (q - p) / rem
    clamped = not 0.0 <= scale <= SCALE_MAX
    totals = [sum(r[s] for s in steps) for r in plain]
    spread = (max(totals) - min(totals)) / statistics.median(totals) if statistics.median(totals) > 0 else 0.0
    return Estimate(steps=steps, plain_ms=p, profiled_ms=q, removed_ms=rem,
                    scale=min(max(scale, 0.0), SCALE_MAX), clamped=clamped, plain_spread=spread)


@dataclass
class ProfiledRun:
    steps: Dict[int, float]  # wall ms per step, timed by the program
    raw: Dict[int, float] = field(default_factory=dict)  # the profile's step, ms
    corrected: Dict[int, float] = field(default_factory=dict)  # after correction, ms
    uncertainty: Dict[int, float] = field(default_factory=dict)  # the correction's stated uncertainty, ms
    systematic: Dict[int, float] = field(default_factory=dict)  # its stated systematic part, ms
    dominated_by: Dict[int, str] = field(default_factory=dict)  # the uncertainty's largest part
    # Events and capped events per step, all processes (summary overhead).
    events: Dict[int, int] = field(default_factory=dict)
    capped: Dict[int, int] = field(default_factory=dict)
    # The steps any process recorded in (run.json armed_steps, every
    # process's); None where a process's edges did not tell.
    armed: Optional[Set[int]] = None
    summaries: Dict[int, dict] = field(default_factory=dict)  # step -> summary.json, with keep_summaries

    @property
    def removed(self) -> Dict[int, float]:
        return {n: self.raw[n] - self.corrected[n] for n in self.corrected}


@dataclass
class Runner:
    """Runs ``command`` uninstrumented or profiled; logs and profiles go to ``work``."""

    command: List[str]
    work: str
    config: Dict[str, object] = field(default_factory=dict)
    timeout_s: Optional[float] = None
    keep_profiles: bool = False  # else a profile is deleted once its summaries are read
    env: Dict[str, str] = field(default_factory=dict)  # set in profiled runs only (e.g. RLSCOPE_NVTX_FAST_PATH)
    keep_summaries: bool = False  # ProfiledRun.summaries
    _n: int = 0

    def _run(self, env: Dict[str, str], tag: str) -> Dict[int, float]:
        self._n += 1
        times = os.path.join(self.work, f"{self._n:02d}_{tag}.steps")
        log = os.path.join(self.work, f"{self._n:02d}_{tag}.log")
        env = dict(env, RLSCOPE_STEP_TIMES=times)
        if os.path.exists(times):  # a --keep directory used before: the file is appended to
            os.unlink(times)
        with open(log, "w") as out:
            try:
                rc = subprocess.run(self.command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, timeout=self.timeout_s).returncode
            except subprocess.TimeoutExpired:
                raise CalibrationError(f"{tag} run {self._n} did not finish in {self.timeout_s:g} s; "
                                       f"its output is in {log}") from None
            except OSError as e:
                raise CalibrationError(f"cannot run {self.command[0]!r}: {e.strerror}") from None
        if rc != 0:
            raise CalibrationError(f"{tag} run {self._n} exited with status {rc}; its output is in {log}:\n"
                                   + _tail(log))
        steps: Dict[int, float] = {}
        if os.path.exists(times):
            with open(times) as f:
                for number, line in enumerate(f, 1):
                    try:
                        n, ns = line.split()
                        steps[int(n)] = int(ns) / 1e6  # a repeated step number keeps the last
                    except ValueError:
                        raise CalibrationError(f"{times}:{number}: not 'step wall_ns': {line.strip()!r}") from None
        if not steps:
            raise CalibrationError(f"{tag} run {self._n} timed no step: mark the command's training steps "
                                   "with rlscope_ray.step(n)")
        return steps

    def plain(self) -> Dict[int, float]:
        env = {k: v for k, v in os.environ.items()
               if not _profiler_setting(k) and k != "NVTX_INJECTION64_PATH"}
        return self._run(env, "uninstrumented")

    def profiled(self, scale: float = 1.0, require_steps: bool = True) -> ProfiledRun:
        """One run under a fresh aggregator, correcting at ``scale``;
        `require_steps`: a profile with no corrected step is an error."""
        out = os.path.join(self.work, f"profile_{self._n + 1:02d}")
        try:
            cfg = settings.merge([settings.dict_layer(self.config, "the config"),
                                  settings.dict_layer({"correction": {"enabled": True, "scale": scale}}, "calibrate")])
        except settings.RLScopeConfigError as e:
            raise CalibrationError(str(e)) from None
        agg_log = out + ".aggregator.log"
        shutil.rmtree(out, ignore_errors=True)  # a --keep directory used before
        # At the lowest priority: on a small machine the aggregator's trace
        # writing otherwise competes with the command and makes the profiled
        # runs' step times vary by several percent (they vary by about 1 %).
        # No run database: these profiles are thrown away, and its ingest
        # would take CPU from the profiled runs only.
        try:
            agg = start_aggregator(out, config=cfg, args=["--exit-when-done", "--exit-with-parent"], log=agg_log,
                                   nice=True, work_dir=self.work, database=False)
        except AggregatorStartError as e:
            raise CalibrationError(str(e)) from None
        try:
            env = {k: v for k, v in os.environ.items() if not _profiler_setting(k)}
            env.update({settings.AGGREGATOR: agg.endpoint, settings.ROLE: _native.names.CONTROLLER,
                        settings.CONFIG: json.dumps(cfg), "NVTX_INJECTION64_PATH": collector_path()})
            env.update(self.env)
            steps = self._run(env, "profiled")
            try:
                agg.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise CalibrationError(f"the aggregator did not finish within 120 s; its log is {agg_log}") from None
        finally:
            agg.stop(term_timeout=0)  # killed if still running
        run = ProfiledRun(steps)
        for name in os.listdir(out) if os.path.isdir(out) else []:
            if not name.startswith("step_"):
                continue
            try:
                with open(os.path.join(out, name, "summary.json")) as f:
                    summary = json.load(f)
            except (OSError, ValueError):
                continue
            if self.keep_summaries:
                run.summaries[int(summary["step"])] = summary
            corr_s = summary.get("correction") or {}
            if "duration_ms" in corr_s:
                run.raw[int(summary["step"])] = summary["duration_ms"]
                run.corrected[int(summary["step"])] = corr_s["duration_ms"]
                run.uncertainty[int(summary["step"])] = corr_s.get("uncertainty_ms", 0.0)
                run.systematic[int(summary["step"])] = corr_s.get("systematic_ms", 0.0)
                run.dominated_by[int(summary["step"])] = corr_s.get("uncertainty_dominated_by", "")
                overheads = [p.get("overhead") or {} for p in summary.get("processes", [])]
                run.events[int(summary["step"])] = sum(o.get("events", 0) for o in overheads)
                run.capped[int(summary["step"])] = sum(o.get("capped_events", 0) for o in overheads)
            dropped = sum(p.get("dropped_total", 0) for p in summary.get("processes", []))
            if dropped:
                print(f"rlscope-ray calibrate: warning: step {summary['step']} dropped {dropped} events; "
                      "the removed overhead is too low. Raise buffers.per_thread_kb in the config.",
                      file=sys.stderr)
        run.armed = read_armed_steps(out)
        if require_steps and not run.corrected:
            raise CalibrationError(f"the profile in {out} has no corrected step; the aggregator's log is "
                                   f"{agg_log}:\n" + _tail(agg_log))
        if not self.keep_profiles:
            shutil.rmtree(out, ignore_errors=True)  # dense traces run to gigabytes over a few runs
        return run


def read_armed_steps(out: str) -> Optional[Set[int]]:
    """The steps any process of the run in `out` recorded in (the final
    run.json's processes[].armed_steps); None where one of them does not say."""
    from .in_run import parse_selection

    try:
        with open(os.path.join(out, "run.json")) as f:
            run = json.load(f)
    except (OSError, ValueError):
        return None
    armed: Set[int] = set()
    for p in run.get("processes", []):
        if not p.get("selected", True):
            continue
        if "armed_steps" not in p:
            return None
        armed |= parse_selection(p["armed_steps"])
    return armed


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def calibrate(command: List[str], runs: int = 3, config: Optional[Dict[str, object]] = None,
              timeout_s: Optional[float] = None, keep: Optional[str] = None) -> Estimate:
    """Run ``command`` ``runs`` times each way (ABBA) and estimate the scale.

    keep: a directory to keep the runs' logs and profiles in (default: a
    temporary one, removed afterwards unless a run failed).
    """
    if runs < 1:
        raise CalibrationError("--runs must be at least 1")
    work = keep or tempfile.mkdtemp(prefix="rlscope_calibrate_")
    os.makedirs(work, exist_ok=True)
    runner = Runner(list(command), work, dict(config or {}), timeout_s, keep_profiles=keep is not None)
    plain: List[Dict[int, float]] = []
    profiled: List[Dict[int, float]] = []
    removed: List[Dict[int, float]] = []
    ok = False
    try:
        for i in range(runs):
            for kind in (("plain", "profiled") if i % 2 == 0 else ("profiled", "plain")):
                if kind == "plain":
                    plain.append(runner.plain())
                else:
                    run = runner.profiled()
                    profiled.append(run.steps)
                    removed.append(run.removed)
        est = estimate_scale(plain, profiled, removed)
        ok = True
        return est
    finally:
        if ok and keep is None:
            shutil.rmtree(work, ignore_errors=True)
        elif not ok:
            print(f"rlscope-ray calibrate: the runs' logs are kept in {work}", file=sys.stderr)


def format_estimate(est: Estimate, runs: int) -> str:
    s = est.steps
    span = f"step {s[0]}" if len(s) == 1 else f"steps {s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) \
        else "steps " + ",".join(map(str, s))
    lines = [
        f"{runs} uninstrumented and {runs} profiled runs, {span}; per step, median of runs:",
        f"  uninstrumented            {est.plain_ms:10.2f} ms   (runs differ by {100 * est.plain_spread:.1f} %)",
        f"  profiled, raw             {est.profiled_ms:10.2f} ms   {100 * est.inflation:+.1f} %",
        f"  overhead removed, scale 1 {est.removed_ms:10.2f} ms",
        f"  corrected, scale 1        {est.profiled_ms - est.removed_ms:10.2f} ms   "
        f"{100 * est.corrected_error_at_scale_1:+.1f} %",
        f"correction.scale: {est.scale:.3f}" + ("   (clamped to the config's range 0-100)" if est.clamped else ""),
        f"  put in the config:  correction: {{scale: {est.scale:.3f}}}",
    ]
    return "\n".join(lines)


def main(args: List[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="rlscope-ray calibrate",
        description="Run COMMAND with and without the profiler and print the correction.scale that makes "
                    "corrected step times match uninstrumented ones.")
    parser.add_argument("--runs", type=int, default=3, help="runs each way (default 3)")
    parser.add_argument("--config", metavar="FILE", help="the profile's config (correction.scale is set to 1)")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds one run may take")
    parser.add_argument("--keep", metavar="DIR", help="keep the runs' logs and profiles in DIR")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON to FILE")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    ns = parser.parse_args(args)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("give the command to run after --, e.g. rlscope-ray calibrate -- python train.py")
    try:
        config = settings.load_config_file(ns.config) if ns.config else {}
        est = calibrate(command, ns.runs, config, ns.timeout, ns.keep)
    except (CalibrationError, settings.RLScopeConfigError) as e:
        print(f"rlscope-ray calibrate: {e}", file=sys.stderr)
        return 2
    print(format_estimate(est, ns.runs))
    if ns.json:
        try:
            f = open(ns.json, "w")
        except OSError as e:
            print(f"rlscope-ray calibrate: cannot write {ns.json}: {e.strerror or e}", file=sys.stderr)
            return 2
        with f:
            json.dump({"runs": ns.runs, "steps": est.steps, "uninstrumented_ms": est.plain_ms,
                       "profiled_ms": est.profiled_ms, "removed_at_scale_1_ms": est.removed_ms,
                       "inflation": est.inflation, "corrected_error_at_scale_1": est.corrected_error_at_scale_1,
                       "uninstrumented_spread": est.plain_spread, "scale": est.scale, "clamped": est.clamped},
                      f, indent=1)
    return 0

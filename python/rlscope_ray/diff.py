"""``rlscope-ray diff``: what changed between two runs, or two step ranges of one.

    rlscope-ray diff RUN_A RUN_B [--a-steps 10-60] [--b-steps 10-60]
    rlscope-ray diff RUN --a-steps 10-60 --b-steps 200-250
        [--alpha 0.01] [--min-change 0.02] [--json] [--report]

Each step's figures (figures.jsonl, docs/always_on.md; a run written without
it: its steps' summary.json) are the samples. For every process's busy time in
every sub-task (by sub-task, role and rank: the breakdown's
cpu_only + gpu_only + cpu_gpu), for the controller's time in every sub-task
and for the step's time, A's steps are compared with B's by a Mann-Whitney rank
test (its z score, ties corrected: the steps' own spread is the noise), and
the change is the difference of their medians. A change is reported when it is beyond noise:

- |z| above the two-sided normal quantile of alpha / K (Bonferroni over the K
  comparisons made): with steps that vary independently, the chance that a
  diff reports any change where there is none is at most alpha (1 %);
- and at least min-change (2 %) of A's median and 0.05 ms: a real but
  negligible drift over thousands of steps is not a change.

Steps of one run are not independent when the run drifts (caches warm, memory
fragments): the stated rate holds for steps that vary around a level, and the
bench measures it on real runs (A/A: two halves of one run).

A common pace comes first: when the compared times' median ratio (B over
A) is min-change or more from 1, every sub-task moved alike (a busier or
slower machine, a version that slows everything), and the diff says so; then
each time is tested against A's with B's divided by that pace, and only what
moved beyond noise both as it is and beyond that pace, the same way, is a
change (two runs of one program on a shared machine often differ by 5-10 %
in everything, which a test on the steps' own spread calls beyond noise in
every sub-task).

Changes are ranked by size. Each process change says where it went: the
attribution categories (python, backend, cuda_api, simulator, other, profiler,
GPU, idle) and off-CPU reasons whose medians moved most in that sub-task, and
the ranges and kernels of that process whose time moved most, each only when
it moved the same way by a quarter of the change or more (a range or kernel,
counted over the process's whole step, also by no more than a quarter beyond
it). Memory that grows step over step in B (a least-squares slope, |t| > 4,
by at least --memory-mb over the range) is flagged with its rate.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import figures

MIN_ABS_MS = 0.05
DIFF_FILE = "diff.json"  # beside run B's run.json, for its report (--report)

# What a breakdown row's attribution says, and the names it goes by here.
CATEGORIES = ("python_ms", "backend_ms", "cuda_api_ms", "simulator_ms", "other_ms", "profiler_ms", "gpu_ms",
              "idle_ms")


class DiffError(Exception):
    """A run or a step range that cannot be compared; the message is one line."""


# ---- Reading steps.

def parse_range(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """'10-60' -> (10, 60); '7' -> (7, 7); None -> None."""
    if not text:
        return None
    try:
        lo, _, hi = text.partition("-")
        lo_n, hi_n = int(lo), int(hi or lo)
    except ValueError:
        raise DiffError(f"step range {text!r}: expected N or N-M") from None
    if hi_n < lo_n:
        raise DiffError(f"step range {text!r} is empty (start {lo_n} > end {hi_n})")
    return lo_n, hi_n


def read_steps(run_dir: str) -> Dict[int, Dict[str, Any]]:
    """Every step's figures: figures.jsonl's lines, else (a run written
    before it) each step_<N>/summary.json in figures' terms."""
    if not os.path.isfile(os.path.join(run_dir, "run.json")):
        raise DiffError(f"{run_dir} is not a run directory (no run.json)")
    figs = figures.load(run_dir)
    if figs:
        return figs
    out = {}
    for name in os.listdir(run_dir):
        if name.startswith("step_") and name[5:].isdigit():
            try:
                with open(os.path.join(run_dir, name, "summary.json")) as f:
                    s = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(s, dict) and isinstance(s.get("step"), int):
                out[s["step"]] = _summary_as_figures(s)
    return out


def _summary_as_figures(s: Dict[str, Any]) -> Dict[str, Any]:
    """A summary.json in figures.jsonl's shape (the keys diff reads)."""
    procs = s.get("processes") or []
    index = {p.get("session"): i for i, p in enumerate(procs)}
    cols = ["subtask", "occurrences", "process", "window_ms", "cpu_only_ms", "gpu_only_ms", "cpu_gpu_ms", "idle_ms",
            "overhead_ms", "attribution"]
    rows = [[b.get("subtask"), b.get("occurrences"), index.get(b.get("session"), -1)] + [b.get(c) for c in cols[3:]]
            for b in s.get("breakdown") or []]
    return {"step": s["step"], "detail": "full", "duration_ms": s.get("duration_ms"), "reason": s.get("reason"),
            "correction": s.get("correction") or {}, "processes": procs,
            "subtasks": {"columns": cols, "rows": rows}}


def select(steps: Dict[int, Dict[str, Any]], span: Optional[Tuple[int, int]], skip: int) -> List[Dict[str, Any]]:
    """The steps in `span` (all when None) in order, less the first `skip`
    of the run (warm-up) when no span is given; only complete steps."""
    ordered = [steps[n] for n in sorted(steps)]
    if span is None:
        ordered = ordered[skip:]
    else:
        ordered = [f for f in ordered if span[0] <= f["step"] <= span[1]]
    return [f for f in ordered if f.get("reason", "complete") in ("complete", "clock_unaligned")]


def warmup_of(run_dir: str) -> int:
    """The run's always_on.warmup_steps (0 when it was not always on)."""
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            run = json.load(f)
        from . import settings

        config = settings.merge([(str(run.get("config_yaml") or ""), "run.json config_yaml", False)])
    except Exception:
        return 0
    ao = config.get("always_on") or {}
    return int(ao.get("warmup_steps") or 0) if ao.get("enabled") else 0


# ---- What is compared.

def _who(row: Dict[str, Any]) -> str:
    if row.get("role") == "controller":
        return "controller"
    return f"rank {row['rank']}" if row.get("rank") is not None else str(row.get("role") or "process")


def samples(steps: List[Dict[str, Any]]) -> Dict[Tuple[str, str, str], List[float]]:
    """Per compared quantity, its value in each step (0 where a step lacks it):
    ("step", "", "step time"); ("busy", subtask, who); ("window", subtask, "controller")."""
    per_step: List[Dict[Tuple[str, str, str], float]] = []
    for f in steps:
        values: Dict[Tuple[str, str, str], float] = defaultdict(float)
        values[("step", "", "step time")] = figures.step_ms(f)
        for row in figures.subtasks(f):
            if row.get("subtask") == "step":
                continue  # the whole step's row: its time is the step's
            who = _who(row)
            if row.get("role") == "controller":
                values[("window", row["subtask"], who)] += float(row.get("window_ms") or 0.0)
            else:
                values[("busy", row["subtask"], who)] += sum(
                    float(row.get(k) or 0.0) for k in ("cpu_only_ms", "gpu_only_ms", "cpu_gpu_ms"))
        per_step.append(values)
    keys = set().union(*per_step) if per_step else set()
    return {k: [v.get(k, 0.0) for v in per_step] for k in keys}


def mann_whitney_z(xa: Sequence[float], xb: Sequence[float]) -> float:
    """The Mann-Whitney U statistic of B against A as a z score (normal
    approximation, ties corrected): positive when B's values tend to be
    larger. Rank-based: an outlier step moves it by one rank, and a handful
    of steps can never reach a Bonferroni threshold (4 against 5 steps: |z|
    at most 2.45)."""
    n1, n2 = len(xa), len(xb)
    pooled = sorted([(x, 0) for x in xa] + [(x, 1) for x in xb])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    r2 = sum(r for r, (_, side) in zip(ranks, pooled) if side == 1)
    u2 = r2 - n2 * (n2 + 1) / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    return (u2 - n1 * n2 / 2) / math.sqrt(var) if var > 0 else 0.0


def _attribution(steps: List[Dict[str, Any]], subtask: str, who: str) -> Dict[str, List[float]]:
    """Per category (and off_cpu:<reason>), the row's value in each step."""
    out: Dict[str, List[float]] = defaultdict(list)
    for i, f in enumerate(steps):
        seen: Dict[str, float] = defaultdict(float)
        for row in figures.subtasks(f):
            if row.get("subtask") != subtask or _who(row) != who:
                continue
            att = row.get("attribution") or {}
            for c in CATEGORIES:
                seen[c[:-3]] += float(att.get(c) or 0.0)
            for reason, ms in (att.get("off_cpu_ms") or {}).items():
                seen[f"off-CPU {reason}"] += float(ms or 0.0)
        for k in set(out) | set(seen):
            out[k].extend([0.0] * (i - len(out[k])))
            out[k].append(seen.get(k, 0.0))
    for k in out:
        out[k].extend([0.0] * (len(steps) - len(out[k])))
    return out


def _top_ms(steps: List[Dict[str, Any]], who: str, key: str) -> Dict[str, List[float]]:
    """Per range (key "ranges") or kernel ("kernels") name of the process, its time in each step."""
    out: Dict[str, List[float]] = defaultdict(lambda: [0.0] * len(steps))
    for i, f in enumerate(steps):
        for p in f.get("processes") or []:
            if _who(p) != who:
                continue
            for name, ms, _count in p.get(key) or []:
                out[name][i] += float(ms)
    return out


def _moved(a: Dict[str, List[float]], b: Dict[str, List[float]], limit: int, prefix: str = "") -> List[Dict[str, Any]]:
    """The names whose median moved most, most first."""
    moved = []
    for name in set(a) | set(b):
        ma = statistics.median(a.get(name) or [0.0])
        mb = statistics.median(b.get(name) or [0.0])
        if abs(mb - ma) >= MIN_ABS_MS:
            moved.append({"name": prefix + name, "a_ms": ma, "b_ms": mb, "change_ms": mb - ma})
    moved.sort(key=lambda m: -abs(m["change_ms"]))
    return moved[:limit]


def memory_growth(steps: List[Dict[str, Any]], min_mb: float) -> List[Dict[str, Any]]:
    """Processes whose resident memory at step end grows step over step:
    a least-squares slope with |t| > 4 whose growth over the steps is at
    least min_mb."""
    series: Dict[str, List[Tuple[int, float]]] = defaultdict(list)
    for f in steps:
        for p in f.get("processes") or []:
            mem = p.get("memory") or {}
            if mem.get("rss_end_mb") is not None:
                series[_who(p)].append((f["step"], float(mem["rss_end_mb"])))
    out = []
    for who, pts in sorted(series.items()):
        n = len(pts)
        if n < 5:
            continue
        xs, ys = [float(x) for x, _ in pts], [y for _, y in pts]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx == 0:
            continue
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys)]
        se = math.sqrt(sum(r * r for r in resid) / (n - 2) / sxx) if n > 2 else 0.0
        growth = slope * (xs[-1] - xs[0])
        t = slope / se if se > 0 else math.inf
        if slope > 0 and t > 4 and growth >= min_mb:
            out.append({"who": who, "mb_per_step": slope, "growth_mb": growth, "first_step": pts[0][0],
                        "last_step": pts[-1][0]})
    return out


def compare(a_steps: List[Dict[str, Any]], b_steps: List[Dict[str, Any]], alpha: float = 0.01,
            min_change: float = 0.02, memory_mb: float = 64.0) -> Dict[str, Any]:
    """The diff of two lists of steps' figures (A before, B after)."""
    if len(a_steps) < 3 or len(b_steps) < 3:
        raise DiffError(f"too few steps to compare ({len(a_steps)} in A, {len(b_steps)} in B; at least 3 each)")
    sa, sb = samples(a_steps), samples(b_steps)
    keys = sorted(set(sa) | set(sb))
    z_crit = statistics.NormalDist().inv_cdf(1 - alpha / (2 * max(1, len(keys))))

    def beyond(z: float, change: float, ma: float) -> bool:
        return abs(z) > z_crit and abs(change) >= max(MIN_ABS_MS, min_change * abs(ma))

    xs = {k: (sa.get(k) or [0.0] * len(a_steps), sb.get(k) or [0.0] * len(b_steps)) for k in keys}
    pace = common_pace(xs, min_change)
    rows = []
    for k in keys:
        xa, xb = xs[k]
        ma, mb = statistics.median(xa), statistics.median(xb)
        change = mb - ma
        z = mann_whitney_z(xa, xb)
        row = {"kind": k[0], "subtask": k[1], "who": k[2], "a_ms": ma, "b_ms": mb, "change_ms": change,
               "change_pct": 100.0 * change / ma if ma else None, "z": z, "beyond_noise": beyond(z, change, ma)}
        # Beyond the common pace: B's times divided by it, against A's.
        row["pace_change_ms"] = mb / pace - ma
        row["pace_z"] = z if pace == 1.0 else mann_whitney_z(xa, [x / pace for x in xb])
        # Beyond noise both ways: a time the pace left alone is no change
        # for being off the pace (a worker's CPU time where a busier machine
        # slowed the controller's waits).
        # (and the same way: a time that rose less than the pace did is no
        # fall).
        row["beyond_pace"] = (row["beyond_noise"] and beyond(row["pace_z"], row["pace_change_ms"], ma)
                              and change * row["pace_change_ms"] > 0)
        rows.append(row)
    changes = sorted((r for r in rows if r["beyond_pace"] and r["kind"] != "step"),
                     key=lambda r: (r["kind"] != "busy", -abs(r["pace_change_ms"])))
    for r in changes:
        if r["kind"] != "busy":
            continue
        att_a, att_b = _attribution(a_steps, r["subtask"], r["who"]), _attribution(b_steps, r["subtask"], r["who"])
        # Where it went: what moved the same way, by a quarter of the change
        # or more (a category is sampled: at always_on.sampling_hz's 50 one
        # sample is 20 ms, and a smaller move the other way is its noise).
        # A process's ranges and kernels are its whole step's (a figures
        # line does not split them by sub-task): one that moved more than a
        # quarter beyond this change moved elsewhere too, and is not named
        # as where this one went.
        def along(moved, whole_step=False):
            return [m for m in moved if m["change_ms"] * r["change_ms"] > 0
                    and abs(m["change_ms"]) >= 0.25 * abs(r["change_ms"])
                    and (not whole_step or abs(m["change_ms"]) <= 1.25 * abs(r["change_ms"]))][:3]

        r["categories"] = along(_moved(att_a, att_b, 8))
        r["ranges"] = along(_moved(_top_ms(a_steps, r["who"], "ranges"), _top_ms(b_steps, r["who"], "ranges"), 8),
                            True)
        r["kernels"] = along(_moved(_top_ms(a_steps, r["who"], "kernels"), _top_ms(b_steps, r["who"], "kernels"), 8),
                             True)
    step = next((r for r in rows if r["kind"] == "step"), None)
    others = [r for r in rows if r["kind"] != "step"]
    return {
        "a_steps": [f["step"] for f in a_steps], "b_steps": [f["step"] for f in b_steps],
        "comparisons": len(keys), "alpha": alpha, "z_crit": z_crit, "min_change": min_change,
        "step": step, "changes": changes,
        # B's times over A's, every sub-task alike (1.0: none); how many of
        # the compared times it moved beyond noise, and of how many.
        "pace": {"ratio": pace, "with_it": sum(1 for r in others if r["beyond_noise"] and not r["beyond_pace"]),
                 "compared": len(others)},
        "memory_growth": memory_growth(b_steps, memory_mb),
    }


# A compared time enters the common pace when its median in A is this long
# or longer (a ratio of near-zero times says nothing).
PACE_MIN_MS = 0.5


def common_pace(xs: Dict[Tuple[str, str, str], Tuple[List[float], List[float]]], min_change: float) -> float:
    """B's times over A's where every sub-task moved alike: the median of
    the compared times' ratios of medians (the step's own aside), when at
    least 5 enter it and it is min_change or more from 1; else 1.0. A
    busier or slower machine, or a version that slows every sub-task,
    moves them all by it; what moved beyond it is what changed."""
    ratios = []
    for k, (xa, xb) in xs.items():
        ma, mb = statistics.median(xa), statistics.median(xb)
        if k[0] != "step" and ma >= PACE_MIN_MS and mb > 0:
            ratios.append(mb / ma)
    if len(ratios) < 5:
        return 1.0
    pace = statistics.median(ratios)
    return pace if abs(pace - 1.0) >= min_change else 1.0


# ---- Output.

def _span(steps: List[int]) -> str:
    return f"{steps[0]}-{steps[-1]} ({len(steps)} steps)" if steps else "none"


def render_text(d: Dict[str, Any], a_name: str, b_name: str) -> str:
    lines = [f"A: {a_name} steps {_span(d['a_steps'])}", f"B: {b_name} steps {_span(d['b_steps'])}"]
    s = d["step"]
    if s:
        pct = f", {s['change_pct']:+.1f} %" if s["change_pct"] is not None else ""
        lines.append(f"step time (median): {s['a_ms']:.2f} ms -> {s['b_ms']:.2f} ms ({s['change_ms']:+.2f} ms{pct}), "
                     + ("beyond noise" if s["beyond_noise"] else "within noise") + f" (z {s['z']:+.1f})")
    pace = d.get("pace") or {"ratio": 1.0}
    paced = pace["ratio"] != 1.0
    if paced:
        lines.append(f"common pace: B's times are {pace['ratio']:.3f} x A's, every sub-task alike (the median ratio of "
                     f"the {pace['compared']} compared times; {pace['with_it']} moved with it beyond noise): a busier "
                     f"or slower machine, or a change that slows everything; below, what moved beyond it")
    lines.append(f"changes beyond {'the pace and ' if paced else ''}noise, by size: |z| > {d['z_crit']:.2f} "
                 f"(false-positive rate {100 * d['alpha']:g} % over {d['comparisons']} comparisons, Bonferroni) and "
                 f"at least {100 * d['min_change']:g} % and {MIN_ABS_MS} ms")
    if not d["changes"]:
        lines.append("  none")
    for i, r in enumerate(d["changes"], 1):
        what = (f"{r['subtask']} {r['who']} busy" if r["kind"] == "busy" else f"{r['subtask']} (controller's time)")
        pct = f" {r['change_pct']:+.0f} %" if r["change_pct"] is not None else " new"
        beyond_pace = f"  ({r['pace_change_ms']:+.2f} ms beyond the pace, z {r['pace_z']:+.1f})" if paced else ""
        lines.append(f"  {i:2d}. {what:34s} {r['a_ms']:9.2f} -> {r['b_ms']:9.2f} ms  {r['change_ms']:+9.2f} ms{pct:>7s}"
                     f"  z {r['z']:+.1f}{beyond_pace}")
        where = []
        for label, key in (("in", "categories"), ("ranges", "ranges"), ("kernels", "kernels")):
            moved = r.get(key) or []
            if moved:
                where.append(f"{label} " + ", ".join(f"{m['name']} {m['change_ms']:+.2f} ms" for m in moved))
        if where:
            lines.append("      where: " + "; ".join(where))
    for m in d["memory_growth"]:
        lines.append(f"memory: {m['who']}: resident memory grows {m['mb_per_step']:.2f} MB a step over steps "
                     f"{m['first_step']}-{m['last_step']} (+{m['growth_mb']:.0f} MB)")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="rlscope-ray diff", description="What changed between two runs, or two step "
                                "ranges of one, beyond the steps' own noise.")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B", nargs="?", help="default: RUN_A (then give both step ranges)")
    p.add_argument("--a-steps", help="A's steps, N-M (default: all but the warm-up)")
    p.add_argument("--b-steps", help="B's steps, N-M (default: all but the warm-up)")
    p.add_argument("--alpha", type=float, default=0.01, help="false-positive rate of the whole diff (default 0.01)")
    p.add_argument("--min-change", type=float, default=0.02,
                   help="smallest change reported, a fraction of A's median (default 0.02)")
    p.add_argument("--memory-mb", type=float, default=64.0,
                   help="memory growth over B's steps below this is not flagged (default 64)")
    p.add_argument("--json", action="store_true", help="the diff as JSON")
    p.add_argument("--report", action="store_true",
                   help=f"keep it as RUN_B/{DIFF_FILE} and write RUN_B's report with it (a 'What changed' section)")
    ns = p.parse_args(argv)
    run_b = ns.run_b or ns.run_a
    try:
        if ns.run_b is None and not (ns.a_steps and ns.b_steps):
            raise DiffError("one run: give both --a-steps and --b-steps")
        a_all, b_all = read_steps(ns.run_a), read_steps(run_b)
        a = select(a_all, parse_range(ns.a_steps), warmup_of(ns.run_a))
        b = select(b_all, parse_range(ns.b_steps), warmup_of(run_b))
        d = compare(a, b, ns.alpha, ns.min_change, ns.memory_mb)
    except DiffError as e:
        print(f"rlscope-ray diff: {e}", file=sys.stderr)
        return 1
    d["a_run"], d["b_run"] = os.path.abspath(ns.run_a), os.path.abspath(run_b)
    print(json.dumps(d, indent=1) if ns.json else render_text(d, ns.run_a, run_b))
    if ns.report:
        with open(os.path.join(run_b, DIFF_FILE), "w") as f:
            json.dump(d, f)
        from .report import write_report

        print(write_report(run_b), file=sys.stderr)
    return 0


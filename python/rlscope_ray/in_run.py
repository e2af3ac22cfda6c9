"""In-run accuracy: a profiled run's corrected steps against steps of the same
run, in the same process, that ran without the profiler's entry points.

Separate runs of one program differ here by more than the 3 % the correction
is held to (a process's memory layout alone moved one in three by up to
1.8x), so the reference must come from inside the run. A run planned by
`plan()` has a period of PERIOD steps:

    position 0  selected: recorded and corrected
             1  after it: disarmed, but the flush thread's work for the
                selected step can land here (the spill)
             2  untooled (rlscope_ray.nvtx_fast.untooled(): the `nvtx`
                package's own code as with no tool attached, and
                rlscope_ray.range as with no collector): a reference
             3  disarmed, our entry points in place: the disarmed path's cost
             4  untooled: a reference
             5+ (a longer period) disarmed at odd positions, untooled at even

Which steps anything recorded in is not assumed from the plan: run.json's
`armed_steps` (every process's, from its arming edges) says. Workers arm
from the step before a selected one, so on a Ray job position 4 is armed
and a selected step's reference on its left is position 2 of the period
before. A step is clean when nothing recorded in it or in the step before
it (the spill). Each selected step's reference is the mean of the nearest
clean untooled step on each side (drift between them cancels); a step
without one on both sides is not checked.

The same estimator on a run without the profiler (`analyse(..., plain)`,
the program's own step times in place of corrected ones) gives the noise
floor: the A/A spread. A stated uncertainty (one standard deviation) covers
a step's error when |corrected - reference| <= 2 sqrt(u^2 + (A/A spread x
reference)^2): the reference has its own noise.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

PERIOD = 5


@dataclass(frozen=True)
class Plan:
    steps: int
    period: int
    selected: Tuple[int, ...]
    untooled: Tuple[int, ...]


def plan(steps: int, period: int = PERIOD) -> Plan:
    """Selected steps at multiples of `period` (the first period is warm-up:
    step 1 carries start-up), untooled ones at the even positions from 2,
    disarmed ones at the odd. A longer period leaves Ray jobs, whose workers
    arm a step ahead and disarm a little late, clean steps on each side."""
    if period < 5:
        raise ValueError("the period needs 5 positions (module docstring)")
    selected = tuple(n for n in range(period, steps + 1, period))
    untooled = tuple(n for n in range(2, steps + 1) if n % period >= 2 and n % period % 2 == 0)
    return Plan(steps, period, selected, untooled)


def parse_selection(text: str) -> Set[int]:
    """run.json's armed_steps ("4, 7-8"; "" none) as a set."""
    out: Set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def clean_steps(times: Dict[int, float], armed: Set[int], warmup: int) -> Set[int]:
    """Steps past `warmup` in which nothing recorded, nor in the step before."""
    return {n for n in times if n > warmup and n not in armed and n - 1 not in armed}


def reference(n: int, candidates: Set[int], times: Dict[int, float],
              reach: int = 2 * PERIOD) -> Optional[Tuple[int, int, float]]:
    """The nearest candidate below and above `n` (each within `reach`: two
    periods) and the mean of their times; None without one on each side."""
    below = [m for m in candidates if n - reach <= m < n]
    above = [m for m in candidates if n < m <= n + reach]
    if not below or not above:
        return None
    lo, hi = max(below), min(above)
    return lo, hi, (times[lo] + times[hi]) / 2


@dataclass
class Check:
    """One selected step against its reference."""
    step: int
    ref_steps: Tuple[int, int]
    ref_ms: float
    value_ms: float  # corrected (profiled run) or the program's own time (plain run)
    raw_ms: Optional[float] = None
    uncertainty_ms: Optional[float] = None

    @property
    def error(self) -> float:
        return self.value_ms / self.ref_ms - 1

    @property
    def raw_error(self) -> Optional[float]:
        return None if self.raw_ms is None else self.raw_ms / self.ref_ms - 1


@dataclass
class Analysis:
    checks: List[Check] = field(default_factory=list)
    disarmed: List[float] = field(default_factory=list)  # tooled, disarmed, clean steps against the untooled
    spill: List[float] = field(default_factory=list)  # the step after a selected one against clean tooled steps
    armed: Set[int] = field(default_factory=set)

    def errors(self) -> List[float]:
        return [c.error for c in self.checks]


def analyse(times: Dict[int, float], p: Plan, armed: Iterable[int], corrected: Optional[Dict[int, float]] = None,
            raw: Optional[Dict[int, float]] = None, uncertainty: Optional[Dict[int, float]] = None) -> Analysis:
    """`times`: the program's own step times (ms, RLSCOPE_STEP_TIMES);
    `armed`: the steps anything recorded in (run.json armed_steps, every
    process); `corrected`/`raw`/`uncertainty`: the profile's per selected
    step (ms). Without `corrected` (a plain run), each selected step's own
    time is checked: the A/A estimator."""
    armed = set(armed)
    clean = clean_steps(times, armed, warmup=p.period - 1)
    untooled = set(p.untooled)
    selected = set(p.selected)
    refs = clean & untooled
    tooled = clean - untooled - selected
    out = Analysis(armed=armed)
    for n in p.selected:
        value = (times if corrected is None else corrected).get(n)
        ref = reference(n, refs, times, 2 * p.period)
        if value is None or ref is None:
            continue
        out.checks.append(Check(n, (ref[0], ref[1]), ref[2], value, (raw or {}).get(n),
                                (uncertainty or {}).get(n)))
    for n in sorted(tooled):
        ref = reference(n, refs, times, 2 * p.period)
        if ref is not None:
            out.disarmed.append(times[n] / ref[2] - 1)
    for n in p.selected:
        after = n + 1
        if after in times and after not in selected and after not in armed and after not in untooled:
            ref = reference(after, tooled - {after}, times, 2 * p.period)
            if ref is not None:
                out.spill.append(times[after] / ref[2] - 1)
    return out


def quartiles(values: Sequence[float]) -> Tuple[float, float, float]:
    if len(values) < 2:
        v = values[0] if values else math.nan
        return v, v, v
    q = statistics.quantiles(sorted(values), n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def robust_sd(values: Sequence[float]) -> float:
    """The standard deviation a normal spread with these quartiles has."""
    q1, _, q3 = quartiles(values)
    return (q3 - q1) / 1.349


def median_spread(values: Sequence[float]) -> float:
    """The standard error of the median of `values`."""
    return 1.2533 * robust_sd(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan


def covering_spread(values: Sequence[float], share: float = 0.9) -> float:
    """The spread s at which `share` of `values` lie within 2 s of 0: half
    their |value|'s `share` quantile. On an A/A run's errors, the reference
    noise a stated uncertainty must be added to for a perfect correction, one
    that states 0, to cover `share` of its steps. Steps here have heavy
    tails (a slow stretch of the machine lands in a step or in one of its
    references): at 2 robust_sd (the quartiles' spread) one A/A covered 76 %
    of its own steps."""
    if not 0.01 <= share <= 0.99 or abs(100 * share - round(100 * share)) > 1e-9:
        raise ValueError(f"share {share}: a whole percent from 0.01 to 0.99")
    if not values:
        return math.nan
    ranked = sorted(abs(v) for v in values)
    if len(ranked) == 1:
        return ranked[0] / 2
    return statistics.quantiles(ranked, n=100, method="inclusive")[round(100 * share) - 1] / 2


def coverage(checks: Sequence[Check], aa_sd: float) -> Optional[float]:
    """The share of checks whose error the stated uncertainty covers, the
    reference's own noise (`aa_sd`, a share of the step) added in quadrature,
    at two standard deviations; None without stated uncertainties."""
    judged = [c for c in checks if c.uncertainty_ms is not None]
    if not judged:
        return None
    covered = sum(abs(c.value_ms - c.ref_ms) <= 2 * math.hypot(c.uncertainty_ms, aa_sd * c.ref_ms)
                  for c in judged)
    return covered / len(judged)

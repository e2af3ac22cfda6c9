"""Caller-side overhead calibration, measured in this Python process.

The collector calibrates its own cost per recorded event at start-up (C++,
``CostSampling::Calibrate``) and measures it in place while it runs. In
Python the larger part of an annotation's cost is on the caller's side: the
``nvtx`` package does nothing when no tool is attached (its domain is a
dummy), but builds event attributes on every call once one is, about
0.5-1 us per range, several times the recording itself; rlscope's own entry
points for the package's functions (nvtx_fast.py) leave tens of ns of it.
That time exists only because the profiler is there, so overhead correction
must remove it too (RL-Scope's "Python annotation" overhead).

``calibrate_python()`` measures it the way it is paid, per entry point:
each one's whole pair, real against the package's own code as it runs with
no tool attached (nvtx_fast.untooled_functions: its functions over a domain
lookup that gives the dummy domain), in the form code writes it (loops of
(open, a small Python function call, close) calls; a `with` statement for
annotate and rlscope_ray.range), split between the two sides as each side
measured alone splits it (_side_costs). Each figure is the median of rounds
that each measure the real and the untooled loop next to each other
(paired_estimates); the standard error of that median, from the rounds'
interquartile range, and CALLER_SIDE_ERROR_SHARE of the figure (what a
start-up figure is off by in the program's own loop, measured inside runs),
in quadrature, go with it as its spread (`<key>_spread`: the aggregator
states it). Each round's figures are taken over that round's
speed probe and given back in ns at the calibration's usual speed (Speed),
so a slow stretch of the machine during the calibration does not scale the
costs charged for the whole run. A calibration wholly inside a slow stretch
cannot tell from its own probes (Speed): a thread of its own, the
collector's (its sampled CPU is the profiler's), takes more probes after it
(watch_speed: 16 in its first 0.8 s, then sparser for about a minute) and
gives the figures again whenever its probes put the usual speed over 5 %
faster than the figures'. The entry points: the package's own
functions through NVTX (py_nvtx_*: what code that bound them before
rlscope_ray was imported calls), and, when nvtx_fast is installed,
rlscope's for its functions (py_fast_*) and for its annotate
(py_annotate_push for its construction and enter, py_annotate_pop for its
exit), and rlscope_ray.range (py_range_*, against the same with no
collector: its pair, half on each side). Results go to the
collector as ns per event (``_native.set_cost``; keys in
docs/wire_format.md, Hello ``costs``), charged by the aggregator on the
event of each side (a push and its pop, a start and its end, a mark) by the
entry point its flags name. Its events are named ``rlscope.calibration``
(default domain, as most annotations are) and go to a scratch ring of the
thread's (``_native.scratch_scope``, which registers a thread that never
recorded, and in which starts and ends record as if armed) that is never
shipped; the collector's own recording cost (calibrated in C++) of what the
loops recorded is taken out of the result. About 0.5 s on a 2-core machine
(0.42-0.68 s, 8 processes of one program) and about 90k events, none sent;
up to three times that where the rounds disagree (paired_estimates).
"""
from __future__ import annotations

import math
import os
import statistics
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import _native

CALIBRATION_NAME = _native.names.CALIBRATION
_PAIRS = 1000
_ROUNDS = 7
# More rounds, two at a time, up to _MAX_ROUNDS, while a figure's spread is
# over _SPREAD_SHARE of it and over _SPREAD_FLOOR_NS: the nvtx package's
# push (about 400 ns) came out 362-503 ns in five processes of one program
# after 7 rounds, a spread of about 10 % that moved the dense push
# workload's corrected step by -6 % to +1 % from run to run (bench section
# accuracy). The spread falls as the square root of the rounds: 21 rounds
# take it to under 6 %. A quiet machine stops at 7.
_MAX_ROUNDS = 21
_SPREAD_SHARE = 0.04
_SPREAD_FLOOR_NS = 5.0
# The standard error of the median of n normal draws per their interquartile
# range, times sqrt(n): 1.2533 (the median's efficiency) / 1.349 (IQR per sd).
MEDIAN_SE_PER_IQR = 1.2533 / 1.349


def _work(x: int) -> int:
    # Stands in for the code between annotations: a Python call doing a little.
    for _ in range(2):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def _noop(*_args: object, **_kwargs: object) -> None:
    return None


def _ns_per_iter(body: Callable[[int], int]) -> float:
    t0 = time.perf_counter_ns()
    body(_PAIRS)
    return (time.perf_counter_ns() - t0) / _PAIRS


def _loop(open_fn: Callable[..., object], close_fn: Callable[..., object]) -> Callable[[int], int]:
    def body(n: int) -> int:
        x = 1
        for _ in range(n):
            h = open_fn(CALIBRATION_NAME)
            x = _work(x)
            close_fn(h)
        return x

    return body


def _with_loop(cls: Callable[..., object], **kwargs: object) -> Callable[[int], int]:
    """Loops of `with cls(name, **kwargs): _work(x)`, as code that uses a
    context manager pays it: the statement's own entry and exit (special
    method lookups, the exit's arguments), which calls of __enter__ and
    __exit__ by name do not take. Measured inside one profiled process,
    `nvtx.annotate` cost 191-257 ns a pair over the untooled class this way
    and 170-217 ns through such calls (12 paired calibrations in 4
    processes, this form higher in all 12); `rlscope_ray.range` 81-89
    against 71-85 ns (9 in 3 processes, higher in 8)."""
    def body(n: int) -> int:
        x = 1
        for _ in range(n):
            with cls(CALIBRATION_NAME, **kwargs):  # type: ignore[attr-defined]
                x = _work(x)
        return x

    return body


# (figure, spread: the standard error of the rounds' median); in probe iterations
# where a Speed was given (paired_estimates), else ns.
Estimate = Tuple[float, float]


class Speed:
    """The machine's speed while a calibration runs, from a fixed Python loop
    (the probe: a no-op call, _work, a no-op call: the untooled loops' shape
    with nothing to record) timed at the start of every round. A round's
    differences are taken in probe iterations (its real loop less its
    untooled one, over that round's probe time), so a round at any speed
    gives the same figure; `reference()` gives them back in ns at the
    machine's usual speed during the calibration.

    Why: this machine's loops run up to 1.8x slower for 0.1-0.5 s at a time,
    at any point of a process's life (4 of 8 processes that timed the probe
    for 3 s), the process on its core the whole time (its CPU time equals
    the wall time, none of it the kernel's; a busy loop on the other core
    does not do it). A calibration taken then gave every caller side
    1.6-1.8x its figure (4 of 34 runs of the dense push workload, a fifth
    partly slow), and those runs removed 12-20 % of the step too much from
    every step. A calibration slow from end to end cannot tell from its own
    probes (3 of 36 start-up calibrations of one small program, 1.8-1.9x in
    every figure, on one day; 0 of 56 later that day; 2 of 16 on another):
    the watch after it (watch_speed) takes more, and gives the figures again
    at the usual speed it finds."""

    # The usual speed: the median of the probes within BAND of the fastest
    # tenth. On a quiet machine that is every probe but a few interrupted
    # ones (its probes differ by a few percent: 380-440 ns an iteration by
    # process), so the figures are the rounds' own; probes of a slow
    # stretch (1.4-1.8x) are left out.
    BAND = 1.25

    def __init__(self) -> None:
        self.probe = _loop(_noop, _noop)
        self.probe(_PAIRS // 4)  # warmed up, as every measured loop is
        self.times: List[float] = []

    def take(self, measure: Callable[[Callable[[int], int]], float]) -> float:
        t = measure(self.probe)
        self.times.append(t)
        return t

    def reference(self) -> float:
        """ns per probe iteration at the machine's usual speed (BAND); 1
        before any probe was taken."""
        return self.usual(self.times)

    @classmethod
    def usual(cls, times: Sequence[float]) -> float:
        """The median of `times` within BAND of their fastest tenth; 1 for none."""
        if not times:
            return 1.0
        ordered = sorted(times)
        fast = ordered[int(0.1 * (len(ordered) - 1))]
        return statistics.median(t for t in ordered if t <= cls.BAND * fast)


def _side_costs(open_fn: Callable[..., object], close_fn: Callable[..., object],
                untooled_open: Callable[..., object], untooled_close: Callable[..., object],
                speed: Speed, pair_loops: Optional[Tuple[Callable[[int], int], Callable[[int], int]]] = None
                ) -> Tuple[Estimate, Estimate]:
    """What each side of an (open, work, close) iteration costs over what the
    package does with no tool attached, with its spread, in `speed`'s probe
    iterations. The whole iteration, real against untooled, is what code
    pays: its figure is the two sides' sum. How it splits between the sides
    comes from each side measured on its own (the real opening against the
    untooled one, then the real close against the untooled one, each loop
    keeping, then taking back, the handles the same way): those loops open
    a thousand ranges before closing any, deeper than the collector tracks,
    and took a pair for 13 % less than an iteration of both real sides
    costs in place. The
    real closes take the handles the real openings gave, in the same
    number: every range opened here is closed here. `pair_loops`, (untooled,
    real), measure the whole iteration in the form code writes it, where
    that is not (open, work, close) calls (_with_loop)."""
    real: List[object] = []
    untooled: List[object] = []
    real_open, base_open = _loop(open_fn, real.append), _loop(untooled_open, untooled.append)
    real_close = _loop(lambda _name: real.pop(), close_fn)
    base_close = _loop(lambda _name: untooled.pop(), untooled_close)
    base_pair, real_pair = pair_loops or (_loop(untooled_open, untooled_close), _loop(open_fn, close_fn))
    for body in (base_open, real_open, base_close, real_close, base_pair, real_pair):  # openings before closes
        body(_PAIRS // 4)  # warm up every path
    opening, closing, pair = paired_estimates([(base_open, real_open), (base_close, real_close),
                                               (base_pair, real_pair)], _ns_per_iter, speed=speed)
    o, c = max(0.0, opening[0]), max(0.0, closing[0])
    whole = max(0.0, pair[0])
    share = o / (o + c) if o + c > 0 else 1.0
    return (whole * share, pair[1] * share), (whole * (1 - share), pair[1] * (1 - share))


def paired_estimates(pairs: List[Tuple[Callable[[int], int], Callable[[int], int]]],
                     measure: Callable[[Callable[[int], int]], float], rounds: int = _ROUNDS,
                     max_rounds: int = _MAX_ROUNDS, speed: Optional[Speed] = None) -> List[Estimate]:
    """Per (untooled, real) pair of loops: each round's figure is the real
    loop's ns per iteration less the untooled one's measured next to it, in
    an order that alternates per round (pairs are measured in their order
    within each round); the estimate is the median of the rounds' figures,
    its spread the standard error of that median (from their interquartile
    range, as a normal spread with those quartiles has it). This machine's
    speed changes by up to 1.8x for tens to hundreds of ms at a time (Speed):
    a figure taken within a round holds both sides at one speed, where the
    best of each loop over all rounds could take its two sides from
    different speeds (costs off by hundreds of ns, or none); the median
    leaves out a round that was interrupted. The rounds are independent estimates of one cost: their
    spread is part of the calibration's share of the uncertainty (_publish adds what a start-up
    figure is off by in the program's own loop). `rounds` at
    least; then two more at a time, up to `max_rounds`, while any pair's
    spread is over _SPREAD_SHARE of its figure and over _SPREAD_FLOOR_NS.

    With `speed`, each round first times its probe, and the figures (and
    their spreads) are in probe iterations, each round's differences over
    that round's probe: multiply by `speed.reference()`, once the whole
    calibration has run, for ns at the machine's usual speed. The spread's
    floor is then _SPREAD_FLOOR_NS at the reference of the probes so far."""
    diffs: List[List[float]] = [[] for _ in pairs]

    def one_round(r: int) -> None:
        probe_ns = speed.take(measure) if speed is not None else 1.0
        for i, (untooled, real) in enumerate(pairs):
            if r % 2 == 0:
                base = measure(untooled)
                diffs[i].append((measure(real) - base) / probe_ns)
            else:
                took = measure(real)
                diffs[i].append((took - measure(untooled)) / probe_ns)

    def estimates() -> List[Estimate]:
        out = []
        for d in diffs:
            q1, _, q3 = statistics.quantiles(d, n=4) if len(d) > 1 else (d[0], d[0], d[0])
            out.append((statistics.median(d), MEDIAN_SE_PER_IQR * (q3 - q1) / len(d) ** 0.5))
        return out

    def too_spread() -> bool:
        floor = _SPREAD_FLOOR_NS / (speed.reference() if speed is not None else 1.0)
        return any(spread > max(floor, _SPREAD_SHARE * abs(figure)) for figure, spread in estimates())

    for r in range(rounds):
        one_round(r)
    done = rounds
    while done + 2 <= max_rounds and too_spread():
        one_round(done)
        one_round(done + 1)
        done += 2
    return estimates()


def _enter(cls: Callable[..., object], **kwargs: object) -> Callable[[str], object]:
    return lambda name: cls(name, **kwargs).__enter__()  # type: ignore[attr-defined]


def _leave(a: object) -> None:
    a.__exit__(None, None, None)  # type: ignore[attr-defined]


def _annotate_sides(annotate: Callable[..., object], untooled: Callable[..., object],
                    speed: Speed) -> Tuple[Estimate, Estimate]:
    """annotate's two sides (construct and enter, exit) against the untooled
    class's, as `with annotate(name, color=...)` pays them: the whole in
    that form, split as calls of each side by name split it."""
    return _side_costs(_enter(annotate, color="green"), _leave, _enter(untooled, color="green"), _leave, speed,
                       pair_loops=(_with_loop(untooled, color="green"), _with_loop(annotate, color="green")))


def _range_costs(speed: Speed) -> Dict[str, Estimate]:
    """rlscope_ray.range's caller side, as `with rlscope_ray.range(name)`
    pays it, against the same with no collector (_native._untooled). Its
    exits pair with the thread's depth, not with their object, so loops of
    openings then closings (_side_costs) would close each other's ranges:
    the pair is measured whole and charged half on each side."""
    def untooled(body: Callable[[int], int]) -> Callable[[int], int]:
        def run(n: int) -> int:
            _native._untooled(True)
            try:
                return body(n)
            finally:
                _native._untooled(False)

        return run

    real, base = _with_loop(_native.range), untooled(_with_loop(_native.range))
    for body in (base, real):
        body(_PAIRS // 4)  # warm up both paths
    ((figure, spread),) = paired_estimates([(base, real)], _ns_per_iter, speed=speed)
    half = (max(0.0, figure) / 2, spread / 2)
    return {"py_range_push": half, "py_range_pop": half}


def _nvtx_costs(speed: Speed) -> Dict[str, Estimate]:
    try:
        import nvtx  # type: ignore[import-not-found]
    except ImportError:
        return {}
    if not nvtx.enabled():
        return {}
    from nvtx import nvtx as module  # type: ignore[import-not-found]

    from . import nvtx_fast

    # The baseline: the package's own code as it runs with no tool attached
    # (its domain lookup gives the dummy domain), byte for byte.
    base = nvtx_fast.untooled_functions(module)
    # The package's own functions (what code that bound them before
    # rlscope_ray's entry points were in place still calls), and rlscope's.
    # Both loops call the same way, with no wrapper on one side only (a
    # lambda costs ~13 ns, measured with timeit): push_range returns None, so
    # pop_range(None) pops the default domain.
    pkg = nvtx_fast.original or {n: getattr(module, n) for n in ("push_range", "pop_range", "start_range",
                                                                "end_range", "mark")}
    costs: Dict[str, Estimate] = {}
    ways = [("py_nvtx_", pkg)]
    if nvtx_fast.installed():
        ways.append(("py_fast_", {n: getattr(module, n) for n in pkg}))
    for prefix, f in ways:
        push, pop = _side_costs(f["push_range"], f["pop_range"], base["push_range"], base["pop_range"], speed)
        start, end = _side_costs(f["start_range"], f["end_range"], base["start_range"], base["end_range"], speed)
        mark, _ = _side_costs(f["mark"], _noop, base["mark"], _noop, speed)  # one side
        costs.update({prefix + "push": push, prefix + "pop": pop, prefix + "start": start, prefix + "end": end,
                      prefix + "mark": mark})
    if nvtx_fast.installed():
        costs["py_annotate_push"], costs["py_annotate_pop"] = _annotate_sides(module.annotate, base["annotate"],
                                                                              speed)
    return costs


def calibrate_python() -> Dict[str, float]:
    """Measure the caller-side costs and hand them to the collector.

    Returns what was set, in ns per event, each key's spread as
    `<key>_spread` ({} when no collector runs, or when it runs with test
    costs, which are fixed (collector/test_clock.h); only rlscope_ray.range's
    when the ``nvtx`` package is absent or disabled).
    """
    if not _native.init() or _native.test_clock_ns() >= 0:
        return {}
    global _generation
    with _publishing:
        _generation += 1  # a watch of an earlier calibration stops: these figures stand
        generation = _generation
    armed_before = bool(_native.armed())
    # Recorded at the real costs into a scratch ring that is never shipped:
    # a profiled process sends nothing before its program records. The
    # scope registers a thread that never recorded, so that a disarmed
    # worker's loops take the path its calls take once tracked, not the idle
    # lane (which read about half the caller side).
    scoped = _native.scratch_scope(1)
    speed = Speed()
    try:
        in_probes = {**_nvtx_costs(speed), **_range_costs(speed)}
    finally:
        if scoped:
            _native.scratch_scope(0)
    # The loops also paid the recording of what they recorded, which the
    # collector charges itself: everything while the process was armed; in
    # the scratch scope starts and ends (recorded as if armed, as a selected
    # step pays them), pushes, pops and marks only when armed.
    recorded = (("push", "pop", "start", "end", "mark") if armed_before or _native.armed()
                else ("start", "end") if scoped else ())
    own = {k: max(0.0, _native.cost(k)) for k in recorded}
    # In ns at the machine's usual speed, from every probe of the calibration.
    with _publishing:
        costs = _publish(in_probes, speed.reference(), own)
    if _WATCH_SCHEDULE_S and in_probes and hasattr(_native, "own_thread"):
        try:
            threading.Thread(target=_watch_as_own_thread, args=(speed, in_probes, own, generation),
                             name=_WATCH_THREAD, daemon=True).start()
        except RuntimeError:  # no thread to be had (interpreter shutting down): the figures stand
            pass
    return costs


# What a figure is off by in the program's own loop, one standard deviation,
# as a share of it, beyond its rounds' standard error: the calibration's
# loop is not the program's, nor its moment. Measured inside runs (bench
# section accuracy, the push workload alone: each selected step's overhead
# over its untooled neighbours, less the recording measured in place), the
# caller side charged came to 0.77-0.99 of the real one in six processes
# and about 1.15 in two more; the real one moved by about 6 % from process
# to process and the figure by about 12 %, not together. Stated in each
# figure's spread (`<key>_spread`), so the aggregator's `calibration` part
# of the uncertainty carries it.
CALLER_SIDE_ERROR_SHARE = 0.10


def _publish(in_probes: Dict[str, Estimate], usual_ns: float, own: Dict[str, float]) -> Dict[str, float]:
    """The figures (in probe iterations) in ns at `usual_ns` a probe
    iteration, less what the collector charges itself (`own`, by kind), with
    their spreads (the rounds' standard error and CALLER_SIDE_ERROR_SHARE of
    the figure, in quadrature), handed to the collector (a new Hello carries
    them)."""
    estimates = {key: (figure * usual_ns, spread * usual_ns) for key, (figure, spread) in in_probes.items()}
    costs = {key: ns for key, (ns, _) in estimates.items()}
    for key in costs:
        kind = key.rsplit("_", 1)[1]
        if kind in own:
            costs[key] = max(0.0, costs[key] - own[kind])
    costs.update({key + "_spread": math.hypot(spread, CALLER_SIDE_ERROR_SHARE * costs[key])
                  for key, (_, spread) in estimates.items()})
    for key, ns in costs.items():
        _native.set_cost(key, ns)
    return costs


# After the start-up calibration, more probes on a thread of its own
# (watch_speed), the sleeps before each: Python code here runs up to 1.9x
# slower for tenths of a second to seconds at a time (a C loop on the same
# core does not), and a calibration that falls wholly in such a stretch
# cannot tell (Speed). Densely at first, as the first steps are charged at
# what it finds, then every quarter second, then every 2 s, for about a
# minute. Each probe holds the GIL for _WATCH_PAIRS iterations (0.1 ms in a
# plain process here, up to 0.25 ms in a Ray worker): 1.6-4 ms in the first
# 0.8 s (0.2-0.5 % of the host's time), then 0.04-0.1 %, then 0.005-0.0125 %.
_WATCH_SCHEDULE_S = (0.05,) * 16 + (0.25,) * 16 + (2.0,) * 26
_WATCH_PAIRS = _PAIRS // 4
# The figures are given again when the watch's own probes (at least
# _WATCH_AGREE of them within Speed.BAND of their fastest) put the usual
# speed faster than the one the figures were last given at by more than
# _WATCH_SHARE. Its probes alone: a calibration takes a hundred and more,
# which a few fast ones would not move.
_WATCH_SHARE = 0.05
_WATCH_AGREE = 2
_WATCH_THREAD = "rlscope-watch"  # its name, in Python and (own_thread) for the OS: traces, top
# Calibrations so far, and stop_watch's: a watch gives up once the count is
# not its calibration's. A calibration counts itself, and a watch checks the
# count and gives its figures, under _publishing (an older watch never
# overwrites a newer calibration's figures).
_generation = 0
_publishing = threading.Lock()


def stop_watch() -> None:
    """A watch running gives up at its next probe (the collector shuts down).
    Without the lock: shutdown may come from a signal handler, or in a forked
    child, while it is held (a figure given meanwhile goes to a collector
    that is stopping, which takes it and sends nothing more)."""
    global _generation
    _generation += 1


def _after_fork_in_child() -> None:
    """No watch runs in a forked child (threads do not fork), and the lock
    may have been held by the parent's."""
    global _publishing
    _publishing = threading.Lock()
    stop_watch()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _on_cpu_ns_per_iter(body: Callable[[int], int]) -> Optional[float]:
    """ns per iteration of _WATCH_PAIRS, or None when the thread was off its
    CPU for over 5 % of the loop (the host's threads hold the GIL or the
    core: a slower probe that says nothing of the machine's speed)."""
    w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    body(_WATCH_PAIRS)
    wall, cpu = time.perf_counter_ns() - w0, time.thread_time_ns() - c0
    return wall / _WATCH_PAIRS if cpu >= 0.95 * wall else None


def _watch_as_own_thread(speed: Speed, in_probes: Dict[str, Estimate], own: Dict[str, float],
                         generation: int) -> None:
    """The watch thread's body: the collector's own thread (its sampled CPU
    is the profiler's, not the program's), then watch_speed."""
    try:
        _native.own_thread(_WATCH_THREAD)
    except Exception:  # noqa: BLE001 - a watch never fails its host
        return
    watch_speed(speed, in_probes, own, generation=generation)


def watch_speed(speed: Speed, in_probes: Dict[str, Estimate], own: Dict[str, float],
                schedule_s: Sequence[float] = _WATCH_SCHEDULE_S,
                measure: Callable[[Callable[[int], int]], Optional[float]] = _on_cpu_ns_per_iter,
                sleep: Callable[[float], None] = time.sleep, generation: Optional[int] = None
                ) -> Optional[Dict[str, float]]:
    """Takes one more speed probe after each sleep of `schedule_s` (a probe
    `measure` gives None for is left out); whenever its probes so far put
    the usual speed (Speed.usual, with _WATCH_AGREE of them in its band)
    faster than the one the figures were last given at (at first the
    calibration's, `speed`) by more than _WATCH_SHARE, gives the collector
    the figures at it. Returns what was set last, else None. Stops when no
    collector runs, or when the calibration count is not `generation` (a
    later calibration ran, whose figures stand, or stop_watch)."""
    def current() -> bool:
        return _native.running() and (generation is None or generation == _generation)

    given_at, given, watched = speed.reference(), None, []
    try:
        for pause in schedule_s:
            sleep(pause)
            if not current():
                break
            t = measure(speed.probe)
            if t is None:
                continue
            watched.append(t)
            usual = Speed.usual(watched)
            agree = sum(w <= Speed.BAND * min(watched) for w in watched)
            if agree >= _WATCH_AGREE and usual < given_at * (1 - _WATCH_SHARE):
                with _publishing:
                    if not current():
                        break
                    given, given_at = _publish(in_probes, usual, own), usual
    except Exception:  # noqa: BLE001 - a watch never fails its host
        pass
    return given

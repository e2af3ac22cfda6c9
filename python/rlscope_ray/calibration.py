"""Caller-side overhead calibration, measured in this Python process.

The collector calibrates its own cost per recorded event at start-up (C++,
``CostSampling::Calibrate``). In Python the larger part of an annotation's cost
is on the caller's side: the ``nvtx`` package does nothing when no tool is
attached (its domain is a dummy), but builds event attributes on every call
once one is, about 100-200 ns per event, an order of magnitude more than the
recording itself. That time exists only because the profiler is there, so
overhead correction must remove it too (RL-Scope's "Python annotation"
overhead).

``calibrate_python()`` measures it the way it is paid, each side of a pair
on its own: loops of (open, a small Python function call, close) with the
real opening and the untooled close, then the untooled opening and the real
close, each against the same loop with stand-ins for what the package does
with no tool attached (look its domain up, find the dummy, stop), best of a
few rounds. Results go to the collector as ns per event
(``_native.set_cost``; keys in docs/wire_format.md, Hello ``costs``),
charged by the aggregator on the event of each side (a push and its pop, a
start and its end, a mark). Its events are named ``rlscope.calibration``
(default domain, as most annotations are) and go to a scratch ring of the
thread's (``_native.scratch_scope``) that is never shipped; when the process
is recording meanwhile, the collector's own recording cost (calibrated in
C++) is taken out of the result. About 80 ms and 80k events, none sent.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Tuple

from . import _native

CALIBRATION_NAME = _native.names.CALIBRATION
_PAIRS = 1500
_ROUNDS = 5


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


def _side_costs(open_fn: Callable[..., object], close_fn: Callable[..., object],
                untooled_open: Callable[..., object], untooled_close: Callable[..., object]) -> Tuple[float, float]:
    """ns each side of an (open, work, close) iteration costs over what the
    package does with no tool attached: the real opening against the
    untooled one, then the real close against the untooled one, each loop
    keeping (then taking back) the handles the same way. The real closes
    take the handles the real openings gave, in the same number: every
    range opened here is closed here."""
    real: List[object] = []
    untooled: List[object] = []
    real_open, base_open = _loop(open_fn, real.append), _loop(untooled_open, untooled.append)
    real_close = _loop(lambda _name: real.pop(), close_fn)
    base_close = _loop(lambda _name: untooled.pop(), untooled_close)
    bodies = (base_open, real_open, base_close, real_close)  # openings before the closes of their handles
    for body in bodies:
        body(_PAIRS // 4)  # warm up every path
    # Interleaved rounds, so drift in the machine's speed hits both alike.
    best = [float("inf")] * len(bodies)
    for _ in range(_ROUNDS):
        for i, body in enumerate(bodies):
            best[i] = min(best[i], _ns_per_iter(body))
    return max(0.0, best[1] - best[0]), max(0.0, best[3] - best[2])


def _nvtx_costs() -> Dict[str, float]:
    try:
        import nvtx  # type: ignore[import-not-found]
    except ImportError:
        return {}
    if not nvtx.enabled():
        return {}
    from nvtx import nvtx as module  # type: ignore[import-not-found]

    get_domain, dummy = module.get_domain, module.dummy_domain

    # What each call costs with no tool attached: the package looks its
    # domain up, finds the dummy one and stops there. That cost is in the
    # uninstrumented run too, so it is the baseline, not a no-op.
    def untooled(message: object = None, color: object = None, domain: object = None,
                 category: object = None, payload: object = None) -> None:
        _ = get_domain(domain) is dummy

    def untooled_pop(domain: object = None) -> None:
        _ = get_domain(domain) is dummy

    def untooled_end(range_id: object) -> None:
        _ = range_id is not None

    # Both loops call the same way, with no wrapper on one side only (a
    # lambda costs ~13 ns, measured with timeit): push_range returns None, so
    # pop_range(None) pops the default domain.
    push, pop = _side_costs(nvtx.push_range, nvtx.pop_range, untooled, untooled_pop)
    start, end = _side_costs(nvtx.start_range, nvtx.end_range, untooled, untooled_end)
    mark, _ = _side_costs(nvtx.mark, _noop, untooled, _noop)  # one side
    return {"py_nvtx_push": push, "py_nvtx_pop": pop, "py_nvtx_start": start, "py_nvtx_end": end,
            "py_nvtx_mark": mark}


def calibrate_python() -> Dict[str, float]:
    """Measure the caller-side costs and hand them to the collector.

    Returns what was set ({} when no collector runs, when it runs with test
    costs, which are fixed (collector/test_clock.h), or when the ``nvtx``
    package is absent or disabled).
    """
    if not _native.init() or _native.test_clock_ns() >= 0:
        return {}
    armed_before = bool(_native.armed())
    # Recorded at the real costs into a scratch ring that is never shipped:
    # a profiled process sends nothing before its program records.
    scoped = _native.scratch_scope(1)
    try:
        costs = _nvtx_costs()
    finally:
        if scoped:
            _native.scratch_scope(0)
    if armed_before or _native.armed():
        # The loop also paid the recording, which the collector charges itself.
        own = {k: max(0.0, _native.cost(k)) for k in ("push", "pop", "start", "end", "mark")}
        for kind in own:
            key = "py_nvtx_" + kind
            if key in costs:
                costs[key] = max(0.0, costs[key] - own[kind])
    for key, ns in costs.items():
        _native.set_cost(key, ns)
    return costs

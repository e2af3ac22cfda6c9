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

``calibrate_python()`` measures it the way it is paid, each side of a pair
on its own and per entry point: loops of (open, a small Python function
call, close) with the real opening and the untooled close, then the untooled
opening and the real close, each against the same loop with stand-ins for
what the package does with no tool attached (look its domain up, find the
dummy, stop), best of a few rounds. The entry points: the package's own
functions through NVTX (py_nvtx_*: what code that bound them before
rlscope_ray was imported calls), and, when nvtx_fast is installed, rlscope's
for its functions (py_fast_*) and for its annotate (py_annotate_push for its
construction and enter, py_annotate_pop for its exit). Results go to the
collector as ns per event (``_native.set_cost``; keys in
docs/wire_format.md, Hello ``costs``), charged by the aggregator on the
event of each side (a push and its pop, a start and its end, a mark) by the
entry point its flags name. Its events are named ``rlscope.calibration``
(default domain, as most annotations are) and go to a scratch ring of the
thread's (``_native.scratch_scope``) that is never shipped; when the process
is recording meanwhile, the collector's own recording cost (calibrated in
C++) is taken out of the result. About 180 ms and 180k events, none sent
(80 ms without nvtx_fast).
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


class _Untooled:
    """What the package's functions and annotate do with no tool attached:
    look the domain up, find the dummy one and stop. That cost is in the
    uninstrumented run too, so it is the baseline, not a no-op."""

    def __init__(self, module: object) -> None:
        get_domain, dummy = module.get_domain, module.dummy_domain  # type: ignore[attr-defined]

        def opening(message: object = None, color: object = None, domain: object = None,
                    category: object = None, payload: object = None) -> None:
            _ = get_domain(domain) is dummy

        def pop(domain: object = None) -> None:
            _ = get_domain(domain) is dummy

        def end(range_id: object) -> None:
            _ = range_id is not None

        class annotate:
            def __init__(self, message: object = None, color: object = None, domain: object = None,
                         category: object = None, payload: object = None) -> None:
                self.init_args = message, color, domain, category, payload
                self.domain = dummy if get_domain(domain) is not None else dummy

            def __enter__(self) -> "annotate":
                if self.domain is not dummy:
                    pass
                return self

            def __exit__(self, *exc: object) -> bool:
                if self.domain is not dummy:
                    pass
                return False

        self.opening, self.pop, self.end, self.annotate = opening, pop, end, annotate


def _annotate_sides(annotate: Callable[..., object], untooled: Callable[..., object]) -> Tuple[float, float]:
    """annotate's two sides (construct and enter, exit) against the untooled
    class's, as `with annotate(name, color=...)` pays them."""
    def enter(cls: Callable[..., object]) -> Callable[[str], object]:
        return lambda name: cls(name, color="green").__enter__()  # type: ignore[attr-defined]

    def leave(a: object) -> None:
        a.__exit__(None, None, None)  # type: ignore[attr-defined]

    return _side_costs(enter(annotate), leave, enter(untooled), leave)


def _nvtx_costs() -> Dict[str, float]:
    try:
        import nvtx  # type: ignore[import-not-found]
    except ImportError:
        return {}
    if not nvtx.enabled():
        return {}
    from nvtx import nvtx as module  # type: ignore[import-not-found]

    from . import nvtx_fast

    base = _Untooled(module)
    # The package's own functions (what code that bound them before
    # rlscope_ray's entry points were in place still calls), and rlscope's.
    # Both loops call the same way, with no wrapper on one side only (a
    # lambda costs ~13 ns, measured with timeit): push_range returns None, so
    # pop_range(None) pops the default domain.
    pkg = nvtx_fast.original or {n: getattr(module, n) for n in ("push_range", "pop_range", "start_range",
                                                                "end_range", "mark")}
    costs: Dict[str, float] = {}
    ways = [("py_nvtx_", pkg)]
    if nvtx_fast.installed():
        ways.append(("py_fast_", {n: getattr(module, n) for n in pkg}))
    for prefix, f in ways:
        push, pop = _side_costs(f["push_range"], f["pop_range"], base.opening, base.pop)
        start, end = _side_costs(f["start_range"], f["end_range"], base.opening, base.end)
        mark, _ = _side_costs(f["mark"], _noop, base.opening, _noop)  # one side
        costs.update({prefix + "push": push, prefix + "pop": pop, prefix + "start": start, prefix + "end": end,
                      prefix + "mark": mark})
    if nvtx_fast.installed():
        costs["py_annotate_push"], costs["py_annotate_pop"] = _annotate_sides(module.annotate, base.annotate)
    return costs


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
        for key in costs:
            kind = key.rsplit("_", 1)[1]
            costs[key] = max(0.0, costs[key] - own[kind])
    for key, ns in costs.items():
        _native.set_cost(key, ns)
    return costs

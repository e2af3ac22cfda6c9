"""rlscope-ray: a cross-stack profiler for distributed RL on Ray.

The Python face of the native collector. Everything here is a cheap no-op
when no collector runs in this process (no ``RLSCOPE_AGGREGATOR`` set).

    import rlscope_ray
    with rlscope_ray.step(3):              # controller: one training step
        with rlscope_ray.range("gen"):     # a sub-task
            ...
        rlscope_ray.mark("checkpoint")

Existing NVTX annotations (the ``nvtx`` package, ``torch.cuda.nvtx``, NVTX3
C/C++) are captured too when ``NVTX_INJECTION64_PATH`` names
``collector_path()``; importing this package sets it when it is unset and a
collector runs, so a later ``import nvtx`` reports into the same collector.
"""
from __future__ import annotations

import atexit
import functools
import inspect
import os
import sys
import time
from typing import Any, Callable, TypeVar

from . import _native
from .collector import aggregator_path, calibrate, collector_path, shutdown_collector, start_collector

# The CPU sampler reads sampled threads' Python frames (cross-stack
# attribution) until the interpreter starts freeing thread states: atexit
# handlers run before that.
atexit.register(_native.stop_python_frames)

__all__ = [
    "aggregator_path",
    "calibrate",
    "init",
    "shutdown",
    "collector_path",
    "enabled",
    "flush",
    "link_key",
    "mark",
    "range",
    "shutdown_collector",
    "start",
    "start_collector",
    "stats",
    "step",
    "stop",
    "waited",
]
__version__ = "0.1.0"

_F = TypeVar("_F", bound=Callable[..., Any])

start_collector()


def enabled() -> bool:
    """True when a collector runs in this process and is recording now."""
    return bool(_native.armed())


def _name_id(name: str) -> int:
    """The collector's id for a name (0 when no collector runs): interned once,
    so a range costs no string handling per call."""
    return _native.intern(name)


def link_key(key: "str | int") -> int:
    """The 63-bit payload that links a wait to the work it waited for
    (``range(name, link=key)``, ``waited(key)``): the first 8 bytes of
    BLAKE2b over ``str(key)`` in UTF-8, big-endian, top bit cleared. NVTX
    users in C/C++ may put any payload they like on both sides instead."""
    import hashlib

    digest = hashlib.blake2b(str(key).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFFFFFFFFFF


# range and mark are native (python/bindings/fast_api.cc): with no collector
# a range costs about what `with` itself costs, recording one C call per edge.
# `range(name, link=key)` and `@range(name)` call back into the two hooks
# below. (range mirrors nvtx.annotate / torch.cuda.nvtx.range.)
range = _native.range  # noqa: A001
mark = _native.mark


def _decorate(rng: Any, fn: _F) -> _F:
    """@rlscope_ray.range(name): fn run inside the range on every call; an
    `async def` one from its start to its end, across its awaits (the range
    is entered in the wrapper coroutine: a start/end range, fast_api.cc)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def coroutine_wrapper(*args: Any, **kwargs: Any) -> Any:
            with rng:
                return await fn(*args, **kwargs)

        return coroutine_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with rng:
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


_native._set_hooks(link_key, _decorate)
# A forked child's collector (if any) is not the parent's: its names differ.
os.register_at_fork(after_in_child=_native._forget_names)


def waited(key: "str | int") -> None:
    """Controller side: a wait on another process's work is over (a queue
    get, a pipe read, a collective), the work being that process's
    ``range(name, link=key)``. Call it right after the wait returns, inside
    the sub-task that waited; each step's summary lists which waits were
    linked (``correction.waits``)."""
    global _waited_id
    if not _waited_id:
        _waited_id = _name_id(_native.names.WAITED)
    if _waited_id:
        _native.mark_payload(_waited_id, link_key(key))


_waited_id = 0


class step:
    """Training step ``n`` (controller side): a range named "step" carrying n.

    The aggregator cuts every process's events to the controller's steps.
    A plain class, not a generator: entering runs the controller's duties
    (once) and the step edge, nothing per range.
    """

    __slots__ = ("n", "_t0")

    def __init__(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"rlscope_ray.step(n): n must be an int >= 0, got {n!r}")
        self.n = n
        self._t0 = 0

    def __enter__(self) -> None:
        # The process whose steps drive the run is its controller: it claims
        # the role (a no-op when it has it, or another process does).
        if _native.claim_controller() and "ray" in sys.modules:
            _controller_duties()
        if _session_module is not None:
            _session_module.before_step()
        self._t0 = time.perf_counter_ns() if _step_times_path else 0
        _native.step_begin(self.n)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        _native.step_end()
        if _step_times_path and exc_type is None:  # a step that raised is not timed
            _append_step_time(self.n, time.perf_counter_ns() - self._t0)


def _controller_duties() -> None:
    """A Ray process that claimed the controller role takes on its duties
    (rlscope_ray.session.become_controller; once)."""
    global _session_module
    if _session_module is None:
        from . import session

        _session_module = session
    _session_module.become_controller()


# RLSCOPE_STEP_TIMES=FILE: every rlscope_ray.step appends "n wall_ns" to FILE,
# with or without a collector. `rlscope-ray calibrate` times the same steps
# with and without the profiler this way.
_step_times_path = os.environ.get("RLSCOPE_STEP_TIMES") or None


def _append_step_time(n: int, wall_ns: int) -> None:
    global _step_times_path
    try:
        with open(_step_times_path, "a", encoding="ascii") as f:  # type: ignore[arg-type]
            f.write(f"{n} {wall_ns}\n")
    except OSError as e:  # never the host's problem: say so once, stop timing
        print(f"rlscope: cannot append step times to RLSCOPE_STEP_TIMES={_step_times_path}: {e.strerror or e}; "
              "not timing steps", file=sys.stderr)
        _step_times_path = None


def start() -> None:
    """Open an explicit capture (config ``capture_range: api``)."""
    _native.capture_start()


def stop() -> None:
    """Close an explicit capture (config ``capture_range: api``)."""
    _native.capture_stop()


def flush(timeout_s: float = 2.0) -> bool:
    """Ship everything recorded so far; True when sent within the timeout."""
    return bool(_native.flush(int(timeout_s * 1000)))


def stats() -> dict:
    """This process's collector counters: events, dropped, batches, threads,
    and the CPU sampler's (cpu_samples, cpu_samples_dropped, cpu_signals:
    timer signals taken, recorded or not; cpu_timers: timers that exist now;
    cpu_signal: its signal number, 0 before it is set up; cpu_frames_unread:
    samples whose Python frame could not be read, kept without a module;
    cpu_kernel_reads: samples whose frame was read through the kernel, not
    with guarded loads; cpu_guard_faults: faults the guarded loads caught;
    cpu_handler_ns: the sampler's signal handler's own time per sample,
    measured in place, -1 before the first; cpu_handlers_interrupted:
    samples whose handler took over 50 us (preempted in it), left out of
    it; cpu_threads_unsampled: threads the sampler could not take;
    cpu_walks_fp, cpu_walks_scan, cpu_walks_leaf, cpu_unwalked: samples whose native stack was walked with frame pointers,
    by a scan, to no caller, or not at all; cpu_walk_faults: reads of those
    walks that failed (faults the guard caught, in cpu_guard_faults too);
    off_cpu_looks: looks at why the
    recording threads were off CPU; off_cpu_dropped: off-CPU samples lost)."""
    return dict(_native.stats())


_session_module = None  # rlscope_ray.session once init() ran (it imports Ray)


def init(config=None, **kwargs):  # type: ignore[no-untyped-def]
    """Start a profiling session for a Ray job (see rlscope_ray.session.init)."""
    global _session_module
    from . import session

    _session_module = session
    return session.init(config, **kwargs)


def shutdown(timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    """Finish the session: flush, write the last steps, stop Ray if init started it."""
    from . import session

    return session.shutdown(timeout_s)

"""rlscope's own entry points for the `nvtx` package, while a collector records.

With a tool attached the package builds an event-attributes object in Python
on every call (a registered-string lookup, the colour's ARGB, a Cython
object): about 1 us per range on this project's 2-core machines, 10x the
recording itself, and time the program spends only because the profiler is
there. ``install()`` puts functions of the same signatures under the
package's ``push_range``, ``pop_range``, ``start_range``, ``end_range``,
``mark`` and ``annotate`` (in ``nvtx`` and ``nvtx.nvtx``). Each does what the
package's own function does when no tool is attached (look its domain up,
compare it with the dummy one) and then records in one C call
(``_native.nvtx_*``) what the NVTX handler records for the same call: the
same names, domains, categories and integer payloads. So a profiled call
costs what the uninstrumented one does plus that C call: the recording,
which the collector measures in place, and the call's dispatch and argument
reading, calibrated per entry point (calibration.py: py_fast_*,
py_annotate_*, tens of ns) and charged by the events' flags
(FLAG_VIA_NVTX_FAST, FLAG_VIA_NVTX_ANNOTATE). Doing the uninstrumented
call's own work, rather than less, keeps what correction must remove small
and of one sign: a faster path would leave the profiled run faster than the
program, by a difference that only a noisy calibration could give back.

Calls the C side does not take as they are (a str category, a registered
string, an array payload; calibration.py's figures do not cover them) go the
package's own way, as does ``@nvtx.annotate`` as a decorator (the package
wraps the function). Code that bound the package's functions before
rlscope_ray was imported (``from nvtx import push_range``) keeps them: those
calls are recorded through NVTX as before (py_nvtx_*).

Installed only when the package's NVTX injection is this collector (not
another tool's) and ``RLSCOPE_NVTX_FAST_PATH`` is not ``0``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import types
from types import ModuleType
from typing import Any, Dict, Iterator, Optional

from . import _native

_FAST = _native.FLAG_VIA_NVTX_FAST
_ANNOTATE = _native.FLAG_VIA_NVTX_ANNOTATE
_NAMES = ("annotate", "push_range", "pop_range", "start_range", "end_range", "mark")
ENV_SWITCH = "RLSCOPE_NVTX_FAST_PATH"

# The package's own functions, as they were before install().
original: Dict[str, Any] = {}


def _make(pkg: Dict[str, Any], get_domain: Any, dummy: Any) -> Dict[str, Any]:
    """The replacements, over the package's functions `pkg` (their fallback).
    Each looks its domain up as the package does (`get_domain`; `dummy`: the
    package's domain when no tool is attached, which records nothing), so a
    call's Python part is the uninstrumented call's, plus one C call."""
    push, pop, start, end, mark_ = (_native.nvtx_push, _native.nvtx_pop, _native.nvtx_start, _native.nvtx_end,
                                    _native.nvtx_mark)
    slow_push, slow_pop, slow_start, slow_end, slow_mark = (pkg["push_range"], pkg["pop_range"],
                                                            pkg["start_range"], pkg["end_range"], pkg["mark"])
    slow_annotate = pkg["annotate"]
    not_taken = NotImplemented

    def push_range(message=None, color="blue", domain=None, category=None, payload=None):
        if get_domain(domain) is not dummy and push(message, domain, category, payload, _FAST) is not_taken:
            slow_push(message, color, domain, category, payload)

    def pop_range(domain=None):
        if get_domain(domain) is not dummy and pop(domain, _FAST) is not_taken:
            slow_pop(domain)

    def start_range(message=None, color=None, domain=None, category=None, payload=None):
        d = get_domain(domain)
        if d is dummy:
            return None
        h = start(message, domain, category, payload, _FAST)
        # The package's shape, (id, domain handle): its own end_range takes it too.
        return slow_start(message, color, domain, category, payload) if h is not_taken else (h, d.handle)

    def end_range(range_id):
        if range_id is not None and end(range_id, _FAST) is not_taken:
            slow_end(range_id)  # not a range: the package says what is wrong with it

    def mark(message=None, color="blue", domain=None, category=None, payload=None):
        if get_domain(domain) is not dummy and mark_(message, domain, category, payload, _FAST) is not_taken:
            slow_mark(message, color, domain, category, payload)

    class annotate(slow_annotate):  # type: ignore[misc, valid-type]
        """The package's ``annotate`` (same arguments and attributes but the
        event's `attributes`), entered and exited through rlscope's entry
        points; a decorator as the package's."""

        def __init__(self, message=None, color=None, domain=None, category=None, payload=None):
            self.init_args = message, color, domain, category, payload
            self.domain = get_domain(domain)
            self._slow: Optional[Any] = None  # the package's annotate, for arguments the C side does not take

        def __enter__(self):
            if self.domain is not dummy:
                if self._slow is None:
                    m, _, d, c, p = self.init_args
                    if push(m, d, c, p, _ANNOTATE) is not not_taken:
                        return self
                    self._slow = slow_annotate(*self.init_args)
                self._slow.__enter__()
            return self

        def __exit__(self, exc_type, exc_value, traceback):
            if self.domain is not dummy:
                if self._slow is None:
                    pop(self.init_args[2], _ANNOTATE)
                else:
                    self._slow.__exit__(exc_type, exc_value, traceback)
            return False

        def __call__(self, func):
            return slow_annotate(*self.init_args)(func)

        def __reduce__(self):
            return slow_annotate, self.init_args

    annotate.__module__ = slow_annotate.__module__
    annotate.__qualname__ = slow_annotate.__qualname__
    return {"annotate": annotate, "push_range": push_range, "pop_range": pop_range,
            "start_range": start_range, "end_range": end_range, "mark": mark}


def _ours(collector: str) -> bool:
    injection = os.environ.get("NVTX_INJECTION64_PATH", "")
    return bool(injection) and os.path.realpath(injection) == os.path.realpath(collector)


def install(collector: str) -> bool:
    """Put rlscope's entry points under the `nvtx` package; True when they
    are in place (now or before). `collector`: this collector's library (the
    package must report to it). Never raises."""
    if os.environ.get(ENV_SWITCH, "1") == "0" or not _ours(collector):
        return False
    try:
        import nvtx  # type: ignore[import-not-found]
        from nvtx import nvtx as module  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - no package, or one that fails to import: nothing to replace
        return False
    if original:
        return True
    if not nvtx.enabled() or not all(callable(getattr(module, n, None)) for n in _NAMES):
        return False  # NVTX_DISABLE, or a package that changed: leave it as it is
    pkg = {n: getattr(module, n) for n in _NAMES}
    get_domain, dummy = getattr(module, "get_domain", None), getattr(module, "dummy_domain", None)
    if not callable(get_domain) or dummy is None:
        return False
    try:
        ours = _make(pkg, get_domain, dummy)
    except Exception:  # noqa: BLE001 - e.g. an annotate that cannot be subclassed: leave the package as it is
        return False
    original.update(pkg)
    _installed.update(ours)
    for target in (module, nvtx):
        _set(target, ours)
    return True


def _set(target: ModuleType, functions: Dict[str, Any]) -> None:
    for name, fn in functions.items():
        if hasattr(target, name):
            setattr(target, name, fn)


# install()'s functions, for untooled() to put back; untooled()'s own.
_installed: Dict[str, Any] = {}
_untooled_cache: Dict[str, Any] = {}


@contextlib.contextmanager
def untooled() -> Iterator[None]:
    """Bench only: inside, the `nvtx` package's functions are its own code as
    it runs with no tool attached (the same functions over a domain lookup
    that always gives the package's dummy domain) and ``rlscope_ray.range``
    acts as with no collector, so a step of the same code costs, in this
    profiled process, what it costs without the profiler (``make bench``,
    section accuracy: tests/apps/dense_steps.py --untooled-steps). Nothing
    is recorded inside, not even depth: a range opened inside and closed
    outside (or the other way) is not paired, so enter and leave it between
    steps, with no range open; and do not nest it (the inner one's exit
    ends both). Where install() did not put rlscope's entry points under the
    package, its calls still record through NVTX inside: only
    rlscope_ray.range is untooled."""
    if not original:
        _native._untooled(True)
        try:
            yield
        finally:
            _native._untooled(False)
        return
    from nvtx import nvtx as module  # type: ignore[import-not-found]
    import nvtx  # type: ignore[import-not-found]

    # Made once: entering costs two module updates, not the copies (a Ray
    # actor enters inside a timed step).
    if not _untooled_cache:
        _untooled_cache.update(untooled_functions(module))
    idle = _untooled_cache
    for target in (module, nvtx):
        _set(target, idle)
    _native._untooled(True)
    try:
        yield
    finally:
        _native._untooled(False)
        for target in (module, nvtx):
            _set(target, _installed)


def untooled_functions(module: ModuleType) -> Dict[str, Any]:
    """Copies of the package's own functions (`original`, else the module's
    now) and of its annotate class over the module's globals, but with a
    domain lookup that gives the dummy domain (an lru_cache as the package's
    own, so a lookup costs what it does with no tool): the package's code as
    it runs with no tool attached, byte for byte (untooled(), and the
    baseline of calibration.py)."""
    source = original or {n: getattr(module, n) for n in _NAMES}
    glb = dict(vars(module))
    dummy = glb["dummy_domain"]

    @functools.lru_cache(maxsize=None)
    def _get_domain_cached(name):  # type: ignore[no-untyped-def]
        return dummy

    glb["_get_domain_cached"] = _get_domain_cached

    def copy(fn: Any) -> Any:
        out = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
        out.__kwdefaults__ = fn.__kwdefaults__
        return out

    glb["get_domain"] = copy(module.get_domain)
    out = {n: copy(source[n]) for n in _NAMES if n != "annotate"}
    cls = source["annotate"]
    out["annotate"] = type(cls.__name__, cls.__bases__,
                           {k: copy(v) if isinstance(v, types.FunctionType) else v for k, v in vars(cls).items()
                            if k not in ("__dict__", "__weakref__")})
    return out


def installed() -> bool:
    """Whether rlscope's entry points are under the package (install())."""
    return bool(original)

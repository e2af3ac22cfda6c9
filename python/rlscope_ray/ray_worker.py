"""Worker-side bootstrap for profiled Ray workers.

The "rlscope" plugin sets this as the worker process setup hook, so it runs in
every profiled worker after it connected to Ray and before it runs any task.
It starts the collector (so a worker that never calls NVTX is still profiled),
labels it with Ray's identities (node, worker, job; actor id, class and name
once the actor exists), and records each task and actor method execution as a
range named after the method, so a CPU-only actor shows what it was doing.

It never fails the worker for its own sake: errors are printed and the worker
runs unprofiled. A user's own setup hook (chained by the plugin) runs first,
and its failure fails the worker as it would without rlscope.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Any, Callable


def bootstrap() -> None:
    from .settings import CHAINED_SETUP_HOOK

    chained = os.environ.get(CHAINED_SETUP_HOOK)
    if chained:
        from ray._private.runtime_env.setup_hook import load_and_execute_setup_hook

        error = load_and_execute_setup_hook(chained)
        if error is not None:
            raise RuntimeError(error)
    try:
        _start()
    except Exception as e:  # never take the worker down
        print(f"rlscope: worker bootstrap failed ({e!r}); this worker is not profiled", file=sys.stderr)


def _start() -> None:
    import ray

    # Importing this module imported the package, which started the collector.
    from . import _native
    from .collector import start_collector

    if not start_collector():
        return
    ctx = ray.get_runtime_context()
    # Re-sent to the aggregator with the next flush (a repeated Hello).
    node = {"node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address(), "job_id": ctx.get_job_id()}
    for key, value in node.items():
        _native.set_label(key, value)
        # The processes this worker starts inherit them (RLSCOPE_LABEL_<KEY>):
        # a child is labelled, and listed, under its parent's node.
        os.environ[_native.names.ENV_LABEL_PREFIX + key.upper()] = value
    _native.set_label("worker_id", ctx.get_worker_id())
    _install_method_spans()


def _install_method_spans() -> None:
    """Wraps what Ray executes for each task and actor method (internal API:
    FunctionActorManager.get_execution_info, Ray 2.4x-2.60)."""
    from ray._private import function_manager

    cls = function_manager.FunctionActorManager
    original = cls.get_execution_info
    if getattr(original, "_rlscope", False):
        return

    def get_execution_info(self, job_id, function_descriptor):
        info = original(self, job_id, function_descriptor)
        if getattr(info.function, "_rlscope", False):
            return info
        try:  # Ray's internals may differ by version: then the task runs unprofiled
            class_name = getattr(function_descriptor, "class_name", "") or ""
            wrapped = info._replace(function=_wrap(info.function, info.function_name, class_name))
            self._function_execution_info[function_descriptor.function_id] = wrapped  # cache the wrapper
            return wrapped
        except Exception:  # noqa: BLE001 - never fail the user's task
            return info

    get_execution_info._rlscope = True  # type: ignore[attr-defined]
    cls.get_execution_info = get_execution_info


def task_key(task_id_hex: str) -> int:
    """A task's 63-bit key: its id's first 16 hex digits (the part unique to the
    task; the rest names the actor and job), 0 when unknown."""
    try:
        return int(task_id_hex[:16], 16) & 0x7FFFFFFFFFFFFFFF if task_id_hex else 0
    except ValueError:
        return 0


def _current_task_id() -> str:
    import ray

    try:
        return ray.get_runtime_context().get_task_id() or ""
    except Exception:
        return ""


def _label_actor(class_name: str) -> None:
    import ray

    from . import _native

    ctx = ray.get_runtime_context()
    _native.set_label("actor_id", ctx.get_actor_id() or "")
    _native.set_label("actor_class", class_name)
    _native.set_label("actor_name", ctx.get_actor_name() or "")
    # The processes this actor starts are labelled as its children.
    os.environ[_native.names.ENV_PARENT_ACTOR] = class_name


def _wrap(fn: Callable[..., Any], name: str, class_name: str) -> Callable[..., Any]:
    from . import _native

    target = getattr(fn, "method", fn)  # actor executors carry the user's method
    name_id = _native.intern(name)
    if name.startswith("__ray") or inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        wrapped = fn
    elif inspect.iscoroutinefunction(target):
        # Async methods interleave on one thread: start/end ranges, not push/pop.
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            coro = fn(*args, **kwargs)

            async def run() -> Any:
                rid = _native.range_start_id(name_id)
                try:
                    return await coro
                finally:
                    _native.range_end(rid)

            return run()
    else:
        is_init = name == "__init__" and bool(class_name)

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if is_init:
                _label_actor(class_name)
            # The task id's prefix links this execution to the controller's
            # submit/get marks (the aggregator's clock causality check).
            _native.range_push_payload(name_id, task_key(_current_task_id()))
            try:
                return fn(*args, **kwargs)
            finally:
                _native.range_pop()

    if wrapped is not fn:
        for attr in ("name", "method"):  # Ray inspects these on actor executors
            if hasattr(fn, attr):
                setattr(wrapped, attr, getattr(fn, attr))
    try:
        wrapped._rlscope = True  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return wrapped

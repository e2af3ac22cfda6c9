"""rlscope for verl, with nothing in verl edited: the "verl.plugins" entry point.

verl imports every "verl.plugins" entry point on each `import verl`, in every
process (verl/__init__.py). This module then:
- wraps `ray.init` (verl's `main_ppo.run_ppo` calls it in the driver): when the
  verl config in scope says `global_profiler.tool: rlscope`, it maps verl's
  selection onto ours (config_from_verl) and starts the session instead
  (rlscope_ray.session.init: aggregator, the Ray plugin registered for this
  local Ray, every actor profiled through the job's runtime_env). The driver
  itself is not profiled: verl's controller is its TaskRunner actor;
- adds an "rlscope" backend to verl's DistProfiler (workers: `annotate`
  ranges such as "actor_update", start/stop marks);
- follows the trainer's steps: the process whose verl `step` range opens
  (`marked_timer("step")`, in every verl 0.9 trainer: RayPPOTrainer, V1, and
  the experimental separation, one_step_off_policy and fully_async_policy
  ones) claims the controller role, and its steps carry the trainer's own
  counter, `global_steps` (a resumed run's profiles say step 201, not step
  1). `SkipManager.set_step`, which the RayPPOTrainer and V1 trainers call
  before each step, is followed too (the experimental ones never call it).

Any failure here is printed and leaves verl as it was: `import verl` never
fails because of rlscope.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Dict, List, Optional

from .settings import RLScopeConfigError

TOOL = "rlscope"
#: verl's per-role profiler configs (ppo_trainer.yaml); the rollout's follows the actor's.
ROLE_PROFILERS = ("actor_rollout_ref.actor.profiler", "actor_rollout_ref.ref.profiler", "critic.profiler")
#: Our own config keys, passed through as they are.
EXTRA_KEYS = "global_profiler.global_tool_config.rlscope"


# ---------------------------------------------------------------- mapping


def _select(cfg: Any, path: str, default: Any = None) -> Any:
    node = cfg
    for part in path.split("."):
        if node is None:
            return default
        try:
            node = node.get(part) if hasattr(node, "get") else getattr(node, part, None)
        except Exception:  # noqa: BLE001 - OmegaConf raises on missing struct keys
            return default
    return default if node is None else node


def _plain(value: Any) -> Any:
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        pass
    return value


def _role_ranks(cfg: Any, role: str) -> Optional[Any]:
    """The ranks a role's profiler selects as verl's DistProfiler does:
    "all", a list, or [0] when enabled without ranks; None when disabled."""
    if not _select(cfg, role + ".enable", False):
        return None
    if _select(cfg, role + ".all_ranks", False):
        return "all"
    ranks = [int(r) for r in (_plain(_select(cfg, role + ".ranks")) or [])]
    return sorted(set(ranks)) or [0]


def config_from_verl(cfg: Any) -> Dict[str, Any]:
    """rlscope's config for a verl config whose `global_profiler.tool` is
    "rlscope": the same steps and ranks verl would profile with nsys, its
    `discrete`, its `save_path`, and the keys under
    `global_profiler.global_tool_config.rlscope`. Raises RLScopeConfigError
    naming the verl key when a setting cannot be honoured."""
    steps = _plain(_select(cfg, "global_profiler.steps"))
    if not steps:
        raise RLScopeConfigError(
            "global_profiler.steps is not set: with global_profiler.tool=rlscope verl profiles only the listed "
            "steps (verl's global_steps, from 1); set e.g. global_profiler.steps=[2,3]")
    if not isinstance(steps, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in steps):
        raise RLScopeConfigError(f"global_profiler.steps must be a list of step numbers, got {steps!r}")
    out: Dict[str, Any] = {"steps": trainer_steps(cfg, sorted(set(steps)))}

    selected = {role: _role_ranks(cfg, role) for role in ROLE_PROFILERS}
    enabled = {role: r for role, r in selected.items() if r is not None}
    if not enabled:
        raise RLScopeConfigError(
            "no worker role is profiled: set actor_rollout_ref.actor.profiler.enable=true (and its ranks or "
            "all_ranks; the rollout follows the actor), or that of actor_rollout_ref.ref or critic")
    distinct = {repr(r) for r in enabled.values()}
    if len(distinct) > 1:
        listed = ", ".join(f"{role}.ranks={r}" for role, r in enabled.items())
        raise RLScopeConfigError(
            f"the profiled roles select different ranks ({listed}): rlscope selects one set of ranks for every "
            "process; give the enabled roles the same ranks (or all_ranks)")
    out["ranks"] = next(iter(enabled.values()))

    discrete = {"global_profiler.global_tool_config.nsys.discrete":
                _select(cfg, "global_profiler.global_tool_config.nsys.discrete", False)}
    for role in enabled:
        discrete[role + ".tool_config.nsys.discrete"] = _select(cfg, role + ".tool_config.nsys.discrete", False)
    if len({bool(v) for v in discrete.values()}) > 1 and any(
            k != "global_profiler.global_tool_config.nsys.discrete" and not v for k, v in discrete.items()):
        on = [k for k, v in discrete.items() if v]
        raise RLScopeConfigError(f"discrete is set only by {', '.join(on)}: rlscope captures every profiled "
                                 "process the same way; set it for every enabled role or in global_profiler")
    if any(discrete.values()):
        out["discrete"] = True

    save_path = _select(cfg, "global_profiler.save_path")
    if save_path:
        out["output_dir"] = str(save_path)
    extra = _plain(_select(cfg, EXTRA_KEYS))
    if extra:
        if not isinstance(extra, dict):
            raise RLScopeConfigError(f"{EXTRA_KEYS} must be a mapping of rlscope config keys, got {extra!r}")
        from .settings import check_value, dict_layer, merge

        try:
            check_value(extra)
            out = merge([dict_layer(out, "verl's global_profiler"), dict_layer(extra, EXTRA_KEYS)])
        except RLScopeConfigError as e:
            raise RLScopeConfigError(f"{EXTRA_KEYS}: {e}") from None
    return out


def trainer_steps(cfg: Any, steps: List[int]) -> List[int]:
    """The trainer steps (its `global_steps`, one per `step` range) that
    verl's `global_profiler.steps` selects. The same numbers, except in the
    fully async trainer (`async_training.trigger_parameter_sync_step` K):
    there verl profiles parameter versions, version v being the K trainer
    steps (v-1)*K+1 .. v*K (fully_async_trainer.py: `current_param_version +
    1 in steps`)."""
    k = _select(cfg, "async_training.trigger_parameter_sync_step")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        return steps
    return sorted({(v - 1) * k + j for v in steps if v >= 1 for j in range(1, k + 1)})


# ---------------------------------------------------------------- the driver


def find_verl_config(frame: Any, depth: int = 8) -> Any:
    """The verl config in the callers' scope (`config` in `run_ppo` and the
    recipes that copy it), or None."""
    while frame is not None and depth > 0:
        cfg = frame.f_locals.get("config")
        if cfg is not None and _select(cfg, "global_profiler") is not None:
            return cfg
        frame, depth = frame.f_back, depth - 1
    return None


_in_session_init = False


def _wrap_ray_init() -> None:
    import ray

    original = ray.init
    if getattr(original, "_rlscope", False):
        return

    @functools.wraps(original)
    def init(*args: Any, **kwargs: Any) -> Any:
        if _in_session_init or args or ray.is_initialized():
            return original(*args, **kwargs)
        cfg = find_verl_config(sys._getframe(1))
        if cfg is None or _select(cfg, "global_profiler.tool") != TOOL:
            return original(*args, **kwargs)
        return _start_session(cfg, kwargs)

    init._rlscope = True  # type: ignore[attr-defined]
    ray.init = init


def _start_session(cfg: Any, ray_init_kwargs: Dict[str, Any]) -> Any:
    global _in_session_init
    import importlib.util

    if importlib.util.find_spec("nvtx") is None:
        raise RLScopeConfigError(
            "global_profiler.tool=rlscope needs the `nvtx` package: verl's marked_timer only opens its `step` "
            "and sub-task ranges with it (pip install nvtx, or rlscope-ray[verl])")
    from . import session

    ours = config_from_verl(cfg)
    kwargs = dict(ray_init_kwargs)
    runtime_env = dict(kwargs.pop("runtime_env", None) or {})
    # Every actor of the job is profiled: an "rlscope" value in the job's
    # runtime_env reaches them all (verl's worker groups replace only their
    # own runtime_env). A user's own value there still wins key by key.
    runtime_env.setdefault("rlscope", {})
    address = kwargs.pop("address", None)
    _in_session_init = True
    try:
        s = session.init(ours, address=address, runtime_env=runtime_env, profile_driver=False, **kwargs)
    finally:
        _in_session_init = False
    print(f"rlscope: profiling verl steps {ours['steps']}, ranks {ours['ranks']} into {s.output_dir} "
          f"(aggregator {s.endpoint})", file=sys.stderr)
    return s.ray_context


# ---------------------------------------------------------------- workers


class RLScopeVerlProfiler:
    """verl's DistProfiler backend for `tool: rlscope`. What a step records
    is decided by the run's config (the aggregator's windows), so start/stop
    only mark verl's calls; `annotate` opens the stage ranges verl names
    (`role=`: "actor_update", "ref_compute_log_prob", ...)."""

    def __init__(self, rank: int, config: Any = None) -> None:
        self.rank = rank
        self.config = config

    def start(self, role: Optional[str] = None, profile_step: Optional[int] = None, **_: Any) -> None:
        from . import _native

        _native.mark_payload(_native.intern("verl.start_profile"), int(profile_step or 0))

    def stop(self) -> None:
        from . import _native

        _native.mark_payload(_native.intern("verl.stop_profile"), 0)

    def step(self) -> None:
        return None

    def annotate(self, message: Optional[str] = None, color: Any = None, domain: Any = None,
                 category: Any = None, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        import rlscope_ray

        def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            return rlscope_ray.range(kwargs.get("role") or message or func.__name__)(func)

        return decorator


def _add_dist_profiler_backend() -> None:
    from verl.utils.profiler import profile

    cls = profile.DistProfiler
    original = cls.__init__
    if getattr(original, "_rlscope", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, rank: int, config: Any = None, *args: Any, **kwargs: Any) -> None:
        original(self, rank, config, *args, **kwargs)
        if getattr(self, "_tool", None) == TOOL:
            self._impl = RLScopeVerlProfiler(rank, self.config)

    __init__._rlscope = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


# ---------------------------------------------------------------- the trainer


def on_verl_step(step: Optional[int]) -> None:
    """verl's trainer is about to run step `step` (its global_steps; None
    when not known): this process drives the run. Claims the controller role
    (once) and numbers the next step. Nothing without a collector here."""
    from . import _native

    if not _native.intern(_native.names.STEP):
        return  # no collector runs in this process
    from . import session

    if session.become_controller():
        session.before_step()  # the list of actors that should connect, now
    if isinstance(step, int) and step >= 0:
        _native.set_next_step(step)


def trainer_step_number(frame: Any, depth: int = 6) -> Optional[int]:
    """The step counter of the trainer whose code opened a verl range: the
    `global_steps` of the nearest caller's `self` that has one (every verl
    0.9 trainer keeps it), or None."""
    while frame is not None and depth > 0:
        n = getattr(frame.f_locals.get("self"), "global_steps", None)
        if isinstance(n, int) and not isinstance(n, bool):
            return n
        frame, depth = frame.f_back, depth - 1
    return None


def _hook_step_ranges() -> None:
    """verl's `marked_timer` opens its ranges through
    `nvtx_profile.mark_start_range` (a module global, looked up per call):
    a `step` range makes its process the controller, numbered by its
    trainer. Nothing without the `nvtx` package (verl then opens no range)."""
    import importlib.util

    if importlib.util.find_spec("nvtx") is None:
        return
    from verl.utils.profiler import nvtx_profile

    original = nvtx_profile.mark_start_range
    if getattr(original, "_rlscope", False):
        return

    @functools.wraps(original)
    def mark_start_range(message: Optional[str] = None, *args: Any, **kwargs: Any) -> Any:
        if message == "step":
            try:
                on_verl_step(trainer_step_number(sys._getframe(1)))
            except Exception as e:  # noqa: BLE001 - never fail the trainer
                print(f"rlscope: could not follow verl's step range: {e!r}", file=sys.stderr)
        return original(message, *args, **kwargs)

    mark_start_range._rlscope = True  # type: ignore[attr-defined]
    nvtx_profile.mark_start_range = mark_start_range


def _hook_step_numbers() -> None:
    from verl.utils.skip.skip_manager import SkipManager

    original = SkipManager.__dict__["set_step"]
    func = original.__func__ if isinstance(original, classmethod) else original
    if getattr(func, "_rlscope", False):
        return

    @functools.wraps(func)
    def set_step(cls: Any, step: int) -> None:
        func(cls, step)
        try:
            on_verl_step(step)
        except Exception as e:  # noqa: BLE001 - never fail the trainer
            print(f"rlscope: could not follow verl's step {step}: {e!r}", file=sys.stderr)

    set_step._rlscope = True  # type: ignore[attr-defined]
    SkipManager.set_step = classmethod(set_step)


def _load() -> List[str]:
    """Installs each hook; returns the errors (each also printed)."""
    errors = []
    for hook in (_wrap_ray_init, _add_dist_profiler_backend, _hook_step_ranges, _hook_step_numbers):
        try:
            hook()
        except Exception as e:  # noqa: BLE001 - `import verl` must not fail because of us
            errors.append(f"{hook.__name__}: {e!r}")
            print(f"rlscope: verl plugin: {hook.__name__} failed ({e!r}); rlscope's verl support is partial",
                  file=sys.stderr)
    return errors


LOAD_ERRORS = _load()

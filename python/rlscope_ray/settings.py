"""What a runtime_env "rlscope" value means: validation, defaults, env vars.

Pure policy with no Ray import, so it is testable on its own. The Ray plugin
(ray_plugin.py) calls it in each node's runtime-env agent; rlscope_ray.init()
calls it in the driver.

Ray replaces a child's "rlscope" value wholesale (no deep merge), but merges
``env_vars`` key by key. So rlscope_ray.init() puts the job's defaults into
the job's env_vars (RLSCOPE_JOB_*), and resolve() merges them under each
actor's own value.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _native

_names = _native.names
#: Keys of the "rlscope" value that are not config keys.
PLUGIN_KEYS = ("enabled", "config", "rank", "role", "aggregator")
#: Environment variables the collector reads (names spelled once, native/names.h).
AGGREGATOR = _names.ENV_AGGREGATOR
CONFIG = _names.ENV_CONFIG
ROLE = _names.ENV_ROLE
RANK = _names.ENV_RANK
#: Set by rlscope_ray.init() in the job's env_vars (they reach every worker).
JOB_AGGREGATOR = "RLSCOPE_JOB_AGGREGATOR"
JOB_CONFIG = "RLSCOPE_JOB_CONFIG"
JOB_DEFAULTS = "RLSCOPE_JOB_DEFAULTS"
# The run's secret (Hello.secret), made by rlscope_ray.init for each run; the
# plugin hands it to every profiled worker as RLSCOPE_SECRET.
JOB_SECRET = "RLSCOPE_JOB_SECRET"
SECRET = _names.ENV_SECRET
#: Set by the plugin on every worker whose runtime_env has "rlscope" (even
#: disabled), so a driver can tell whether a node has the plugin registered.
PLUGIN_MARKER = "RLSCOPE_PLUGIN_VERSION"
PLUGIN_VERSION = "1"
#: The process the profiler's environment was set up for (collector/environment.cc,
#: Collector::Start): its collector sets it to its pid, so that a process that
#: merely inherited the environment (a child, Ray's helper processes) is not
#: profiled. Empty: not claimed yet, as the plugin leaves it for each worker.
OWNER_PID = _names.ENV_OWNER_PID
#: Set by the plugin when a worker already had a setup hook; the worker's
#: bootstrap (ray_worker.py) runs it first.
CHAINED_SETUP_HOOK = "RLSCOPE_CHAINED_SETUP_HOOK"
WHERE = "runtime_env['rlscope']"


class RLScopeConfigError(ValueError):
    """A bad "rlscope" value or config; the message says which key and why."""


#: One config layer: (YAML or JSON text, its source, whether its errors may
#: name lines: False for a text generated here from a dict).
Layer = Tuple[str, str, bool]


def merge(layers: Sequence[Layer]) -> Dict[str, Any]:
    """The layers merged natively, each over those before it (native/config.h
    MergeConfigLayers: the one merge there is); the keys they set, as the
    native parser read them. Errors name each layer's source:line:col and key."""
    text, errors = _native.merge_config(list(layers))
    if errors:
        raise RLScopeConfigError("\n".join(errors))
    return json.loads(text)


def dict_layer(config: Mapping[str, Any], source: str = WHERE) -> Layer:
    """A layer of config keys given as a dict (its errors name `source`)."""
    return (json.dumps(dict(config)), source, False)


def file_layer(path: str) -> Layer:
    try:
        with open(path, encoding="utf-8") as f:
            return (f.read(), path, True)
    except OSError as e:
        raise RLScopeConfigError(f"{path}: cannot read the config file ({e.strerror})") from None


def load_config_file(path: str) -> Dict[str, Any]:
    """The keys a config file sets (errors with line numbers)."""
    return merge([file_layer(path)])


def value_layers(value: Mapping[str, Any]) -> List[Layer]:
    """The config layers of an "rlscope" value: its config file, then its
    own keys over it."""
    layers = [file_layer(value["config"])] if value.get("config") else []
    inline = {k: v for k, v in value.items() if k not in PLUGIN_KEYS}
    return layers + ([dict_layer(inline)] if inline else [])


def endpoint(explicit: "list[Optional[str]]", config: Mapping[str, Any]) -> Optional[str]:
    """The aggregator endpoint by the one rule (native/config.h ResolveEndpoint):
    the first explicit value that is set and not "auto", else the config's
    ``aggregator`` unless "auto"; None when there is none."""
    found = _native.resolve_endpoint([v or "" for v in explicit], str(config.get("aggregator") or "auto"))
    return found or None


def check_value(value: Any) -> Dict[str, Any]:
    """Shape checks of an "rlscope" value on its own (the plugin's validate)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RLScopeConfigError(f"{WHERE} must be a dict like {{'rank': 0}}, got {type(value).__name__}")
    if "enabled" in value and not isinstance(value["enabled"], bool):
        raise RLScopeConfigError(f"{WHERE}['enabled'] must be true or false, got {value['enabled']!r}")
    if "rank" in value:
        rank = value["rank"]
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise RLScopeConfigError(f"{WHERE}['rank'] must be an integer >= 0, got {rank!r}")
    if "role" in value and value["role"] not in (_names.WORKER, _names.CONTROLLER):
        raise RLScopeConfigError(
            f"{WHERE}['role'] must be '{_names.WORKER}' or '{_names.CONTROLLER}', got {value['role']!r}")
    for key in ("config", "aggregator"):
        if key in value and not (isinstance(value[key], str) and value[key]):
            raise RLScopeConfigError(f"{WHERE}['{key}'] must be a non-empty string, got {value[key]!r}")
    inline = {k: v for k, v in value.items() if k not in PLUGIN_KEYS}
    if inline:
        merge([dict_layer(inline)])  # names the bad key
    return value


def resolve(value: Any, job_env: Mapping[str, str]) -> Optional[Dict[str, str]]:
    """The env vars a profiled worker gets, or None when it opts out.

    ``job_env`` is the worker's env_vars so far (the job's RLSCOPE_JOB_* are
    there when rlscope_ray.init() started the job).
    """
    own = check_value(value)
    defaults = json.loads(job_env.get(JOB_DEFAULTS) or "{}")
    # The plugin's own keys: the actor's over the job's (single values).
    merged = {k: v for k, v in {**defaults, **own}.items() if k in PLUGIN_KEYS}
    if merged.get("enabled", True) is False:
        return None
    # The config: the run's, then the config file, then the job's keys, then
    # the actor's own.
    layers: List[Layer] = [(job_env.get(JOB_CONFIG) or "{}", JOB_CONFIG, False)]
    if merged.get("config"):
        layers.append(file_layer(merged["config"]))
    for part in (defaults, own):
        inline = {k: v for k, v in part.items() if k not in PLUGIN_KEYS}
        if inline:
            layers.append(dict_layer(inline))
    config = merge(layers)
    aggregator = endpoint([merged.get("aggregator"), job_env.get(JOB_AGGREGATOR)], config)
    if aggregator is None:
        raise RLScopeConfigError(
            f"{WHERE}: no aggregator to send to: call rlscope_ray.init() in the driver, "
            "or set 'aggregator': 'tcp://host:port'")
    from .collector import collector_path

    env = {
        AGGREGATOR: aggregator,
        CONFIG: json.dumps(config, sort_keys=True),
        ROLE: merged.get("role", _names.WORKER),
        "NVTX_INJECTION64_PATH": collector_path(),
        # Loaded by the CUDA driver at its init (never earlier); it does nothing
        # unless capture_range is cudaProfilerApi (and, later, GPU tracing).
        "CUDA_INJECTION64_PATH": collector_path(),
        PLUGIN_MARKER: PLUGIN_VERSION,
        # The worker inherits the raylet's environment, which may carry the
        # driver's claim: this worker's own collector claims it anew.
        OWNER_PID: "",
    }
    if "rank" in merged:
        env[RANK] = str(merged["rank"])
    if job_env.get(JOB_SECRET):
        env[SECRET] = job_env[JOB_SECRET]
        if not merged.get("aggregator"):
            # The run's relay on this host (rlscope_ray.relay), when it has
            # one: the worker's collector connects to it, not to the root.
            from .relay import host_relay

            env[AGGREGATOR] = host_relay(job_env[JOB_SECRET]) or env[AGGREGATOR]
    return env


def run_config(layers: Sequence[Layer], job_value: Any) -> Dict[str, Any]:
    """The run's config (README "One config per run"): init's ``config``
    layers with the config file and keys of the job's "rlscope" value over
    them, as every actor's collector gets them (resolve); the driver (the
    controller) and the aggregator use the same."""
    return merge(list(layers) + value_layers(check_value(job_value)))

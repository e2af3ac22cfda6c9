"""The "rlscope" Ray runtime_env plugin: one small adapter over settings.py.

Register it on every node before the raylet starts (rlscope_ray.init() does
it for a local cluster):

    export RAY_RUNTIME_ENV_PLUGINS='[{"class":"rlscope_ray.ray_plugin.RLScopePlugin","priority":50}]'

It runs in each node's runtime-env agent, never in the worker. It only adds
env vars (the collector path for NVTX injection, config, aggregator endpoint,
rank, role) and the worker bootstrap; it never rewrites py_executable, so it
composes with other plugins. Priority 50: after the built-ins (10).
"""
from __future__ import annotations

import logging
from typing import List

from ray._private.runtime_env.plugin import RuntimeEnvPlugin  # DeveloperAPI

from . import settings

SETUP_HOOK_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
CHAINED_HOOK_VAR = settings.CHAINED_SETUP_HOOK
BOOTSTRAP = "rlscope_ray.ray_worker.bootstrap"
PLUGIN_SPEC = {"class": "rlscope_ray.ray_plugin.RLScopePlugin", "priority": 50}


class RLScopePlugin(RuntimeEnvPlugin):
    name = "rlscope"
    priority = 50

    @staticmethod
    def validate(runtime_env_dict: dict) -> None:
        settings.check_value(runtime_env_dict.get("rlscope"))

    def modify_context(self, uris: List[str], runtime_env, context, logger: logging.Logger) -> None:
        env_vars = context.env_vars
        env_vars[settings.PLUGIN_MARKER] = settings.PLUGIN_VERSION
        env = settings.resolve(runtime_env.get("rlscope"), env_vars)
        if env is None:
            logger.info("rlscope: profiling disabled for this runtime_env")
            return
        existing = env_vars.get("NVTX_INJECTION64_PATH")
        if existing and existing != env["NVTX_INJECTION64_PATH"]:
            logger.warning("rlscope: NVTX_INJECTION64_PATH already names %s (another NVTX tool); "
                           "rlscope records only its Python API and Ray method spans here", existing)
            del env["NVTX_INJECTION64_PATH"]
        existing = env_vars.get("CUDA_INJECTION64_PATH")
        if existing and existing != env["CUDA_INJECTION64_PATH"]:
            logger.warning("rlscope: CUDA_INJECTION64_PATH already names %s; the cudaProfilerApi trigger is off "
                           "in this worker", existing)
            del env["CUDA_INJECTION64_PATH"]
        hook = env_vars.get(SETUP_HOOK_VAR)
        if hook and hook != BOOTSTRAP:
            env[CHAINED_HOOK_VAR] = hook  # the user's worker setup hook still runs, first
        env[SETUP_HOOK_VAR] = BOOTSTRAP
        env_vars.update(env)
        logger.info("rlscope: profiling with rank=%s role=%s aggregator=%s", env.get(settings.RANK),
                    env[settings.ROLE], env[settings.AGGREGATOR])

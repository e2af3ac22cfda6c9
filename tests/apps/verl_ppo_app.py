"""verl's own `main_ppo.run_ppo` on CPU, configured as a user configures it.

    verl_ppo_app.py OUT [--first-step N] [--total N] [override ...]

The config is verl's `ppo_trainer.yaml` composed by Hydra with the given
overrides (the same ones a user passes to `python -m verl.trainer.main_ppo`,
e.g. `global_profiler.tool=rlscope global_profiler.steps=[2,3]
actor_rollout_ref.actor.profiler.enable=true`), plus `global_profiler.save_path=OUT`
and a small Ray (4 logical CPUs). verl's `run_ppo` calls `ray.init` and
creates the TaskRunner actor; nothing of verl is edited, rlscope comes in
through its "verl.plugins" entry point.

The TaskRunner is small (verl's real trainers need models, data and a
rollout engine): it drives two real `RayWorkerGroup` workers (verl `Worker`
with `DistProfilerExtension`, `DistProfiler.annotate`d methods) through the
sequence of verl's V1 trainer: `SkipManager.set_step(global_steps)`, then
`marked_timer("step")` holding `_start_profiling` (`start_profile(role="train",
profile_step=global_steps)` on the selected steps), the sub-tasks gen, reward,
old_log_prob, adv (colour "brown", which the `nvtx` package rejects without
matplotlib) and update_actor, and `_stop_profiling`. `--first-step N` is a
resumed run: global_steps starts at N as after loading checkpoint N-1.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import ray
from omegaconf import OmegaConf

from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.profiler import DistProfiler, DistProfilerExtension, marked_timer


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


class PPOWorker(Worker, DistProfilerExtension):
    def __init__(self, profiler_config):
        Worker.__init__(self)
        DistProfilerExtension.__init__(self, DistProfiler(rank=self.rank, config=profiler_config))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def generate_sequences(self, ms: float) -> int:
        _busy(ms)
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
    def compute_log_prob(self, ms: float) -> int:
        _busy(ms)
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="red", role="actor_update")
    def update_actor(self, ms: float) -> int:
        _busy(ms)
        return self.rank


@ray.remote(num_cpus=1)
class TaskRunner:
    def run(self, config) -> None:
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.skip.skip_manager import SkipManager

        OmegaConf.resolve(config)
        profiler_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor.profiler)
        pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
        cls = RayClassWithInitArgs(cls=ray.remote(PPOWorker), profiler_config=profiler_config)
        wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, device_name="cpu")
        profile_steps = config.global_profiler.steps or []

        global_steps = FIRST_STEP - 1  # as loaded from checkpoint FIRST_STEP - 1
        global_steps += 1
        SkipManager.set_step(global_steps)
        while global_steps <= TOTAL:
            timing_raw: dict = {}
            with marked_timer("step", timing_raw):
                profile = global_steps in profile_steps
                if profile:
                    wg.start_profile(role="train", profile_step=global_steps)
                with marked_timer("gen", timing_raw, color="red"):
                    wg.generate_sequences(30)
                with marked_timer("reward", timing_raw, color="yellow"):
                    _busy(5)
                with marked_timer("old_log_prob", timing_raw, color="blue"):
                    wg.compute_log_prob(10)
                with marked_timer("adv", timing_raw, color="brown"):
                    _busy(5)
                with marked_timer("update_actor", timing_raw, color="red"):
                    wg.update_actor(20)
                if profile:
                    wg.stop_profile(run_command=global_steps == max(profile_steps))
            global_steps += 1
            SkipManager.set_step(global_steps)
        if REPORT:
            with open(REPORT, "w") as f:
                json.dump({"task_runner_pid": os.getpid()}, f)


# Set by main() before run_ppo: the TaskRunner class is pickled with them.
FIRST_STEP, TOTAL, REPORT = 1, 4, ""


def compose(out: str, overrides: list) -> "OmegaConf":
    import verl.trainer
    from hydra import compose as hydra_compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=[
            f"global_profiler.save_path={out}", "trainer.device=cpu", "+ray_kwargs.ray_init.num_cpus=4",
            *overrides])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--first-step", type=int, default=1)
    ap.add_argument("--total", type=int, default=4)
    ap.add_argument("--report", help="the TaskRunner writes its pid here (JSON)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_intermixed_args()
    config = compose(os.path.abspath(args.out), args.overrides)

    global FIRST_STEP, TOTAL, REPORT
    FIRST_STEP, TOTAL, REPORT = args.first_step, args.total, os.path.abspath(args.report) if args.report else ""
    from verl.trainer.main_ppo import run_ppo

    run_ppo(config, task_runner_class=TaskRunner)


if __name__ == "__main__":
    main()

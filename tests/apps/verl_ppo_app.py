"""verl's own `main_ppo.run_ppo` on CPU, configured as a user configures it.

    verl_ppo_app.py OUT [--shape v1|separation|one_step_off|fully_async]
                    [--first-step N] [--total N] [override ...]

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

The other shapes are verl 0.9.1's experimental trainers, run as verl runs
them (`run_ppo` with their task runner) with the same workers, in the order
of their `fit`/`fit_step` (verl/experimental/...), none calling
`SkipManager.set_step`:
- separation (separation/ray_trainer.py): the task runner's trainer, sync,
  `fit_step` numbered by `self.global_steps`, incremented after the step;
- one_step_off (one_step_off_policy/): an async `fit` under `asyncio.run` in a
  `max_concurrency=100` task runner; the next batch's generation is started
  before the current step's training (`generate_async`) and awaited in `gen`;
- fully_async (fully_async_policy/): the task runner creates a trainer actor
  (async `fit`/`fit_step`, `global_steps` per fit_step, `current_param_version`
  moving every `async_training.trigger_parameter_sync_step` steps) and a
  rollouter actor (`max_concurrency=100`) whose agent-loop coroutines
  interleave `nvtx.start_range`/`end_range` across awaits, sending each
  request to a rollout engine it started with multiprocessing spawn (as vLLM
  starts its engine core) which annotates its work with `nvtx.annotate`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
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
        steps_end = []  # time.monotonic() at each step's end (the report's, for benchmarks)
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
            steps_end.append(time.monotonic())
            global_steps += 1
            SkipManager.set_step(global_steps)
        _report(steps_end_monotonic=steps_end)


def _worker_group(config):
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.utils.config import omega_conf_to_dataclass

    OmegaConf.resolve(config)
    profiler_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor.profiler)
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    cls = RayClassWithInitArgs(cls=ray.remote(PPOWorker), profiler_config=profiler_config)
    return RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, device_name="cpu")


class SeparationTrainer:
    """separation/ray_trainer.py's fit and fit_step, in order."""

    def __init__(self, wg, config):
        self.wg, self.config = wg, config
        self.global_steps = FIRST_STEP - 1
        self.timing_raw: dict = {}

    def profile(self) -> bool:
        return self.global_steps in (self.config.global_profiler.steps or [])

    def fit(self) -> None:
        self.global_steps += 1
        while self.global_steps <= TOTAL:
            self.fit_step()

    def fit_step(self) -> None:
        self.timing_raw = {}
        with marked_timer("start_profile", self.timing_raw):
            if self.profile():
                self.wg.start_profile(role="train", profile_step=self.global_steps)
        with marked_timer("step", self.timing_raw):
            with marked_timer("gen", self.timing_raw, color="red"):
                self.wg.generate_sequences(30)
            self.train_sub_tasks()
        with marked_timer("stop_profile", self.timing_raw):
            if self.profile():
                self.wg.stop_profile()
        self.global_steps += 1  # _fit_postprocess_step

    def train_sub_tasks(self) -> None:
        with marked_timer("reward", self.timing_raw, color="yellow"):
            _busy(5)
        with marked_timer("old_log_prob", self.timing_raw, color="blue"):
            self.wg.compute_log_prob(10)
        with marked_timer("adv", self.timing_raw, color="brown"):
            _busy(5)
        with marked_timer("update_actor", self.timing_raw, color="red"):
            self.wg.update_actor(20)


class OneStepOffTrainer(SeparationTrainer):
    """one_step_off_policy/ray_trainer.py: async fit; the next batch is
    generated while this one trains (generate_async, awaited in gen)."""

    async def fit(self) -> None:
        self.global_steps += 1
        pending = self.generate_async()
        while self.global_steps <= TOTAL:
            pending = await self.fit_step(pending)

    def generate_async(self):
        return asyncio.ensure_future(asyncio.wrap_future(self.wg.workers[0].generate_sequences.remote(30).future()))

    async def fit_step(self, pending):
        self.timing_raw = {}
        if self.profile():
            self.wg.start_profile(role="train", profile_step=self.global_steps)
        with marked_timer("step", self.timing_raw):
            with marked_timer("gen", self.timing_raw, color="red"):
                await pending
            pending = self.generate_async() if self.global_steps < TOTAL else None
            self.train_sub_tasks()
        if self.profile():
            self.wg.stop_profile()
        self.global_steps += 1
        return pending


@ray.remote(num_cpus=1, max_concurrency=100)
class OneStepTaskRunner:
    def run(self, config) -> None:
        asyncio.run(OneStepOffTrainer(_worker_group(config), config).fit())
        _report()


@ray.remote(num_cpus=1)
class SeparationTaskRunner:
    def run(self, config) -> None:
        SeparationTrainer(_worker_group(config), config).fit()
        _report()


# A rollout engine's core process (as vLLM's EngineCore): requests in,
# annotated work, replies out, until None. Its code is run by `exec` in a
# multiprocessing spawn child: a function of this script could not be
# pickled by reference inside a Ray worker, whose __main__ is Ray's.
ENGINE_CORE = """
import time
import nvtx
while (request := conn.recv()) is not None:
    with nvtx.annotate("engine_step"):
        end = time.perf_counter() + request / 1000.0
        while time.perf_counter() < end:
            pass
    conn.send(request)
"""


@ray.remote(num_cpus=0, max_concurrency=100)
class FullyAsyncRollouter:
    """fully_async_rollouter.py's shape: agent-loop coroutines on one thread,
    each a start/end range held across awaits, served by an engine process."""

    def __init__(self):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.engine = ctx.Process(target=exec, args=(ENGINE_CORE, {"conn": child}), daemon=True)
        self.engine.start()
        self.lock = asyncio.Lock()
        self.version = 0

    async def agent_loop(self, i: int) -> int:
        import nvtx

        rng = nvtx.start_range(message="agent_loop")
        await asyncio.sleep(0.002 * (i % 3))  # the others run meanwhile
        async with self.lock:
            self.conn.send(3)
            await asyncio.get_running_loop().run_in_executor(None, self.conn.recv)
        nvtx.end_range(rng)
        return i

    async def generate(self, n: int) -> int:
        return len(await asyncio.gather(*(self.agent_loop(i) for i in range(n))))

    def update_weights(self, version: int) -> None:
        self.version = version

    def engine_pid(self) -> int:
        return self.engine.pid

    def stop(self) -> None:
        self.conn.send(None)
        self.engine.join(10)


@ray.remote(num_cpus=0)
class FullyAsyncTrainer:
    """fully_async_trainer.py's fit and fit_step, in order."""

    def __init__(self, config, rollouter):
        self.config, self.rollouter = config, rollouter
        self.wg = _worker_group(config)
        self.global_steps = 0
        self.current_param_version = 0
        self.local_trigger_step = 1
        self.trigger_parameter_sync_step = config.async_training.trigger_parameter_sync_step

    async def fit(self) -> int:
        self.global_steps += 1
        while self.global_steps <= TOTAL:
            await self.fit_step()
        return os.getpid()

    async def fit_step(self) -> None:
        timing_raw: dict = {}
        steps = self.config.global_profiler.steps
        should_profile = steps is not None and (self.current_param_version + 1) in steps
        if should_profile:
            self.wg.start_profile(role="train", profile_step=self.current_param_version)
        with marked_timer("step", timing_raw):
            with marked_timer("gen", timing_raw, color="red"):
                await self.rollouter.generate.remote(4)
            with marked_timer("old_log_prob", timing_raw, color="blue"):
                self.wg.compute_log_prob(10)
            with marked_timer("update_actor", timing_raw, color="red"):
                self.wg.update_actor(20)
            if self.local_trigger_step < self.trigger_parameter_sync_step:  # _fit_update_local_step
                self.local_trigger_step += 1
            else:
                self.current_param_version += 1
                self.local_trigger_step = 1
            if self.local_trigger_step == 1:  # _fit_update_weights
                with marked_timer("timing_s/param_sync", timing_raw):
                    await self.rollouter.update_weights.remote(self.current_param_version)
        if should_profile:
            self.wg.stop_profile()
        self.global_steps += 1  # _fit_postprocess_step


@ray.remote(num_cpus=1)
class FullyAsyncTaskRunner:
    def run(self, config) -> None:
        rollouter = FullyAsyncRollouter.remote()
        trainer = FullyAsyncTrainer.remote(config, rollouter)
        trainer_pid = ray.get(trainer.fit.remote())
        engine_pid = ray.get(rollouter.engine_pid.remote())
        ray.get(rollouter.stop.remote())
        _report(trainer_pid=trainer_pid, engine_pid=engine_pid)


def _report(**more) -> None:
    if REPORT:
        with open(REPORT, "w") as f:
            json.dump({"task_runner_pid": os.getpid(), **more}, f)


SHAPES = {"v1": TaskRunner, "separation": SeparationTaskRunner, "one_step_off": OneStepTaskRunner,
          "fully_async": FullyAsyncTaskRunner}


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
    ap.add_argument("--shape", choices=sorted(SHAPES), default="v1", help="which verl trainer's loop")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_intermixed_args()
    config = compose(os.path.abspath(args.out), args.overrides)

    global FIRST_STEP, TOTAL, REPORT
    FIRST_STEP, TOTAL, REPORT = args.first_step, args.total, os.path.abspath(args.report) if args.report else ""
    from verl.trainer.main_ppo import run_ppo

    run_ppo(config, task_runner_class=SHAPES[args.shape])


if __name__ == "__main__":
    main()

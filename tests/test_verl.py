"""verl 0.9 (requirements-verl.txt, installed by `make venv`): its own
`main_ppo.run_ppo` on CPU under rlscope, configured only through verl's config
(`global_profiler.tool=rlscope`, its steps and ranks), as a user runs it; and
the mapping of verl's profiler settings onto ours."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, Trace

verl = pytest.importorskip("verl", reason="verl is not installed (make venv installs requirements-verl.txt)")

from rlscope_ray.settings import RLScopeConfigError  # noqa: E402
from rlscope_ray.verl_plugin import config_from_verl  # noqa: E402

USER_OVERRIDES = ["global_profiler.tool=rlscope", "global_profiler.steps=[2,3]",
                  "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0]"]


def _run_ppo(tmp, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLSCOPE_", "RAY_RUNTIME_ENV"))}
    env.pop("NVTX_INJECTION64_PATH", None)
    report = tmp / "report.json"
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "apps" / "verl_ppo_app.py"), str(tmp / "out"),
                        "--report", str(report), *args], env=env, cwd=tmp, capture_output=True, text=True,
                       timeout=1500)  # a hang guard: about 40 s on a quiet 2-core machine, 10 min under the soak
    assert r.returncode == 0, f"verl_ppo_app.py failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return json.loads(report.read_text())


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verl_ppo")
    return _run_ppo(tmp, *USER_OVERRIDES), tmp / "out"


def test_only_verls_selected_steps_are_written_with_the_task_runner_as_controller(ppo_run):
    report, out = ppo_run
    assert sorted(p.name for p in out.glob("step_*")) == ["step_2", "step_3"]
    run = json.loads((out / "run.json").read_text())
    (controller,) = [p for p in run["processes"] if p["role"] == "controller"]
    assert controller["pid"] == report["task_runner_pid"]
    assert controller["labels"]["actor_class"] == "TaskRunner"
    assert controller["host"]
    trace = Trace(out / "step_3" / "trace.json")
    ctrl = trace.pid_of("TaskRunner (controller)")
    assert len(trace.asyncs(ctrl, "step")) == 1
    # The controller's list of actors that should connect: verl's workers, and all of them did.
    assert [e["class_name"] for e in run["expected"]].count("PPOWorker") == 2
    assert run["not_profiled"] == []


def test_only_the_selected_rank_records_and_verls_names_are_sub_tasks(ppo_run):
    _, out = ppo_run
    run = json.loads((out / "run.json").read_text())
    workers = {p["rank"]: p for p in run["processes"] if p["labels"].get("actor_class") == "PPOWorker"}
    assert sorted(workers) == [0, 1]
    assert workers[0]["selected"] and not workers[1]["selected"]
    for step in ("step_2", "step_3"):
        trace = Trace(out / step / "trace.json")
        rank0 = trace.pid_of("PPOWorker (rank 0)")
        assert workers[1]["pid"] not in trace.process_names
        # The worker's method spans and verl's DistProfiler.annotate range (the "rlscope" backend).
        assert len(trace.slices(rank0, "update_actor")) == 1
        assert len(trace.slices(rank0, "actor_update")) == 1
        summary = json.loads((out / step / "summary.json").read_text())
        subtasks = [s["subtask"] for s in summary["critical_path"]["segments"]]
        assert subtasks == ["gen", "reward", "old_log_prob", "adv", "update_actor"]
        for seg in summary["critical_path"]["segments"]:
            if seg["subtask"] in ("gen", "old_log_prob", "update_actor"):
                assert seg["critical_rank"] == 0
        assert {"gen", "adv", "update_actor"} <= {b["subtask"] for b in summary["breakdown"]}


def test_a_resumed_run_is_numbered_by_verls_global_steps_and_discrete_captures_each_sub_task(tmp_path):
    # As after loading checkpoint 4: global_steps runs 5, 6, 7. With verl's
    # nsys `discrete`, each sub-task is its own capture.
    _run_ppo(tmp_path, "--first-step", "5", "--total", "7", "global_profiler.tool=rlscope",
             "global_profiler.steps=[6]", "actor_rollout_ref.actor.profiler.enable=true",
             "actor_rollout_ref.actor.profiler.all_ranks=true",
             "global_profiler.global_tool_config.nsys.discrete=true")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("step_*")) == ["step_6"]
    summary = json.loads((out / "step_6" / "summary.json").read_text())
    assert summary["step"] == 6
    run = json.loads((out / "run.json").read_text())
    assert run["steps_written"] == [6]
    assert summary["captures"] == ["gen", "reward", "old_log_prob", "adv", "update_actor"]
    trace = Trace(out / "step_6" / "update_actor" / "trace.json")
    for rank in (0, 1):
        assert len(trace.slices(trace.pid_of(f"PPOWorker (rank {rank})"), "actor_update")) == 1


# ------------------------------------------------ verl's experimental trainers


@pytest.mark.parametrize("shape", ["separation", "one_step_off"])
def test_an_experimental_trainer_is_profiled_without_set_step_its_runner_the_controller(tmp_path, shape):
    """separation and one_step_off_policy never call SkipManager.set_step:
    their `step` ranges alone make the trainer's process the controller,
    numbered by its global_steps (one_step_off: in a coroutine, the next
    batch generating meanwhile)."""
    report = _run_ppo(tmp_path, "--shape", shape, *USER_OVERRIDES)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("step_*")) == ["step_2", "step_3"]
    run = json.loads((out / "run.json").read_text())
    (controller,) = [p for p in run["processes"] if p["role"] == "controller"]
    assert controller["pid"] == report["task_runner_pid"]
    for step in (2, 3):
        summary = json.loads((out / f"step_{step}" / "summary.json").read_text())
        assert summary["step"] == step
        subtasks = [s["subtask"] for s in summary["critical_path"]["segments"]]
        assert subtasks == ["gen", "reward", "old_log_prob", "adv", "update_actor"]


def test_the_fully_async_trainer_its_rollouters_coroutines_and_its_engine_process(tmp_path):
    """fully_async_policy: the trainer actor (not the task runner) is the
    controller; verl's global_profiler.steps=[2] is parameter version 2,
    trainer steps 3 and 4 with trigger_parameter_sync_step=2; the rollouter's
    agent loops overlap on one thread, each range whole; the engine process
    the rollouter started records as its child."""
    report = _run_ppo(tmp_path, "--shape", "fully_async", "--total", "5", *USER_OVERRIDES[:1],
                      "global_profiler.steps=[2]", *USER_OVERRIDES[2:], "+async_training.trigger_parameter_sync_step=2")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("step_*")) == ["step_3", "step_4"]
    run = json.loads((out / "run.json").read_text())
    (controller,) = [p for p in run["processes"] if p["role"] == "controller"]
    assert controller["pid"] == report["trainer_pid"] and controller["name"] == "FullyAsyncTrainer"
    (engine,) = [p for p in run["processes"] if p["pid"] == report["engine_pid"]]
    assert engine["labels"]["parent_actor"] == "FullyAsyncRollouter", engine
    for step in (3, 4):
        trace = Trace(out / f"step_{step}" / "trace.json")
        loops = trace.asyncs(trace.pid_of("/ FullyAsyncRollouter /"), "agent_loop")
        assert len(loops) == 4
        assert max(float(r["b"]["ts"]) for r in loops) < min(float(r["e"]["ts"]) for r in loops)
        engine_pid = trace.pid_of(f"] / FullyAsyncRollouter child: multiprocessing spawn / pid {engine['pid']}")
        assert len(trace.slices(engine_pid, "engine_step")) == 4


# ------------------------------------------------ verl settings -> ours


def _verl_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    import verl.trainer

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def test_the_nsys_users_selection_maps_onto_ours():
    cfg = _verl_config(*USER_OVERRIDES, "global_profiler.save_path=/runs/x",
                       "global_profiler.global_tool_config.nsys.discrete=true")
    assert config_from_verl(cfg) == {"steps": [2, 3], "ranks": [0], "discrete": True, "output_dir": "/runs/x"}
    # Enabled without ranks: rank 0, as verl's DistProfiler; all_ranks: every rank.
    cfg = _verl_config("global_profiler.tool=rlscope", "global_profiler.steps=[5,1]",
                       "critic.profiler.enable=true")
    assert config_from_verl(cfg)["ranks"] == [0]
    assert config_from_verl(cfg)["steps"] == [1, 5]
    cfg = _verl_config("global_profiler.tool=rlscope", "global_profiler.steps=[1]",
                       "actor_rollout_ref.actor.profiler.enable=true",
                       "actor_rollout_ref.actor.profiler.all_ranks=true")
    assert config_from_verl(cfg)["ranks"] == "all"
    # Our own keys under global_tool_config.rlscope pass through.
    cfg = _verl_config(*USER_OVERRIDES, "+global_profiler.global_tool_config.rlscope.correction.scale=1.5")
    assert config_from_verl(cfg)["correction"] == {"scale": 1.5}
    # The fully async trainer profiles parameter versions: version v is its
    # trainer steps (v-1)*K+1 .. v*K.
    cfg = _verl_config(*USER_OVERRIDES, "+async_training.trigger_parameter_sync_step=4")
    assert config_from_verl(cfg)["steps"] == [5, 6, 7, 8, 9, 10, 11, 12]


@pytest.mark.parametrize("overrides, named", [
    (["global_profiler.tool=rlscope", "actor_rollout_ref.actor.profiler.enable=true"], "global_profiler.steps"),
    (["global_profiler.tool=rlscope", "global_profiler.steps=[2]"], "actor_rollout_ref.actor.profiler.enable"),
    ([*USER_OVERRIDES, "critic.profiler.enable=true", "critic.profiler.ranks=[1]"],
     "critic.profiler.ranks=[1]"),
    ([*USER_OVERRIDES, "critic.profiler.enable=true", "critic.profiler.ranks=[0]",
      "critic.profiler.tool_config.nsys.discrete=true"], "critic.profiler.tool_config.nsys.discrete"),
    ([*USER_OVERRIDES, "+global_profiler.global_tool_config.rlscope.stepz=[1]"],
     "global_profiler.global_tool_config.rlscope"),
])
def test_a_setting_we_cannot_honour_is_an_error_naming_the_key(overrides, named):
    with pytest.raises(RLScopeConfigError) as e:
        config_from_verl(_verl_config(*overrides))
    assert named in str(e.value)

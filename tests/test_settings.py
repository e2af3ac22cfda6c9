"""How a runtime_env "rlscope" value resolves, without Ray: what the plugin
gives a worker, and the errors a user sees at actor creation."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from rlscope_ray import collector_path, settings

JOB = {settings.JOB_AGGREGATOR: "tcp://10.0.0.1:5557",
       settings.JOB_CONFIG: json.dumps({"steps": [2, 3], "flush": {"step_grace_ms": 100}})}


def test_actor_value_over_job_defaults():
    job = dict(JOB, **{settings.JOB_DEFAULTS: json.dumps({"role": "worker", "ranks": [0, 1], "rank": 7})})
    env = settings.resolve({"rank": 1, "flush": {"interval_ms": 5}}, job)
    assert env["RLSCOPE_AGGREGATOR"] == "tcp://10.0.0.1:5557"
    assert env["RLSCOPE_RANK"] == "1"  # the actor's own rank wins over the job default
    assert env["RLSCOPE_ROLE"] == "worker"
    assert env["NVTX_INJECTION64_PATH"] == collector_path()
    assert env["CUDA_INJECTION64_PATH"] == collector_path()
    config = json.loads(env["RLSCOPE_CONFIG"])
    # Driver config, then job-level value, then the actor's: nested sections merge.
    assert config == {"steps": [2, 3], "ranks": [0, 1], "flush": {"step_grace_ms": 100, "interval_ms": 5}}


def test_opt_out_and_job_level_opt_out():
    assert settings.resolve({"enabled": False}, JOB) is None
    job = dict(JOB, **{settings.JOB_DEFAULTS: json.dumps({"enabled": False})})
    assert settings.resolve(None, job) is None
    assert settings.resolve({"enabled": True, "rank": 0}, job)["RLSCOPE_RANK"] == "0"


def test_config_file_from_the_value(tmp_path):
    cfg = tmp_path / "actor.yaml"
    cfg.write_text("steps: [5]\nbuffers:\n  per_thread_kb: 64\n")
    env = settings.resolve({"config": str(cfg), "steps": [6]}, JOB)
    config = json.loads(env["RLSCOPE_CONFIG"])
    assert config["steps"] == [6] and config["buffers"] == {"per_thread_kb": 64}
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [1]\nranks: [0, -2]\n")
    with pytest.raises(ValueError, match=rf"{bad}:2:8: ranks: -2 is negative"):
        settings.resolve({"config": str(bad)}, JOB)
    with pytest.raises(ValueError, match="cannot read the config file"):
        settings.resolve({"config": str(tmp_path / "missing.yaml")}, JOB)


@pytest.mark.parametrize("value, message", [
    ([1, 2], "runtime_env['rlscope'] must be a dict like {'rank': 0}, got list"),
    ({"rank": "0"}, "runtime_env['rlscope']['rank'] must be an integer >= 0, got '0'"),
    ({"rank": True}, "runtime_env['rlscope']['rank'] must be an integer >= 0, got True"),
    ({"role": "boss"}, "runtime_env['rlscope']['role'] must be 'worker' or 'controller', got 'boss'"),
    ({"enabled": "no"}, "runtime_env['rlscope']['enabled'] must be true or false, got 'no'"),
    ({"capture_range": "sometimes"}, "runtime_env['rlscope']: capture_range: 'sometimes' is not one of"),
    ({"gpu": {"kernal": True}}, "runtime_env['rlscope']: gpu.kernal: unknown key (did you mean 'gpu.kernels'?)"),
])
def test_bad_values_name_the_key(value, message):
    with pytest.raises(ValueError) as e:
        settings.check_value(value)
    assert message in str(e.value)


def test_no_aggregator_says_what_to_do():
    with pytest.raises(ValueError, match=r"call rlscope_ray.init\(\) in the driver"):
        settings.resolve({"rank": 0}, {})
    env = settings.resolve({"rank": 0, "aggregator": "tcp://h:1"}, {})
    assert env["RLSCOPE_AGGREGATOR"] == "tcp://h:1"


def test_a_config_file_reads_as_the_native_parser_reads_it(tmp_path):
    """Python takes the values from the native parser (its merge of layers),
    only the keys the file set (so merges keep the other layers), dotted or
    nested, typed as JSON."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text('steps: "2-4"\ncorrection.scale: 1.04\ncorrection:\n  enabled: true\nranks: all\n')
    assert settings.load_config_file(str(cfg)) == {
        "steps": [2, 3, 4], "ranks": "all", "correction": {"scale": 1.04, "enabled": True}}


def test_the_runs_config_takes_the_jobs_runtime_env_keys_and_the_endpoint_rule_is_one(tmp_path):
    job_file = tmp_path / "job.yaml"
    job_file.write_text("ranks: [0]\n")
    run = settings.run_config([settings.dict_layer({"steps": [1, 2], "flush": {"step_grace_ms": 9}}, "init")],
                              {"config": str(job_file), "steps": [2], "rank": 3, "role": "worker"})
    assert run == {"steps": [2], "ranks": [0], "flush": {"step_grace_ms": 9}}
    assert settings.endpoint([None, "auto", "tcp://job:1"], {"aggregator": "tcp://cfg:2"}) == "tcp://job:1"
    assert settings.endpoint([None, ""], {"aggregator": "tcp://cfg:2"}) == "tcp://cfg:2"
    assert settings.endpoint([], {"aggregator": "auto"}) is None


@pytest.mark.parametrize("nice", [-1, 20, True, "10"])
def test_a_bad_aggregator_nice_is_refused_before_anything_starts(nice):
    import ray

    import rlscope_ray

    with pytest.raises(ValueError, match=r"rlscope_ray.init\(aggregator_nice=...\) must be an int from 0 to 19"):
        rlscope_ray.init(aggregator_nice=nice)
    assert not ray.is_initialized()


@pytest.mark.parametrize("relays", ["yes", True, None])
def test_a_bad_relays_value_is_refused_before_anything_starts(relays):
    import ray

    import rlscope_ray

    with pytest.raises(ValueError, match=r"rlscope_ray.init\(relays=...\) must be one of auto, on, off"):
        rlscope_ray.init(relays=relays)
    assert not ray.is_initialized()


def test_a_worker_on_a_host_with_the_runs_relay_connects_to_it(tmp_path, monkeypatch):
    """The plugin's resolution on a host: the run's relay file (written by
    the host's relay actor) names the endpoint; another run's relay, or an
    actor that names its own aggregator, is not taken."""
    from rlscope_ray import settings
    from rlscope_ray.relay import relay_file

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    job = {settings.JOB_AGGREGATOR: "tcp://10.0.0.1:5557", settings.JOB_SECRET: "s" * 32}
    assert settings.resolve({}, job)[settings.AGGREGATOR] == "tcp://10.0.0.1:5557"
    path = relay_file("s" * 32)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(f"tcp://127.0.0.1:40001 {os.getpid()}\n")  # the relay's endpoint and pid (alive: this one)
    assert settings.resolve({}, job)[settings.AGGREGATOR] == "tcp://127.0.0.1:40001"
    assert settings.resolve({}, dict(job, **{settings.JOB_SECRET: "t" * 32}))[settings.AGGREGATOR] == \
        "tcp://10.0.0.1:5557"
    assert settings.resolve({"aggregator": "tcp://10.0.0.2:1"}, job)[settings.AGGREGATOR] == "tcp://10.0.0.2:1"
    gone = subprocess.Popen(["true"])
    gone.wait()
    with open(path, "w") as f:
        f.write(f"tcp://127.0.0.1:40001 {gone.pid}\n")  # a relay whose process is gone: the root
    assert settings.resolve({}, job)[settings.AGGREGATOR] == "tcp://10.0.0.1:5557"

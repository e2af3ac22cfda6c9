"""Ray integration with a real Ray (the pinned version): the "rlscope"
runtime_env plugin, the driver session and multi-node clusters. Each job runs
as its own driver process, as a user's would."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, Trace

pytest.importorskip("ray")


def _run(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLSCOPE_", "RAY_RUNTIME_ENV"))}
    env.pop("NVTX_INJECTION64_PATH", None)
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "apps" / script), *args], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r


@pytest.fixture(scope="module")
def session_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray_session")
    r = _run("ray_session_app.py", str(tmp / "out"), str(tmp / "report.json"))
    report = json.loads((tmp / "report.json").read_text())
    report["stderr"] = r.stderr
    return report, tmp / "out"


def test_the_session_is_its_runs_only_and_says_what_it_wrote(session_run):
    report, out = session_run
    # A local Ray: the aggregator listens on loopback only, and every actor
    # got the run's secret through the plugin (none refused, all connected).
    assert "listening on tcp://127.0.0.1:" in (out / "aggregator.log").read_text()
    run = json.loads((out / "run.json").read_text())
    assert run["refused_frames"] == 0 and run["refused_hellos"] == 0
    assert {report["pids"][k] for k in ("learner0", "learner1", "rollout")} <= {p["pid"] for p in run["processes"]}
    assert (out.stat().st_mode & 0o777) == 0o700
    # The aggregator it started runs nicer than the job (aggregator_nice, 10).
    assert report["nice"]["aggregator"] == min(19, report["nice"]["driver"] + 10), report["nice"]
    said = [line for line in report["stderr"].splitlines() if line.startswith("rlscope: ") and "steps written to" in line]
    assert len(said) == 1 and said[0].startswith(f"rlscope: 2 steps written to {out};"), report["stderr"][-3000:]


def test_steps_that_create_no_actor_leave_the_actor_table_to_the_reporters_second(session_run):
    """The controller reports which profiled actors should connect from Ray's
    actor table: at once, every second, and at a step's begin after it
    created actors or while actors are starting. 200 short steps that create
    none, with every actor up, wake it not once (a count, whatever the
    load); before, every step's begin did: 200 reads (196 looks counted in
    one run, about 0.2 ms of the driver's CPU and as much of the GCS's
    each)."""
    report, _ = session_run
    quiet = report["quiet"]
    assert quiet["step_wakes"] == 0, quiet
    # Every actor the driver created counted, through .remote() and
    # .options().remote() alike: two learners, the rollout, the opted-out
    # one and four with bad values.
    assert quiet["actors_created"] == 8, quiet


def test_step_begins_wake_the_reporter_after_a_creation_and_while_actors_are_starting(monkeypatch):
    """Exact, on a session of its own (Ray's table replaced): a step's begin
    wakes the reporter after the driver created an actor, and while its
    looks find actors of the cluster still starting (an actor is listed
    alive only once it is up; verl's TaskRunner creates its workers through
    a path the count does not see), for at most a minute."""
    import time

    from rlscope_ray import session as s

    sess = s.Session(endpoint="", output_dir="", config={})
    monkeypatch.setattr(s, "_duties", sess)
    monkeypatch.setattr(s, "profiled_actors", lambda: [])
    starting = [False]
    monkeypatch.setattr(s, "_actors_starting", lambda: starting[0])

    def step_begin_wakes():
        sess._wake.clear()
        s.before_step()
        return sess._wake.is_set()

    assert s._report_expected(sess) and not step_begin_wakes()  # nothing created or starting: its second alone
    sess._actors_created = 1
    assert step_begin_wakes()  # created here: the next step's begin looks
    starting[0] = True
    assert s._report_expected(sess) and step_begin_wakes()  # still starting: looked at again next step
    starting[0] = False
    assert s._report_expected(sess) and not step_begin_wakes()  # up: once a second again
    starting[0] = True  # created elsewhere: a look (the reporter's second) finds it starting
    assert s._report_expected(sess) and step_begin_wakes()
    sess._starting_since = time.monotonic() - 61
    assert s._report_expected(sess) and not step_begin_wakes()  # starting for over a minute: given up
    sess._actors_created = 2
    assert step_begin_wakes()
    assert s._report_expected(sess) and step_begin_wakes()  # a creation here starts the minute again


def test_the_reporter_looks_every_second_while_actors_change_and_every_five_once_nothing_did(monkeypatch):
    """Exact, on a session of its own (Ray's table replaced, the session's
    clock a virtual one): the reporter's pace between looks is a second
    after a look found something new (the list it sends changed, actors
    starting, one created here) and for 30 s after, then 5 s; its loop waits
    that long (a look reads Ray's actor table four times: GCS work the
    profiler's own threads do not count)."""
    import time

    from rlscope_ray import session as s

    class Clock:  # the session module's `time`: monotonic() is the test's
        now = 1000.0

        def monotonic(self):
            return self.now

        def __getattr__(self, name):
            return getattr(time, name)

    clock = Clock()
    monkeypatch.setattr(s, "time", clock)
    sess = s.Session(endpoint="", output_dir="", config={})
    actors = [[]]
    starting = [False]
    sent = []
    monkeypatch.setattr(s, "profiled_actors", lambda: actors[0])
    monkeypatch.setattr(s, "_actors_starting", lambda: starting[0])
    monkeypatch.setattr(s._native, "report_expected", sent.append)

    def look():
        assert s._report_expected(sess)
        return s._report_interval(sess, clock.now)

    def settle():  # nothing new for over 30 s
        clock.now += 31

    assert look() == 1.0 and sent == [[]]  # the first look
    clock.now += 29
    assert look() == 1.0 and sent == [[]]  # nothing new, but within 30 s of the first
    clock.now += 2
    assert look() == 5.0
    actors[0] = [{"actor_id": "a1", "class_name": "Learner", "name": "", "node_id": "n", "pid": "7"}]
    assert look() == 1.0 and sent[-1] == actors[0]  # a new actor: sent, and a look a second again
    settle()
    assert look() == 5.0 and len(sent) == 2
    starting[0] = True
    assert look() == 1.0  # actors still starting
    clock.now += 61
    assert look() == 5.0  # starting for over a minute (never, maybe): not new any more
    starting[0] = False
    assert look() == 5.0
    sess._actors_created = 1
    assert look() == 1.0  # one created here since the look before
    settle()
    assert look() == 5.0

    # The loop waits what _report_interval says, and looks again.
    waits = []

    class Wake:
        def wait(self, timeout):
            waits.append(timeout)
            if len(waits) == 3:
                sess._stop.set()
            return False

        def clear(self):
            pass

    monkeypatch.setattr(s._native, "own_thread", lambda name: None)
    sess = s.Session(endpoint="", output_dir="", config={})  # its first look sends the list: new
    sess._wake = Wake()
    calls = []
    monkeypatch.setattr(s, "_actors_starting", lambda: calls.append(1) or False)
    s._report_expected_loop(sess)
    assert waits == [1.0, 1.0, 1.0] and len(calls) == 3
    sess._stop.clear()
    waits.clear()
    settle()
    s._report_expected_loop(sess)
    assert waits == [5.0, 5.0, 5.0], waits


def test_actors_with_different_ranks_appear_in_the_merged_step(session_run):
    report, out = session_run
    assert sorted(p.name for p in out.glob("step_*")) == ["step_1", "step_2"]
    trace = Trace(out / "step_2" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    (step,) = trace.slices(ctrl, "step")
    s0, s1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    (ctrl_update,) = trace.slices(ctrl, "update_actor")
    for rank in (0, 1):
        pid = trace.pid_of(f"Learner (rank {rank})")
        assert pid == report["pids"][f"learner{rank}"]
        # A CPU-only actor: its method execution is a range named after the method,
        # inside the controller's range that called it.
        (update,) = trace.slices(pid, "update_actor")
        assert float(ctrl_update["ts"]) <= float(update["ts"])
        assert float(update["ts"]) + float(update["dur"]) <= float(ctrl_update["ts"]) + float(ctrl_update["dur"])
        assert s0 <= float(update["ts"]) <= s1
    assert trace.process_names[report["pids"]["learner0"]].startswith("node ")


def test_the_ray_runs_perfetto_trace_has_the_json_events_and_each_actors_ray_identity(session_run):
    import pftrace

    report, out = session_run
    j = pftrace.assert_same_as_json(out / "step_2")
    trace = pftrace.read(out / "step_2" / "trace.pftrace")
    for rank in (0, 1):
        (learner,) = [t for t in trace.tracks.values() if t.pid == report["pids"][f"learner{rank}"] and t.labels]
        labels = dict(kv.split("=", 1) for kv in learner.labels)
        assert labels["actor_class"] == "Learner" and labels["node_id"] and labels["job_id"], labels
    assert any(k[1] == "update_actor" for k in j["slices"])  # the actors' Ray method executions
    # A flow from the controller's submit of each call to the learner that ran it.
    ctrl = Trace(out / "step_2" / "trace.json").pid_of("(controller)")
    flows_to = {f[1][0][0] for f in j["flows"] if f[0][0][0] == ctrl}
    assert {report["pids"]["learner0"], report["pids"]["learner1"]} <= flows_to, j["flows"]


def test_job_level_value_profiles_actors_without_their_own(session_run):
    report, out = session_run
    trace = Trace(out / "step_1" / "trace.json")
    pid = report["pids"]["rollout"]
    assert "Rollout" in trace.process_names[pid]
    (gen,) = trace.slices(pid, "gen")                 # the method span
    (sample,) = trace.slices(pid, "sample_tokens")    # the actor's own NVTX range
    assert sample["cat"] == "rollout"
    assert float(gen["ts"]) <= float(sample["ts"])
    assert float(sample["ts"]) + float(sample["dur"]) <= float(gen["ts"]) + float(gen["dur"])


def test_opted_out_actor_is_neither_profiled_nor_missing(session_run):
    report, out = session_run
    run = json.loads((out / "run.json").read_text())
    pids = {p["pid"] for p in run["processes"]}
    assert report["pids"]["opted_out"] not in pids
    assert report["pids"]["learner0"] in pids
    summary = json.loads((out / "step_2" / "summary.json").read_text())
    assert summary["not_profiled"] == []
    assert summary["late_processes"] == []
    # Expected = the profiled actors, as the controller saw them in Ray.
    assert {e["pid"] for e in run["expected"]} == {str(report["pids"][k]) for k in ("learner0", "learner1", "rollout")}


def test_bad_values_fail_actor_creation_with_our_message(session_run):
    errors = session_run[0]["errors"]
    assert "RuntimeEnvSetupError" in errors["steps"]
    assert "runtime_env['rlscope']: steps: range \"5-2\" is empty" in errors["steps"]
    assert "runtime_env['rlscope']['rank'] must be an integer >= 0, got -1" in errors["rank"]
    assert "stpes: unknown key (did you mean 'steps'?)" in errors["typo"]
    assert "runtime_env['rlscope'] must be a dict" in errors["type"]


def test_two_node_cluster_and_a_node_without_the_plugin(tmp_path):
    r = _run("ray_cluster_app.py", str(tmp_path / "out"), str(tmp_path / "report.json"))
    report = json.loads((tmp_path / "report.json").read_text())
    out = tmp_path / "out"
    trace = Trace(out / "step_1" / "trace.json")
    nodes = report["nodes"]
    for rank, node in ((0, "head"), (1, "with_plugin")):
        pid = trace.pid_of(f"(rank {rank})")
        assert f"[{nodes[node][:8]}]" in trace.process_names[pid]
        assert trace.slices(pid, "work")
    run = json.loads((out / "run.json").read_text())
    by_rank = {p["rank"]: p for p in run["processes"] if p["role"] == "worker"}
    assert by_rank[0]["labels"]["node_id"] == nodes["head"]
    assert by_rank[1]["labels"]["node_id"] == nodes["with_plugin"]
    assert 2 not in by_rank
    summary = json.loads((out / "step_1" / "summary.json").read_text())
    (missing,) = summary["not_profiled"]
    assert missing["node_id"] == nodes["without_plugin"] and missing["class_name"] == "Worker"
    assert "no rlscope plugin registered" in missing["reason"]
    assert run["not_profiled"] == summary["not_profiled"]
    # The driver was told, in one sentence, which node and what to do.
    assert "does not have the rlscope plugin registered" in r.stderr
    assert "RAY_RUNTIME_ENV_PLUGINS" in r.stderr


def test_node_with_a_shifted_clock_still_nests_worker_spans_in_the_controllers_calls(tmp_path):
    import shutil

    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--fork", "--time", "--monotonic", "1", "true"], capture_output=True).returncode != 0:
        pytest.skip("time namespaces are not permitted here")
    _run("ray_shifted_node_app.py", str(tmp_path / "out"), str(tmp_path / "report.json"))
    shift_ns = json.loads((tmp_path / "report.json").read_text())["shift_ns"]  # the node's clock minus ours
    trace = Trace(tmp_path / "out" / "step_2" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    summary = json.loads((tmp_path / "out" / "step_2" / "summary.json").read_text())
    clocks = {p["rank"]: p["clock"] for p in summary["processes"] if p["role"] == "worker"}
    assert abs(clocks[1]["offset_ns"] + shift_ns) <= clocks[1]["bound_ns"]  # the shift was found
    # Each worker's execution of a call lies between the controller's submit and get.
    assert summary["causality"]["checked"] >= 2 and summary["causality"]["violations"] == 0
    # Each learner recorded the whole step, by its own word.
    assert [p["unarmed_ms"] for p in summary["processes"]] == [0] * len(summary["processes"]), summary
    for rank in (0, 1):
        (call,) = trace.slices(ctrl, f"call_rank{rank}")
        (method,) = trace.slices(trace.pid_of(f"Learner (rank {rank})"), "update_actor")
        assert float(call["ts"]) <= float(method["ts"])
        assert float(method["ts"]) + float(method["dur"]) <= float(call["ts"]) + float(call["dur"])


def test_selection_given_to_init_is_the_runs_with_an_aggregator_started_by_hand(aggregator_factory, tmp_path):
    """rlscope_ray.init(config, aggregator=...) joining an aggregator that was
    started without a config: the steps and ranks in `config` are the run's,
    for the aggregator too (it used to write every step)."""
    agg = aggregator_factory()
    env = dict(agg.env(role="controller", config=json.dumps({"steps": [2, 4], "ranks": [0]})), RAY_ADDRESS="")
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/ray_wait_app.py"), "--steps", "5", "--ranges", "200"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    log = agg.wait(timeout=60)
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_2", "step_4"], log
    for n in (2, 4):
        summary = json.loads((agg.out / f"step_{n}" / "summary.json").read_text())
        assert sorted((p["role"], p["rank"]) for p in summary["processes"]) == [("controller", None), ("worker", 0)]
    assert "disagree" not in log


def test_actors_created_by_the_controller_actor_do_not_inherit_its_role(aggregator_factory):
    """verl's TaskRunner is the controller and an actor: the actors it
    creates inherit its runtime_env, role included. The first to say hello
    as a controller is the run's; the others are told they are workers and
    record in the windows of the selected steps, as workers do."""
    agg = aggregator_factory()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLSCOPE_", "RAY_RUNTIME_ENV"))}
    env.pop("NVTX_INJECTION64_PATH", None)
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/ray_inherited_role_app.py"), agg.endpoint, "3"],
                       env=dict(env, RAY_ADDRESS=""), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    pids = json.loads(r.stdout.strip().splitlines()[-1])
    agg.stop()
    log = agg.log.read_text()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_2"], log
    summary = json.loads((agg.out / "step_2" / "summary.json").read_text())
    roles = {p["pid"]: p["role"] for p in summary["processes"]}
    assert roles == {pids["task_runner"]: "controller", **{w: "worker" for w in pids["workers"]}}, (roles, log)
    trace = Trace(agg.out / "step_2" / "trace.json")
    labels = {p["pid"]: p["label"] for p in summary["processes"]}
    for w in pids["workers"]:
        (tpid,) = [t for t, name in trace.process_names.items() if name == labels[w]]
        assert trace.slices(tpid, "chunk"), w  # recorded in the step's window
    assert sum("said hello as a controller too" in line for line in log.splitlines()) == 2, log

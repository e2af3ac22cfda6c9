"""What a profiled actor starts and what runs on its event loop: processes
it starts (`subprocess`, multiprocessing spawn) recorded as its children in
the selected steps with its rank, Ray's own helpers left out; coroutines
whose ranges interleave across awaits, each range kept whole."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, Trace

pytest.importorskip("ray")


@pytest.fixture(scope="module")
def children_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("children")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLSCOPE_", "RAY_RUNTIME_ENV"))}
    env.pop("NVTX_INJECTION64_PATH", None)
    r = subprocess.run([sys.executable, str(ROOT / "tests/apps/ray_children_app.py"), str(tmp / "out"),
                        str(tmp / "report.json")], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"ray_children_app.py failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    report = json.loads((tmp / "report.json").read_text())
    run = json.loads((tmp / "out" / "run.json").read_text())
    return report, tmp / "out", run


def _process(run: dict, pid: int) -> dict:
    (p,) = [p for p in run["processes"] if p["pid"] == pid]
    return p


def test_an_actors_children_record_in_the_selected_step_with_its_rank(children_run):
    report, out, run = children_run
    assert sorted(p.name for p in out.glob("step_*")) == ["step_2"]
    trace = Trace(out / "step_2" / "trace.json")
    step2 = report["children"]["2"]
    assert step2["spawn_exit"] == 0
    for kind, range_name, name in (("subprocess", "child_work", "Learner child: python -c"),
                                   ("spawn", "spawn_work", "Learner child: multiprocessing spawn")):
        p = _process(run, step2[kind])
        assert p["rank"] == 1 and p["role"] == "worker", p
        assert p["labels"]["parent_pid"] == str(step2["parent"]), p
        assert p["labels"]["parent_actor"] == "Learner", p
        assert p["labels"]["command_line"].startswith(sys.executable), p
        parent = _process(run, step2["parent"])
        assert p["labels"]["node_id"] == parent["labels"]["node_id"], p  # listed under its parent's node
        tpid = trace.pid_of(f"/ pid {step2[kind]}")
        assert name in trace.process_names[tpid]
        assert "rank 1" in trace.process_names[tpid]
        assert len(trace.slices(tpid, range_name)) == 1
    # The children of the unselected steps 1 and 3 ran the same work: none
    # of it is in step 2.
    others = {report["children"][step][kind] for step in ("1", "3") for kind in ("subprocess", "spawn")}
    assert others <= {p["pid"] for p in run["processes"]}, others  # they ran profiled: absent by selection
    tpids = {t for t, n in trace.process_names.items() if any(f"/ pid {pid}" in n for pid in others)}
    assert not [e for e in trace.events if e["pid"] in tpids and e["ph"] != "M"]


def test_rays_own_helper_processes_stay_unprofiled(children_run):
    """The driver's profiling environment reaches Ray's raylet, GCS, agents
    and idle workers (they inherit it): none of them is profiled."""
    report, _, run = children_run
    ours = {report["children"][s][k] for s in report["children"] for k in ("subprocess", "spawn", "parent")}
    others = [p for p in run["processes"] if p["pid"] not in ours]
    # The driver (controller) and the Agents actor; nothing else.
    assert sorted(p["role"] for p in others) == ["controller", "worker"], others
    assert [p["labels"].get("actor_class") for p in others if p["role"] == "worker"] == ["Agents"], others
    for p in run["processes"]:
        assert "runtime_env" not in p["labels"].get("command_line", ""), p


def _interleaved(trace: Trace, pid: int, first: str, second: str) -> None:
    (a,) = trace.asyncs(pid, first)
    (b,) = trace.asyncs(pid, second)
    ts = [float(e["ts"]) for e in (a["b"], b["b"], a["e"], b["e"])]
    assert ts == sorted(ts), f"{first} and {second} do not interleave as the coroutines did: {ts}"


def test_coroutines_ranges_interleave_on_one_thread_each_whole(children_run):
    report, out, _ = children_run
    assert report["orders"]["2"] == ["a+ b+ a- b-", "a+ b+ a- b-"]
    trace = Trace(out / "step_2" / "trace.json")
    agents = trace.pid_of("Agents")
    _interleaved(trace, agents, "rlscope_a", "rlscope_b")  # rlscope_ray.range in coroutines
    _interleaved(trace, agents, "nvtx_a", "nvtx_b")  # nvtx.start_range / end_range
    ranges = sorted(trace.asyncs(agents, "agent_decorated"), key=lambda r: float(r["b"]["ts"]))
    assert len(ranges) == 2
    assert float(ranges[0]["e"]["ts"]) < float(ranges[1]["e"]["ts"]), ranges
    assert float(ranges[1]["b"]["ts"]) < float(ranges[0]["e"]["ts"]), ranges


PARENT = """
import subprocess, sys
import rlscope_ray
child = "import nvtx, sys\\nwith nvtx.annotate(sys.argv[1]):\\n    pass"
with rlscope_ray.step(1):
    for name in ("kept_work", "left_work"):
        subprocess.run([sys.executable, "-c", child, name], check=True)
"""


@pytest.mark.parametrize("children, recorded", [
    ("all", ["kept_work", "left_work"]),
    ('["*kept*"]', ["kept_work"]),
    ("none", []),
])
def test_the_config_chooses_which_children_are_profiled(aggregator_factory, children, recorded):
    """A plain (not Ray) profiled program: `children` all, a command-line
    pattern, or none."""
    agg = aggregator_factory(exit_when_done=True)
    env = agg.env(role="controller", config=f"{{steps: [1], children: {children}}}")
    r = subprocess.run([sys.executable, "-c", PARENT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    log = agg.wait()
    trace = Trace(agg.out / "step_1" / "trace.json")
    children_pids = [p for p, n in trace.process_names.items() if "python -c (worker)" in n]
    found = sorted(e["name"] for pid in children_pids for e in trace.slices(pid))
    assert found == sorted(recorded), (found, trace.process_names, log[-2000:])

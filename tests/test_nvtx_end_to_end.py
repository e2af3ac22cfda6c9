"""End to end: real NVTX programs (C++ with the official NVTX3 headers, Python
with the `nvtx` package) under the collector, a real aggregator over ZeroMQ,
and the merged per-step trace.json a user would open."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, Trace


def _run_pair(build_dir, agg, tmp_path, steps=3, step_ms=200.0):
    """A Python `nvtx` worker (rank 1) runs while a C++ controller runs steps."""
    worker_report = tmp_path / "worker.json"
    ready = tmp_path / "worker.ready"
    stop = tmp_path / "worker.stop"
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "120", "--stop-file", str(stop),
         "--report", str(worker_report), "--ready", str(ready)],
        env=agg.env(role="worker", rank=1))
    deadline = time.monotonic() + 60  # a hang guard
    while not ready.exists():
        assert worker.poll() is None, "worker exited early"
        assert time.monotonic() < deadline, "worker never started"
        time.sleep(0.02)
    app_report = tmp_path / "app.json"
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", str(steps), "--step-ms", str(step_ms),
                    "--report", str(app_report)], env=agg.env(role="controller"), check=True, timeout=120)
    stop.touch()
    assert worker.wait(timeout=60) == 0
    log = agg.wait(timeout=60)
    return json.loads(app_report.read_text()), json.loads(worker_report.read_text()), log


def _ns(us) -> int:
    return round(float(us) * 1000)


def _raw(e: dict) -> tuple:
    """A slice's (begin, end) in ns as recorded: overhead correction moves the
    trace's times by the profiler's costs (CPU samples among them), and a
    program's own clock readings bracket the recorded ones."""
    ts, dur = e["args"].get("raw_ts", e["ts"]), e["args"].get("raw_dur", e["dur"])
    return _ns(ts), _ns(ts) + _ns(dur)


def _where_it_happened(measured: dict, begin_ns: int, end_ns: int, slack_ns: int) -> bool:
    """The traced range began and ended between the program's own clock
    readings just before and just after its NVTX calls (give or take the
    clock's stated bound and the TSC conversion): exact at any load."""
    return (measured["begin_ns"] - slack_ns <= begin_ns <= measured["begin_hi_ns"] + slack_ns
            and measured["end_lo_ns"] - slack_ns <= end_ns <= measured["end_ns"] + slack_ns)


TSC_SLACK_NS = 20_000  # ticks to ns (native/clock.h): well under a microsecond, allowed generously


def test_cpp_and_python_programs_merge_into_step_traces(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory()
    app, worker, log = _run_pair(build_dir, agg, tmp_path)
    for n in (1, 2, 3):
        assert (agg.out / f"step_{n}" / "trace.json").exists(), log
    assert not (agg.out / "step_4").exists()
    run = json.loads((agg.out / "run.json").read_text())
    assert run["final"] and run["steps_written"] == [1, 2, 3]
    assert sorted(p["role"] for p in run["processes"]) == ["controller", "worker"]

    trace = Trace(agg.out / "step_2" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    wrk = trace.pid_of("(worker, rank 1)")
    assert ctrl == app["pid"]
    assert trace.thread_names[(ctrl, app["main_tid"])] == "app-main"

    # The controller's step, and everything of the controller nested inside it.
    (step,) = trace.slices(ctrl, "step")
    s0, s1 = float(step["ts"]), float(step["ts"]) + float(step["dur"])
    assert trace.data["otherData"]["step"] == 2
    (outer,) = trace.slices(ctrl, "outer")
    (inner,) = trace.slices(ctrl, "inner")
    assert outer["tid"] == inner["tid"] == app["main_tid"]
    assert float(outer["ts"]) <= float(inner["ts"])
    assert float(inner["ts"]) + float(inner["dur"]) <= float(outer["ts"]) + float(outer["dur"])
    assert s0 <= float(outer["ts"]) and float(outer["ts"]) + float(outer["dur"]) <= s1
    (scoped,) = trace.slices(ctrl, "cpp_scoped")
    assert scoped["cat"] == "app_domain"  # nvtx3.hpp domain + registered string
    (helper_work,) = trace.slices(ctrl, "helper_work")
    assert trace.thread_names[(ctrl, helper_work["tid"])] == "helper"
    (handoff,) = trace.asyncs(ctrl, "handoff")
    assert handoff["b"]["tid"] == app["main_tid"]
    assert handoff["b"]["args"]["end_tid"] == helper_work["tid"]  # ended on the other thread
    (mark,) = trace.instants(ctrl, "checkpoint")
    assert mark["args"]["payload"] == 200 and s0 <= float(mark["ts"]) <= s1

    summary = json.loads((agg.out / "step_2" / "summary.json").read_text())
    procs = {p["role"]: p for p in summary["processes"]}
    measured = {r["name"]: r for r in app["ranges"] if r["step"] == 2}
    traced = {name: _raw(e)
              for name, e in (("step", step), ("outer", outer), ("inner", inner), ("cpp_scoped", scoped),
                              ("helper_work", helper_work))}
    hb = handoff["b"]
    traced["handoff"] = (_raw({"ts": hb["ts"], "dur": handoff["dur"], "args": hb["args"]}))
    slack = procs["controller"]["clock"]["bound_ns"] + TSC_SLACK_NS
    for name, (b, e) in traced.items():
        assert _where_it_happened(measured[name], b, e, slack), (name, measured[name], b, e, slack)

    # The Python worker: its ranges during step 2, cut to the step.
    iters = trace.slices(wrk, "py_iter")
    assert len(iters) >= 1
    for e in trace.slices(wrk) + [x for x in trace.events if x["pid"] == wrk and x["ph"] in "bei"]:
        assert s0 - 0.001 <= float(e["ts"]) <= s1 + 0.001
        assert float(e["ts"]) + float(e.get("dur", 0)) <= s1 + 0.001
    annotated = trace.slices(wrk, "py_annotated")
    assert annotated and all(a["cat"] == "py_domain" for a in annotated)
    assert all(a["args"].get("category") == "compute" for a in annotated)
    asyncs = trace.asyncs(wrk, "py_async")
    closed = [a for a in asyncs if not a["b"]["args"].get("open")]
    assert closed and all(a["b"]["args"]["end_tid"] != a["b"]["tid"] for a in closed)
    assert trace.instants(wrk, "py_mark")
    # Unclipped worker ranges are where the worker measured them (same clock).
    own = [r for r in worker["ranges"] if r["name"] == "py_annotated"]
    slack = procs["worker"]["clock"]["bound_ns"] + TSC_SLACK_NS
    checked = 0
    for a in annotated:
        if a["args"].get("clipped_begin") or a["args"].get("clipped_end"):
            continue
        b, e = _raw(a)
        assert len([r for r in own if _where_it_happened(r, b, e, slack)]) == 1, (a, slack)
        checked += 1
    assert checked >= 1
    # A range that straddles the step start is clipped to it, not lost.
    first_iter = min(iters, key=lambda e: float(e["ts"]))
    if first_iter["args"].get("clipped_begin"):
        assert _ns(first_iter["ts"]) == _ns(step["ts"])

    assert summary["reason"] == "complete" and summary["late_processes"] == []
    assert procs["controller"]["spans"] == 6 and procs["controller"]["instants"] == 1
    assert procs["worker"]["rank"] == 1 and procs["worker"]["dropped_total"] == 0


def test_only_selected_steps_are_written(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory(config="steps: [2]\n")
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "3", "--step-ms", "5"],
                   env=agg.env(role="controller"), check=True, timeout=60)
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_2"], log
    assert json.loads((agg.out / "run.json").read_text())["steps_seen"] == 3


@pytest.mark.parametrize("exit_timeout_ms", [0, 500])
def test_program_without_aggregator_finishes(build_dir, tmp_path, rlscope, exit_timeout_ms):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    env = {"PATH": "/usr/bin:/bin", "RLSCOPE_AGGREGATOR": f"tcp://127.0.0.1:{port}", "RLSCOPE_ROLE": "controller",
           "RLSCOPE_CONFIG": f"{{flush: {{exit_timeout_ms: {exit_timeout_ms}}}}}",
           "NVTX_INJECTION64_PATH": rlscope.collector_path(), "RLSCOPE_SPOOL_DIR": str(tmp_path / "spool")}
    # What it costs at exit (at most the exit timeout) is timed by `make
    # bench` (section "faults"); here the timeout is a hang guard.
    r = subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "5", "--step-ms", "20"], env=env,
                       timeout=120, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # What it recorded is left on this node's disk for `rlscope-ray recover` (no secret: nothing takes it up itself).
    left = list((tmp_path / "spool" / "no-secret").glob("*.spool"))
    assert len(left) == 1 and "left on this node's disk" in r.stderr, r.stderr


def test_python_api_steps_ranges_and_marks(aggregator_factory, tmp_path):
    agg = aggregator_factory()
    script = (
        "import rlscope_ray, time\n"
        "assert rlscope_ray.enabled()\n"
        "gen = {}\n"
        "for n in (10, 11):\n"
        "    with rlscope_ray.step(n):\n"
        "        t0 = time.monotonic_ns()\n"
        "        with rlscope_ray.range('gen'):\n"
        "            time.sleep(0.01)\n"
        "        gen[n] = time.monotonic_ns() - t0\n"
        "        rlscope_ray.mark('after_gen')\n"
        "        @rlscope_ray.range('update_actor')\n"
        "        def update():\n"
        "            time.sleep(0.005)\n"
        "        update()\n"
        "print(gen[11])\n")
    # Buffers for rlscope_ray's start-up calibration burst (about 39k events
    # recorded while armed): at the default 1 MB a flush thread starved by a
    # busy machine drops part of it, and with it, maybe, a step's begin.
    env = agg.env(role="controller", inject=False, config="{buffers: {per_thread_kb: 8192}}")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_10", "step_11"], log
    trace = Trace(agg.out / "step_11" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    (step,) = trace.slices(ctrl, "step")
    assert step["args"]["payload"] == 11
    (gen,) = trace.slices(ctrl, "gen")
    (upd,) = trace.slices(ctrl, "update_actor")
    # It slept 10 ms inside; the program's own reading around it bounds it
    # from above (give or take the clock's bound).
    bound_us = json.loads((agg.out / "step_11" / "summary.json").read_text())["processes"][0]["clock"]["bound_ns"] / 1000
    assert 10000 - 20 <= float(gen["dur"]) <= int(r.stdout.split()[-1]) / 1000 + bound_us + 20
    assert float(gen["ts"]) + float(gen["dur"]) <= float(upd["ts"])
    assert len(trace.instants(ctrl, "after_gen")) == 1


# What the scripts below call to print each call's TypeError, in order.
_PRINT_TYPE_ERRORS = (
    "def print_type_errors(*calls):\n"
    "    for call in calls:\n"
    "        try:\n"
    "            call()\n"
    "        except TypeError as e:\n"
    "            print(e)\n")


def _run_controller_script(agg, script):
    """`python -c script` (print_type_errors defined) as the controller,
    recording one step (step 1): its printed lines, that step's trace and
    the controller's pid in it."""
    env = agg.env(role="controller", inject=False, config="{buffers: {per_thread_kb: 8192}}")
    r = subprocess.run([sys.executable, "-c", _PRINT_TYPE_ERRORS + script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    agg.wait()
    trace = Trace(agg.out / "step_1" / "trace.json")
    return r.stdout.splitlines(), trace, trace.pid_of("(controller)")


def test_python_ranges_nest_through_recursion_exceptions_and_reuse(aggregator_factory, tmp_path):
    """rlscope_ray.range is a native context manager: one decorated function
    recursing enters the same range object while it is open, a range left by
    an exception is closed where it was left, and one object entered twice in
    a row gives two ranges; every range is a slice, nested as entered."""
    agg = aggregator_factory()
    script = (
        "import rlscope_ray\n"
        "@rlscope_ray.range('fib')\n"
        "def fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "with rlscope_ray.step(1):\n"
        "    rlscope_ray.range('stray').__exit__(None, None, None)  # an exit with no enter pops nothing\n"
        "    assert fib(3) == 2 and fib.__name__ == 'fib'\n"
        "    try:\n"
        "        with rlscope_ray.range('raises'):\n"
        "            with rlscope_ray.range('inner'):\n"
        "                raise KeyError('x')\n"
        "    except KeyError:\n"
        "        pass\n"
        "    again = rlscope_ray.range('again')\n"
        "    with again:\n"
        "        pass\n"
        "    with again:\n"
        "        rlscope_ray.mark('in_again')\n"
        "print_type_errors(lambda: rlscope_ray.range(3), lambda: rlscope_ray.range('a', colour=1),\n"
        "                  lambda: rlscope_ray.mark(None))\n")
    stdout, trace, ctrl = _run_controller_script(agg, script)
    assert stdout == [
        "rlscope_ray.range(name): name must be a str, got int",
        "rlscope_ray.range() got an unexpected keyword argument 'colour'",
        "rlscope_ray.mark(name): name must be a str, got NoneType"], stdout

    def span(e):
        return float(e["ts"]), float(e["ts"]) + float(e["dur"])

    def inside(a, b):
        return span(b)[0] <= span(a)[0] and span(a)[1] <= span(b)[1]

    fibs = sorted(trace.slices(ctrl, "fib"), key=lambda e: (span(e)[0], -span(e)[1]))
    assert len(fibs) == 5  # fib(3) -> fib(2) -> fib(1), fib(0); fib(1)
    assert inside(fibs[1], fibs[0]) and inside(fibs[2], fibs[1]) and inside(fibs[3], fibs[1])
    assert inside(fibs[4], fibs[0]) and not inside(fibs[4], fibs[1])
    (raises,) = trace.slices(ctrl, "raises")
    (inner,) = trace.slices(ctrl, "inner")
    assert inside(inner, raises)
    agains = sorted(trace.slices(ctrl, "again"), key=lambda e: span(e)[0])
    assert len(agains) == 2 and span(agains[0])[1] <= span(agains[1])[0]
    assert not inside(agains[0], raises) and not inside(raises, fibs[0])
    (mark,) = trace.instants(ctrl, "in_again")
    assert span(agains[1])[0] <= float(mark["ts"]) <= span(agains[1])[1]
    (step,) = trace.slices(ctrl, "step")
    assert all(inside(e, step) for e in fibs + agains + [raises, inner])


def test_python_range_enter_and_exit_however_they_are_taken(aggregator_factory, tmp_path):
    """`with` binds rlscope_ray.range's __enter__/__exit__ its own way (no
    bound builtin per lookup, fast_api.cc): taken as contextlib.ExitStack
    takes them (from the type, the range first), bound and kept past the
    range's last name, on a subclass, 40 deep (past the kept bound objects),
    each range is recorded where it was entered and left."""
    agg = aggregator_factory()
    script = (
        "import contextlib, gc, rlscope_ray\n"
        "class Sub(rlscope_ray.range):\n"
        "    pass\n"
        "with rlscope_ray.step(1):\n"
        "    with contextlib.ExitStack() as stack:\n"
        "        stack.enter_context(rlscope_ray.range('stacked'))\n"
        "        rlscope_ray.mark('in_stacked')\n"
        "    exit_kept = rlscope_ray.range('kept').__exit__\n"
        "    r = rlscope_ray.range('unbound')\n"
        "    assert rlscope_ray.range.__enter__(r) is r\n"
        "    rlscope_ray.mark('in_unbound')\n"
        "    rlscope_ray.range.__exit__(r, None, None, None)\n"
        "    with Sub('sub') as s:\n"
        "        assert type(s) is Sub\n"
        "        rlscope_ray.mark('in_sub')\n"
        "    with contextlib.ExitStack() as stack:\n"
        "        for i in range(40):\n"
        "            stack.enter_context(rlscope_ray.range(f'deep{i}'))\n"
        "        rlscope_ray.mark('in_deep')\n"
        "    gc.collect()\n"
        "    print(repr(exit_kept))\n"
        "    assert exit_kept(None, None, None) is None  # its range lives on in it; no enter: no pop\n"
        "    print_type_errors(lambda: rlscope_ray.range.__exit__(3, None, None, None),\n"
        "                      lambda: rlscope_ray.range.__dict__['__enter__'].__get__(3),\n"
        "                      lambda: rlscope_ray.range('x').__enter__(1))\n")
    stdout, trace, ctrl = _run_controller_script(agg, script)
    assert stdout == [
        "<bound method __exit__ of rlscope_ray.range('kept')>",
        "rlscope_ray.range.__exit__(range, ...): the first argument is a rlscope_ray.range",
        "rlscope_ray.range.__enter__ binds to a rlscope_ray.range, not int",
        "rlscope_ray.range.__enter__() takes no arguments (1 given)"], stdout

    def around(name, mark):
        (e,) = trace.slices(ctrl, name)
        (m,) = trace.instants(ctrl, mark)
        return float(e["ts"]) <= float(m["ts"]) <= float(e["ts"]) + float(e["dur"])

    assert around("stacked", "in_stacked") and around("unbound", "in_unbound") and around("sub", "in_sub")
    assert all(around(f"deep{i}", "in_deep") for i in range(40))
    assert trace.slices(ctrl, "kept") == []


def test_a_range_and_a_decorated_function_pickle_as_ray_ships_them():
    """Ray ships a driver's functions with cloudpickle: a decorated function
    and a linked range travel, and work on the other side."""
    import pickle

    from ray import cloudpickle

    import rlscope_ray

    r = pickle.loads(pickle.dumps(rlscope_ray.range("gen", link="k")))
    assert r.name == "gen" and repr(r) == "rlscope_ray.range('gen', link=...)"
    assert repr(pickle.loads(pickle.dumps(rlscope_ray.range("gen")))) == "rlscope_ray.range('gen')"

    @rlscope_ray.range("update")
    def update(x):
        return x + 1

    shipped = cloudpickle.loads(cloudpickle.dumps(update))
    assert shipped(1) == 2 and shipped.__name__ == "update"


# Every entry point of the `nvtx` package, with every kind of argument its
# attributes carry; rlscope's entry points take some (int categories and
# payloads, float payloads, named domains) and leave others to the package
# (a named category, the decorator).
NVTX_CALLS = """
import json, nvtx, rlscope_ray
from rlscope_ray import nvtx_fast

@nvtx.annotate("decorated", domain="dd")
def f():
    nvtx.mark("inside", domain="dd", category=2)

with rlscope_ray.step(1):
    nvtx.push_range("a", color="red", domain="d1", category=3, payload=7)
    nvtx.push_range("b", category="named")
    nvtx.pop_range()
    nvtx.pop_range(domain="d1")
    r = nvtx.start_range("s", domain="d2", payload=2.5)
    nvtx.end_range(r)
    r = nvtx.start_range("t", payload=-3)
    nvtx.mark("m", payload=-5)
    with nvtx.annotate("ann", color="green", domain="d3", category=4):
        f()
    nvtx.end_range(r)
    with nvtx.annotate("named_category", category="named"):
        pass
print(json.dumps({"installed": nvtx_fast.installed()}))
"""


def _nvtx_events(trace: Trace) -> list:
    """The controller's recorded NVTX events in order, without times and ids
    (not the samplers' slices: when a look finds the thread off CPU depends
    on the machine's load)."""
    from rlscope_ray import _native

    ctrl = trace.pid_of("(controller)")
    keep = {"X", "b", "e", "i"}
    sampled = {_native.names.CAT_CPU_SAMPLES, _native.names.CAT_OFF_CPU}
    out = []
    for e in sorted((e for e in trace.events if e["pid"] == ctrl and e["ph"] in keep and e["name"] != "step"
                     and e.get("cat") not in sampled),
                    key=lambda e: (float(e["ts"]), e["ph"] != "e")):
        args = {k: v for k, v in e.get("args", {}).items() if not k.startswith("raw") and not k.endswith("tid")}
        out.append((e["ph"], e["name"], e.get("cat"), json.dumps(args, sort_keys=True)))
    return out


def test_rlscope_entry_points_record_what_the_nvtx_package_records(aggregator_factory, tmp_path):
    """With rlscope_ray imported, the `nvtx` package's functions go through
    rlscope's entry points (rlscope_ray/nvtx_fast.py): the trace holds the
    same ranges and marks, with the same domains, categories and payloads, as
    through the package's own functions (RLSCOPE_NVTX_FAST_PATH=0), and the
    costs that correct them are their own (py_fast_*, py_annotate_*)."""
    seen = {}
    for way in ("1", "0"):
        agg = aggregator_factory()
        env = dict(agg.env(role="controller", config="{buffers: {per_thread_kb: 8192}}"),
                   RLSCOPE_NVTX_FAST_PATH=way)
        r = subprocess.run([sys.executable, "-c", NVTX_CALLS], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["installed"] == (way == "1")
        agg.wait()
        seen[way] = _nvtx_events(Trace(agg.out / "step_1" / "trace.json"))
        costs = json.loads((agg.out / "step_1" / "summary.json").read_text())["processes"][0]["overhead"]["costs_ns"]
        assert ("py_fast_push" in costs and "py_annotate_pop" in costs) == (way == "1"), costs
    names = [e[1] for e in seen["1"]]
    assert sorted(names) == sorted(["a", "b", "s", "s", "t", "t", "m", "ann", "decorated", "inside",
                                    "named_category"]), seen["1"]  # a start/end range: its begin and end
    assert seen["1"] == seen["0"]
    # Integer payloads as they were given, negative ones too (the package
    # sends a Python int as NVTX's INT64).
    payloads = {e[1]: json.loads(e[3]).get("payload") for e in seen["1"] if e[1] in ("a", "m")}
    assert payloads == {"a": 7, "m": -5}, seen["1"]
    # A mark's category as a range's: "inside" was marked in category 2.
    (inside,) = [json.loads(e[3]) for e in seen["1"] if e[1] == "inside"]
    assert inside.get("category") == 2, seen["1"]


@pytest.mark.parametrize("fast_path", ["1", "0"])
def test_nvtx_colour_names_never_crash_the_host(aggregator_factory, tmp_path, fast_path):
    """verl's marked_timer names colours ("brown", "olive", "pink") that the
    `nvtx` package, once a tool is attached, cannot read without matplotlib:
    it raised TypeError in the host. With rlscope_ray imported every name
    works (matplotlib is hidden here) and the ranges are recorded, through
    rlscope's entry points (which never read a colour) or the package's own."""
    agg = aggregator_factory()
    script = (
        "import sys\n"
        "sys.modules['matplotlib'] = None  # as on a host without matplotlib\n"
        "import nvtx, rlscope_ray\n"
        "with rlscope_ray.step(1):\n"
        "    r = nvtx.start_range('adv', color='brown')\n"
        "    nvtx.end_range(r)\n"
        "    nvtx.push_range('ref', color='olive')\n"
        "    nvtx.pop_range()\n"
        "    with nvtx.annotate('reward', color='no such colour'):\n"
        "        pass\n"
        "    nvtx.mark('m', color='pink')\n")
    env = dict(agg.env(role="controller", config="{buffers: {per_thread_kb: 8192}}"),
               RLSCOPE_NVTX_FAST_PATH=fast_path)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    agg.wait()
    trace = Trace(agg.out / "step_1" / "trace.json")
    ctrl = trace.pid_of("(controller)")
    assert len(trace.asyncs(ctrl, "adv")) == 1
    assert [e["name"] for e in trace.slices(ctrl) if e["name"] in ("ref", "reward")] == ["ref", "reward"]
    assert len(trace.instants(ctrl, "m")) == 1


def test_bad_config_in_environment_leaves_program_unharmed(build_dir, aggregator_factory):
    agg = aggregator_factory(exit_when_done=False)
    env = agg.env(role="controller", config="{steps: \"5-2\"}")
    r = subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "2", "--step-ms", "5"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert 'steps: range "5-2" is empty' in r.stderr
    assert "profiling is off in this process" in r.stderr
    agg.stop()
    assert not list(agg.out.glob("step_*"))


def test_rank_selection_leaves_out_unselected_workers_not_the_controller(build_dir, aggregator_factory, tmp_path):
    agg = aggregator_factory()
    config = "{ranks: [1]}"
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    # The worker records from before the controller's first step until after
    # its last (a handshake by files): its absence from the steps is the
    # selection's doing, not an exit.
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/apps/nvtx_worker.py"), "--duration", "600", "--stop-file", str(stop),
         "--report", str(tmp_path / "w.json"), "--ready", str(ready)],
        env=agg.env(role="worker", rank=0, config=config))
    while not ready.exists():
        assert worker.poll() is None
        time.sleep(0.02)
    r = subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "2", "--step-ms", "10"],
                       env=agg.env(role="controller", config=config), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "treating it as rank 0" not in r.stderr
    assert worker.poll() is None  # alive through every step
    stop.touch()
    assert worker.wait(timeout=60) == 0
    assert json.loads((tmp_path / "w.json").read_text())["ranges"]  # it recorded ranges all along
    log = agg.wait()
    assert sorted(p.name for p in agg.out.glob("step_*")) == ["step_1", "step_2"], log
    trace = Trace(agg.out / "step_2" / "trace.json")
    assert [n for n in trace.process_names.values() if "(controller)" in n]
    assert not [n for n in trace.process_names.values() if "worker" in n]
    run = json.loads((agg.out / "run.json").read_text())
    (w,) = [p for p in run["processes"] if p["role"] == "worker"]
    assert w["selected"] is False and w["events_received"] == 0  # connected, recorded nothing


def test_gpu_tracing_unavailable_is_reported_and_cpu_events_still_arrive(build_dir, aggregator_factory):
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this host has an NVIDIA driver: tests/gpu/run_gpu_checks.sh covers the GPU path")
    agg = aggregator_factory()
    env = agg.env(role="controller")
    env["CUDA_INJECTION64_PATH"] = env["NVTX_INJECTION64_PATH"]  # as the Ray plugin sets it
    subprocess.run([str(build_dir / "tests/apps/nvtx_app"), "--steps", "1", "--step-ms", "5"], env=env,
                   check=True, timeout=60)
    agg.wait()
    summary = json.loads((agg.out / "step_1" / "summary.json").read_text())
    (proc,) = summary["processes"]
    assert proc["labels"]["gpu_tracing"] == "unavailable: no NVIDIA driver on this host"
    assert proc["spans"] == 6  # the CPU side is complete

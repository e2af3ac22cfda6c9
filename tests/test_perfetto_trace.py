"""trace.pftrace, Perfetto's protobuf format, holds what trace.json holds.

Each trace is read back with the `perfetto` package's own protos
(tests/pftrace.py) and compared with the JSON trace of the same step:
tracks, slices (name, category, times, args), start/end ranges, instants
and launch flows. The golden run (tests/cpp/golden_test.cc) has every kind
of record, GPU ones included; the demo is a real multi-process run.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import pftrace
from conftest import ROOT, run_local_demo

GOLDEN = ROOT / "tests" / "golden"


def _num(v):
    return float(f"{v:.5g}") if isinstance(v, float) else v  # JSON writes 6 significant digits


def _ns(us) -> int:
    return round(float(us) * 1000)


def _args(args: dict, ts: int, dur: int) -> tuple:
    """JSON args as the Perfetto writer puts them: raw times as shifts."""
    out = {k: _num(v) for k, v in args.items() if k not in ("raw_ts", "raw_dur")}
    if "raw_ts" in args:
        out["raw_shift_ns"] = _ns(args["raw_ts"]) - ts
        out["raw_end_shift_ns"] = _ns(args["raw_ts"]) + _ns(args["raw_dur"]) - (ts + dur)
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in out.items()))


def json_view(path: Path) -> dict:
    events = json.loads(path.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    track = lambda e: (e["pid"], names.get((e["pid"], e["tid"]), f"thread {e['tid']}"))  # noqa: E731
    slices, instants, flows = Counter(), Counter(), set()
    counters = Counter(((e["pid"], e["name"]), _ns(e["ts"]), _num(float(e["args"]["value"]))) for e in events
                       if e["ph"] == "C")
    for e in events:
        if e["ph"] == "X":
            ts, dur = _ns(e["ts"]), _ns(e["dur"])
            slices[(track(e), e["name"], e["cat"], ts, dur, _args(e.get("args", {}), ts, dur))] += 1
        elif e["ph"] == "i":
            ts = _ns(e["ts"])
            instants[(track(e), e["name"], e["cat"], ts, _args(e.get("args", {}), ts, 0))] += 1
    begins = {(e["pid"], e["id"]): e for e in events if e["ph"] == "b"}
    for e in events:
        if e["ph"] == "e":
            b = begins[(e["pid"], e["id"])]
            ts, dur = _ns(b["ts"]), _ns(e["ts"]) - _ns(b["ts"])
            args = dict(b.get("args", {}), range_id=b["id"], tid=b["tid"])
            slices[((b["pid"], "start/end ranges"), b["name"], b["cat"], ts, dur, _args(args, ts, dur))] += 1
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    for e in events:
        if e["ph"] == "f":
            s = starts[e["id"]]
            flows.add(((track(s), _ns(s["ts"])), (track(e), _ns(e["ts"]))))
    threads = {(pid, n) for (pid, _), n in names.items()}
    return {"processes": set(procs.items()), "threads": threads, "slices": slices, "instants": instants,
            "flows": flows, "counters": counters}


def pf_view(path: Path) -> dict:
    t = pftrace.read(path)
    procs = {(tr.pid, tr.name) for tr in t.tracks.values() if tr.tid == 0 and tr.parent == 0}
    threads = {t.track_key(u) for u, tr in t.tracks.items()
               if (tr.tid != 0 or tr.parent != 0) and not tr.counter and tr.name != "start/end ranges"}
    slices, instants, ends = Counter(), Counter(), {}
    for s in t.slices:
        key = t.track_key(s.track)
        slices[(key, s.name, s.cat, s.ts, s.dur, _args(s.args, s.ts, s.dur))] += 1
        for f in s.flow_in:
            ends[f] = (key, s.ts)
    for i in t.instants:
        instants[(t.track_key(i.track), i.name, i.cat, i.ts, _args(i.args, i.ts, 0))] += 1
    flows = {((t.track_key(s.track), s.ts), ends[f]) for s in t.slices for f in s.flow_out}
    counters = Counter((t.track_key(u), ts, _num(v)) for u, ts, v in t.counters)
    return {"processes": procs, "threads": threads, "slices": slices, "instants": instants, "flows": flows,
            "counters": counters}


def assert_same_trace(step_dir: Path) -> dict:
    j, p = json_view(step_dir / "trace.json"), pf_view(step_dir / "trace.pftrace")
    for part in ("processes", "threads", "slices", "instants", "flows", "counters"):
        assert p[part] == j[part], f"{step_dir.name} {part}: only in JSON {_diff(j[part], p[part])}, " \
                                   f"only in Perfetto {_diff(p[part], j[part])}"
    return j


def _diff(a, b):
    return list((Counter(a) - Counter(b)).items())[:3] if isinstance(a, Counter) else sorted(a - b)[:3]


@pytest.mark.parametrize("step", [1, 2, 3])
def test_the_golden_runs_perfetto_trace_holds_what_its_json_trace_holds(step):
    j = assert_same_trace(GOLDEN / f"step_{step}")
    # The golden run has every kind of record: what was compared is not empty.
    cats = {k[2] for k in j["slices"]}
    assert {"gpu", "gpu_memcpy", "cuda_api", "cpu_samples", "off_cpu", "nvtx", "nvtx.async"} <= cats, cats
    assert j["flows"] and j["instants"] and len(j["processes"]) >= 3
    assert {k[0][1] for k in j["counters"]} >= {"CPU threads: python", "CPU threads: backend", "GPU 0 busy streams"}


def test_a_real_runs_steps_are_written_in_both_formats_with_the_same_events(build_dir, tmp_path):
    r, out = run_local_demo(build_dir, tmp_path,
                            "steps: [2, 3]\nflush: {step_grace_ms: 3000}\noutput: {formats: [json, pftrace]}\n")
    assert r.returncode == 0, r.stderr
    for step in (2, 3):
        j = assert_same_trace(out / f"step_{step}")
        summary = json.loads((out / f"step_{step}" / "summary.json").read_text())
        # Every range of the step (no GPU here: the rest are sampled CPU).
        assert sum(n for k, n in j["slices"].items() if k[2] not in ("cpu_samples", "off_cpu")) == sum(
            p["spans"] for p in summary["processes"])
        assert (out / f"step_{step}" / "trace.pftrace").stat().st_size < (out / f"step_{step}" / "trace.json").stat().st_size


def test_a_wrong_output_format_is_said_with_its_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("steps: [2]\noutput:\n  formats: [json, protobuf]\n")
    r = subprocess.run([sys.executable, "-m", "rlscope_ray.cli", "check", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert f"{cfg}:3:" in r.stderr and "'protobuf' is not one of: json | pftrace | db" in r.stderr, r.stderr


def test_output_formats_choose_which_trace_files_a_step_gets(build_dir, tmp_path):
    r, out = run_local_demo(build_dir, tmp_path, "steps: [2]\nflush: {step_grace_ms: 3000}\noutput: {formats: [pftrace]}\n",
                            steps=2)
    files = sorted(p.name for p in (out / "step_2").iterdir())
    assert files == ["summary.json", "trace.pftrace"], (files, r.stderr[-2000:])
    assert pftrace.read(out / "step_2" / "trace.pftrace").slices

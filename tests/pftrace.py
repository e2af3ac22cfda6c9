"""Reads a .pftrace back as trace_processor would, for tests: the
`perfetto` package's own protos (perfetto_trace_pb2) parse the packets;
this resolves per-sequence interning, incremental timestamps, default
tracks and begin/end pairs into plain slices, instants, flows and counter
values."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

INCREMENTAL_CLOCK = 64


@dataclass
class Track:
    uuid: int
    pid: int
    tid: int  # 0 for a process track or a track of its own
    name: str
    parent: int = 0
    counter: bool = False  # a counter track
    labels: Tuple[str, ...] = ()  # a process's process_labels


@dataclass
class Slice:
    track: int
    name: str
    cat: str
    ts: int
    dur: int = -1
    args: Dict[str, object] = field(default_factory=dict)
    flow_out: List[int] = field(default_factory=list)
    flow_in: List[int] = field(default_factory=list)


@dataclass
class PfTrace:
    tracks: Dict[int, Track]
    slices: List[Slice]
    instants: List[Slice]
    counters: List[Tuple[int, int, float]]  # (track, ts, value)
    packets: int

    def track_key(self, uuid: int) -> Tuple[int, str]:
        """(pid, track name) of a track: its thread's or its own name."""
        t = self.tracks[uuid]
        if t.tid == 0 and t.parent == 0 and t.pid == 0:
            raise KeyError(uuid)
        pid = t.pid if t.pid else self.tracks[t.parent].pid
        return pid, t.name


def _value(a: "pb.DebugAnnotation"):
    if a.array_values:
        return [_value(v) for v in a.array_values]
    kind = a.WhichOneof("value")
    return getattr(a, kind) if kind else None


def read(path: Path) -> PfTrace:
    trace = pb.Trace()
    trace.ParseFromString(Path(path).read_bytes())
    tracks: Dict[int, Track] = {}
    slices: List[Slice] = []
    instants: List[Slice] = []
    counters: List[Tuple[int, int, float]] = []
    state: Dict[int, dict] = {}  # per sequence: interned tables, clock, defaults
    open_: Dict[int, List[Slice]] = {}
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("process"):
                tracks[d.uuid] = Track(d.uuid, d.process.pid, 0, d.process.process_name,
                                       labels=tuple(d.process.process_labels))
            elif d.HasField("thread"):
                tracks[d.uuid] = Track(d.uuid, d.thread.pid, d.thread.tid, d.thread.thread_name)
            else:
                tracks[d.uuid] = Track(d.uuid, 0, 0, d.name, d.parent_uuid, d.HasField("counter"))
            continue
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            state[seq] = {"names": {}, "cats": {}, "args": {}, "ts": 0, "track": 0}
        s = state[seq]
        if p.HasField("clock_snapshot"):
            for c in p.clock_snapshot.clocks:
                if c.clock_id == INCREMENTAL_CLOCK:
                    s["ts"] = c.timestamp
        if p.HasField("trace_packet_defaults"):
            s["track"] = p.trace_packet_defaults.track_event_defaults.track_uuid
        if p.HasField("interned_data"):
            for e in p.interned_data.event_names:
                s["names"][e.iid] = e.name
            for e in p.interned_data.event_categories:
                s["cats"][e.iid] = e.name
            for e in p.interned_data.debug_annotation_names:
                s["args"][e.iid] = e.name
        if not p.HasField("track_event"):
            continue
        s["ts"] += p.timestamp  # the incremental clock: a delta from the packet before
        e = p.track_event
        track = e.track_uuid if e.HasField("track_uuid") else s["track"]
        if e.type == pb.TrackEvent.TYPE_COUNTER:
            counters.append((track, s["ts"], e.double_counter_value))
            continue
        if e.type == pb.TrackEvent.TYPE_SLICE_END:
            sl = open_[track].pop()
            sl.dur = s["ts"] - sl.ts
            continue
        sl = Slice(track, s["names"][e.name_iid], ",".join(s["cats"][i] for i in e.category_iids), s["ts"],
                   args={s["args"][a.name_iid]: _value(a) for a in e.debug_annotations},
                   flow_out=list(e.flow_ids), flow_in=list(e.terminating_flow_ids))
        if e.type == pb.TrackEvent.TYPE_INSTANT:
            instants.append(sl)
        else:
            open_.setdefault(track, []).append(sl)
            slices.append(sl)
    assert all(not v for v in open_.values()), "slices left open"
    return PfTrace(tracks, slices, instants, counters, len(trace.packet))


# ---- comparing with the JSON trace of the same step ----

def _num(v):
    # JSON writes 6 significant digits (json_writer.h, correctly rounded, as
    # Python's "g"): the Perfetto trace's full double rounded the same way is
    # the JSON's value. (Rounding both to 5 digits rounded twice: the JSON's
    # 1001.35, from 1001.3499..., to 1001.4 against the double's 1001.3.)
    return float(f"{v:.6g}") if isinstance(v, float) else v


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
    labels = {(e["pid"], tuple(e["args"]["labels"].split(","))) for e in events
              if e["ph"] == "M" and e["name"] == "process_labels"}
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
    assert len(starts) == sum(e["ph"] == "s" for e in events), "a flow id starts twice"
    for e in events:
        if e["ph"] == "f":
            s = starts[e["id"]]
            flows.add(((track(s), _ns(s["ts"])), (track(e), _ns(e["ts"]))))
    threads = {(pid, n) for (pid, _), n in names.items()}
    return {"processes": set(procs.items()), "labels": labels, "threads": threads, "slices": slices,
            "instants": instants,
            "flows": flows, "counters": counters}


def pf_view(path: Path) -> dict:
    t = read(path)
    procs = {(tr.pid, tr.name) for tr in t.tracks.values() if tr.tid == 0 and tr.parent == 0}
    labels = {(tr.pid, tr.labels) for tr in t.tracks.values() if tr.labels}
    threads = {t.track_key(u) for u, tr in t.tracks.items()
               if (tr.tid != 0 or tr.parent != 0) and not tr.counter and tr.name != "start/end ranges"}
    slices, instants, ends = Counter(), Counter(), {}
    for s in t.slices:
        key = t.track_key(s.track)
        slices[(key, s.name, s.cat, s.ts, s.dur, _args(s.args, s.ts, s.dur))] += 1
        for f in s.flow_in:
            assert f not in ends, f"flow {f} ends twice: trace_processor would link only the first"
            ends[f] = (key, s.ts)
    for i in t.instants:
        instants[(t.track_key(i.track), i.name, i.cat, i.ts, _args(i.args, i.ts, 0))] += 1
    starts = [(f, (t.track_key(s.track), s.ts)) for s in t.slices + t.instants for f in s.flow_out]
    assert len({f for f, _ in starts}) == len(starts), "a flow id starts twice"
    flows = {(start, ends[f]) for f, start in starts}
    counters = Counter((t.track_key(u), ts, _num(v)) for u, ts, v in t.counters)
    return {"processes": procs, "labels": labels, "threads": threads, "slices": slices, "instants": instants,
            "flows": flows,
            "counters": counters}


def assert_same_as_json(step_dir: Path) -> dict:
    """The step's trace.pftrace and trace.json hold the same processes (and
    their labels), tracks, slices, instants, flows and counters; returns
    the JSON's, as sets and multisets of plain tuples."""
    j, p = json_view(step_dir / "trace.json"), pf_view(step_dir / "trace.pftrace")
    for part in ("processes", "labels", "threads", "slices", "instants", "flows", "counters"):
        assert p[part] == j[part], f"{step_dir.name} {part}: only in JSON {_diff(j[part], p[part])}, " \
                                   f"only in Perfetto {_diff(p[part], j[part])}"
    return j


def _diff(a, b):
    return list((Counter(a) - Counter(b)).items())[:3] if isinstance(a, Counter) else sorted(a - b)[:3]

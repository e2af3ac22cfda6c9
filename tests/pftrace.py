"""Reads a .pftrace back as trace_processor would, for tests: the
`perfetto` package's own protos (perfetto_trace_pb2) parse the packets;
this resolves per-sequence interning, incremental timestamps, default
tracks and begin/end pairs into plain slices, instants, flows and counter
values."""
from __future__ import annotations

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
                tracks[d.uuid] = Track(d.uuid, d.process.pid, 0, d.process.process_name)
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

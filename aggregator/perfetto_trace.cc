#include "aggregator/perfetto_trace.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aggregator/step_trace.h"
#include "aggregator/trace_sink.h"

namespace rlscope {
namespace {

// ---- protobuf wire encoding (varint, 64-bit, length-delimited) ----

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2 };

void Varint(std::string* out, uint64_t v) {
  char buf[10];
  size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out->append(buf, n);
}
void Tag(std::string* out, uint32_t field, WireType type) { Varint(out, (uint64_t{field} << 3) | type); }
void VarintField(std::string* out, uint32_t field, uint64_t v) {
  Tag(out, field, kVarint);
  Varint(out, v);
}
void Fixed64Field(std::string* out, uint32_t field, uint64_t v) {
  Tag(out, field, kFixed64);
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (8 * i));
  out->append(buf, 8);
}
void DoubleField(std::string* out, uint32_t field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  Fixed64Field(out, field, bits);
}
void BytesField(std::string* out, uint32_t field, std::string_view bytes) {
  Tag(out, field, kLen);
  Varint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

// Field numbers (perfetto/protos/perfetto/trace/...).
namespace f {
constexpr uint32_t kTracePacket = 1;  // Trace.packet
// TracePacket
constexpr uint32_t kTimestamp = 8, kSequenceId = 10, kTrackEvent = 11, kInternedData = 12, kSequenceFlags = 13;
constexpr uint32_t kClockSnapshot = 6, kTimestampClockId = 58, kPacketDefaults = 59, kTrackDescriptor = 60;
// TrackEvent
constexpr uint32_t kCategoryIids = 3, kDebugAnnotations = 4, kType = 9, kNameIid = 10, kTrackUuid = 11;
constexpr uint32_t kFlowIds = 47, kTerminatingFlowIds = 48, kDoubleCounterValue = 44;
}  // namespace f

constexpr uint32_t kClockBoottime = 6, kClockIncremental = 64;
constexpr uint32_t kSeqIncrementalStateCleared = 1;
enum EventType : uint8_t { kBegin = 1, kEnd = 2, kInstant = 3, kCounter = 4 };

// An argument kept until its event is written: `value` with its key
// interned and its string (a view does not outlive the sink's call) in `s`.
struct Arg {
  uint32_t key_iid = 0;
  TraceArg value;
  std::string s;
};

// A slice (or, end == begin with `instant`, an instant) of one process.
struct Rec {
  int64_t begin = 0, end = 0;
  uint32_t track = 0;  // index into the process's tracks
  uint32_t name_iid = 0, cat_iid = 0;
  int32_t args = -1;  // index into args_ (a run of them), -1 none
  int32_t n_args = 0;
  bool instant = false;
  bool counter = false;  // a counter's value (`value`) at `begin`
  double value = 0;
  std::vector<uint64_t> flows_out;  // flows starting here (a launch of several records, a reused Ray key)
  uint64_t flow_in = 0;
};

// One event to write, in a process's sequence.
struct Out {
  int64_t ts;
  uint32_t rec;
  EventType type;
};

class PerfettoSink : public TraceSink {
 public:
  explicit PerfettoSink(std::string* out) : out_(*out) {}
  void Process(int64_t pid, std::string_view name, int64_t sort_index, const std::vector<std::string>& labels) override;
  void Thread(int64_t pid, int64_t tid, std::string_view name, int64_t sort_index) override;
  void Slice(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, int64_t begin_ns, int64_t end_ns,
             const TraceArgs& args, const RawTimes* raw) override;
  void Async(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, uint64_t id, int64_t begin_ns,
             int64_t end_ns, const TraceArgs& args, const RawTimes* raw) override;
  void Instant(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, int64_t ts_ns,
               const TraceArgs& args) override;
  void FlowStart(int64_t, uint64_t id, std::string_view, std::string_view, int64_t tid, int64_t ts_ns) override {
    flows_.push_back({id, TrackOf(tid), ts_ns, true});
  }
  void FlowEnd(int64_t, uint64_t id, std::string_view, std::string_view, int64_t tid, int64_t ts_ns) override {
    flows_.push_back({id, TrackOf(tid), ts_ns, false});
  }
  void Counter(int64_t pid, std::string_view name, int64_t ts_ns, double value) override;
  // Writes the last process's sequence.
  void Finish() { FlushProcess(); }

 private:
  struct Track {
    uint64_t uuid;
    std::string descriptor;  // an encoded TrackDescriptor
  };
  enum Table : int { kNames = 0, kCats = 1, kArgNames = 2 };
  uint32_t Intern(Table table, std::string_view s);
  uint32_t TrackOf(int64_t tid);
  uint32_t NewTrack(std::string descriptor);
  Rec& Add(uint32_t track, std::string_view name, std::string_view cat, int64_t begin, int64_t end,
           const TraceArgs& args, const RawTimes* raw);
  uint32_t AsyncLane(int64_t begin, int64_t end);
  void PlaceAsync();
  void FlushProcess();
  std::vector<Out> Sequence();
  void WriteEvent(const Out& o, uint64_t default_track, int64_t* last_ts);
  void WriteAnnotations(std::string* event, const Rec& r);
  void Packet(const std::string& packet) { BytesField(&out_, f::kTracePacket, packet); }
  void BindFlows();
  struct PendingFlow {  // one end of a flow, bound at FlushProcess
    uint64_t id;
    uint32_t track;
    int64_t ts_ns;
    bool start;
  };

  std::string& out_;
  // The process being collected.
  int64_t pid_ = 0;
  uint32_t sequence_ = 0;  // its trusted_packet_sequence_id
  uint64_t uuid_base_ = 0;
  std::vector<Track> tracks_;  // [0]: the process's
  std::unordered_map<int64_t, uint32_t> by_tid_;
  std::map<std::string, uint32_t, std::less<>> counters_;  // counter tracks by name
  std::vector<int64_t> lane_ends_;                         // async lanes: the last end on each,
  std::vector<uint32_t> lane_tracks_;                      // and its track
  std::vector<uint32_t> async_;                            // recs of start/end ranges, placed on lanes at FlushProcess
  std::vector<Rec> recs_;
  std::vector<Arg> args_;
  std::vector<PendingFlow> flows_;
  std::string packet_, event_, interned_bytes_, entry_, annotation_, item_;  // scratch for WriteEvent
  std::unordered_map<std::string_view, uint32_t> interned_[3];               // views into strings_
  std::deque<std::string> strings_[3];                                       // by iid - 1
  std::vector<bool> written_[3];                                             // whether its interned entry was written
};

uint32_t PerfettoSink::Intern(Table table, std::string_view s) {
  auto it = interned_[table].find(s);
  if (it != interned_[table].end()) return it->second;
  strings_[table].emplace_back(s);  // a deque: the map's key views stay valid
  written_[table].push_back(false);
  const auto iid = static_cast<uint32_t>(strings_[table].size());
  interned_[table].emplace(strings_[table].back(), iid);
  return iid;
}

uint32_t PerfettoSink::NewTrack(std::string descriptor) {
  tracks_.push_back({uuid_base_ + tracks_.size(), std::move(descriptor)});
  return static_cast<uint32_t>(tracks_.size() - 1);
}

void PerfettoSink::Process(int64_t pid, std::string_view name, int64_t sort_index,
                           const std::vector<std::string>& labels) {
  FlushProcess();
  pid_ = pid;
  ++sequence_;
  uuid_base_ = uint64_t{sequence_} << 20;
  std::string process, track;
  VarintField(&process, 1, static_cast<uint64_t>(pid));            // ProcessDescriptor.pid
  BytesField(&process, 6, name);                                   // process_name
  for (const std::string& l : labels) BytesField(&process, 8, l);  // process_labels
  VarintField(&track, 1, uuid_base_);                              // uuid
  BytesField(&track, 3, process);                                  // process
  VarintField(&track, 11, 3);                                      // child_ordering: EXPLICIT
  VarintField(&track, 12, static_cast<uint64_t>(std::clamp<int64_t>(sort_index, 0, INT32_MAX)));
  NewTrack(track);
}

void PerfettoSink::Thread(int64_t pid, int64_t tid, std::string_view name, int64_t sort_index) {
  std::string track;
  VarintField(&track, 1, uuid_base_ + tracks_.size());
  if (tid > 0 && tid <= INT32_MAX) {  // a real thread
    std::string thread;
    VarintField(&thread, 1, static_cast<uint64_t>(pid));  // ThreadDescriptor.pid
    VarintField(&thread, 2, static_cast<uint64_t>(tid));  // tid
    BytesField(&thread, 5, name);                         // thread_name
    BytesField(&track, 4, thread);
  } else {                               // a track of its own under the process (a GPU stream, sampled CPU)
    VarintField(&track, 5, uuid_base_);  // parent_uuid
    BytesField(&track, 2, name);
  }
  VarintField(&track, 12, static_cast<uint64_t>(std::clamp<int64_t>(sort_index, 0, INT32_MAX)));
  by_tid_[tid] = NewTrack(track);
}

uint32_t PerfettoSink::TrackOf(int64_t tid) {
  auto it = by_tid_.find(tid);
  if (it != by_tid_.end()) return it->second;
  Thread(pid_, tid, "thread " + std::to_string(tid), tid);  // an event on a track never declared
  return by_tid_.at(tid);
}

Rec& PerfettoSink::Add(uint32_t track, std::string_view name, std::string_view cat, int64_t begin, int64_t end,
                       const TraceArgs& args, const RawTimes* raw) {
  Rec r;
  r.begin = begin;
  r.end = std::max(begin, end);
  r.track = track;
  r.name_iid = Intern(kNames, name);
  r.cat_iid = Intern(kCats, cat);
  const size_t first = args_.size();
  for (int i = 0; i < args.size(); ++i) {
    const TraceArg& a = args[i];
    args_.push_back({Intern(kArgNames, a.key), a, std::string(a.s)});
    args_.back().value.key = args_.back().value.s = {};
  }
  if (raw != nullptr) {
    TraceArg b, e;
    b.i = raw->begin_ns - begin;
    e.i = raw->end_ns - end;
    args_.push_back({Intern(kArgNames, "raw_shift_ns"), b, {}});
    args_.push_back({Intern(kArgNames, "raw_end_shift_ns"), e, {}});
  }
  if (args_.size() > first) r.args = static_cast<int32_t>(first), r.n_args = static_cast<int32_t>(args_.size() - first);
  recs_.push_back(r);
  return recs_.back();
}

void PerfettoSink::Slice(int64_t, int64_t tid, std::string_view name, std::string_view cat, int64_t begin_ns,
                         int64_t end_ns, const TraceArgs& args, const RawTimes* raw) {
  Add(TrackOf(tid), name, cat, begin_ns, end_ns, args, raw);
}

// The start/end ranges, by begin, each on the first lane free at its begin.
void PerfettoSink::PlaceAsync() {
  std::stable_sort(async_.begin(), async_.end(),
                   [&](uint32_t a, uint32_t b) { return recs_[a].begin < recs_[b].begin; });
  for (uint32_t i : async_) recs_[i].track = AsyncLane(recs_[i].begin, recs_[i].end);
}

// Start/end ranges overlap freely: each goes on the first lane (a track
// "start/end ranges" under the process) free at its begin.
uint32_t PerfettoSink::AsyncLane(int64_t begin, int64_t end) {
  for (size_t i = 0; i < lane_ends_.size(); ++i) {
    if (lane_ends_[i] <= begin) {
      lane_ends_[i] = end;
      return lane_tracks_[i];
    }
  }
  std::string track;
  VarintField(&track, 1, uuid_base_ + tracks_.size());
  VarintField(&track, 5, uuid_base_);
  BytesField(&track, 2, "start/end ranges");
  VarintField(&track, 12, static_cast<uint64_t>(INT32_MAX - 1000 + lane_ends_.size()));
  lane_ends_.push_back(end);
  lane_tracks_.push_back(NewTrack(track));
  return lane_tracks_.back();
}

void PerfettoSink::Async(int64_t, int64_t tid, std::string_view name, std::string_view cat, uint64_t id,
                         int64_t begin_ns, int64_t end_ns, const TraceArgs& args, const RawTimes* raw) {
  TraceArgs with_ids = args;
  with_ids.Uint("range_id", id).Int("tid", tid);
  async_.push_back(static_cast<uint32_t>(recs_.size()));
  Add(0, name, cat, begin_ns, end_ns, with_ids, raw);  // its lane once all are in (PlaceAsync)
}

void PerfettoSink::Instant(int64_t, int64_t tid, std::string_view name, std::string_view cat, int64_t ts_ns,
                           const TraceArgs& args) {
  Add(TrackOf(tid), name, cat, ts_ns, ts_ns, args, nullptr).instant = true;
}

void PerfettoSink::Counter(int64_t, std::string_view name, int64_t ts_ns, double value) {
  auto it = counters_.find(name);
  if (it == counters_.end()) {
    std::string track;
    VarintField(&track, 1, uuid_base_ + tracks_.size());
    VarintField(&track, 5, uuid_base_);  // parent_uuid: the process
    BytesField(&track, 2, name);
    BytesField(&track, 8, "");  // counter: a CounterDescriptor, defaults
    it = counters_.emplace(std::string(name), NewTrack(track)).first;
  }
  Rec r;
  r.begin = r.end = ts_ns;
  r.track = it->second;
  r.counter = true;
  r.value = value;
  recs_.push_back(r);
}

// A flow's end goes on the slice that begins where it is, on its track;
// a start with no such slice on the instant there. An end with neither is
// left out (its flow then shows from or to nothing).
void PerfettoSink::BindFlows() {
  if (flows_.empty()) return;
  std::map<std::pair<uint32_t, int64_t>, uint32_t> slice_at, instant_at;  // (track, ts) -> rec
  for (uint32_t i = 0; i < recs_.size(); ++i) {
    if (recs_[i].counter) continue;
    (recs_[i].instant ? instant_at : slice_at).emplace(std::make_pair(recs_[i].track, recs_[i].begin), i);
  }
  auto at = [](const std::map<std::pair<uint32_t, int64_t>, uint32_t>& m, const PendingFlow& fl) -> int64_t {
    auto it = m.find({fl.track, fl.ts_ns});
    return it == m.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  };
  for (const PendingFlow& fl : flows_) {
    int64_t rec = at(slice_at, fl);
    if (rec < 0 && fl.start) rec = at(instant_at, fl);
    if (rec < 0) continue;
    if (fl.start)
      recs_[rec].flows_out.push_back(fl.id);
    else
      recs_[rec].flow_in = fl.id;
  }
}

// The process's events in the order they are written: per track, slices
// by begin (the longer first) with each one's end before the next begin
// past it, a child ending no later than its parent; then all tracks merged
// by time, a track's own order kept at equal times.
std::vector<Out> PerfettoSink::Sequence() {
  std::vector<uint32_t> order(recs_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const Rec &x = recs_[a], &y = recs_[b];
    if (x.track != y.track) return x.track < y.track;
    if (x.begin != y.begin) return x.begin < y.begin;
    return x.end > y.end;
  });
  std::vector<Out> out;
  out.reserve(recs_.size() * 2);
  std::vector<uint32_t> open;  // slices open on the current track
  auto close_until = [&](int64_t t, bool all) {
    while (!open.empty() && (all || recs_[open.back()].end <= t)) {
      out.push_back({recs_[open.back()].end, open.back(), kEnd});
      open.pop_back();
    }
  };
  for (size_t k = 0; k < order.size(); ++k) {
    Rec& r = recs_[order[k]];
    if (k > 0 && recs_[order[k - 1]].track != r.track) close_until(0, true);
    if (r.instant || r.counter) {
      close_until(r.begin - 1, false);
      out.push_back({r.begin, order[k], r.counter ? kCounter : kInstant});
      continue;
    }
    close_until(r.begin, false);  // a slice ending where this begins is its sibling
    if (!open.empty()) r.end = std::min(r.end, recs_[open.back()].end);
    out.push_back({r.begin, order[k], kBegin});
    open.push_back(order[k]);
  }
  close_until(0, true);
  std::stable_sort(out.begin(), out.end(), [](const Out& a, const Out& b) { return a.ts < b.ts; });
  return out;
}

void PerfettoSink::WriteAnnotations(std::string* event, const Rec& r) {
  std::string &a = annotation_, &item = item_;
  for (int32_t k = 0; k < r.n_args; ++k) {
    const Arg& arg = args_[r.args + k];
    const TraceArg& v = arg.value;
    a.clear();
    VarintField(&a, 1, arg.key_iid);  // DebugAnnotation.name_iid
    switch (v.type) {
      case TraceArg::Type::kInt: VarintField(&a, 4, static_cast<uint64_t>(v.i)); break;
      case TraceArg::Type::kUint: VarintField(&a, 3, v.u); break;
      case TraceArg::Type::kDouble: DoubleField(&a, 5, v.d); break;
      case TraceArg::Type::kString: BytesField(&a, 6, arg.s); break;
      case TraceArg::Type::kBool: VarintField(&a, 2, v.i != 0); break;
      case TraceArg::Type::kInts3:
        for (int64_t n : v.v) {
          item.clear();
          VarintField(&item, 4, static_cast<uint64_t>(n));
          BytesField(&a, 12, item);  // array_values
        }
        break;
    }
    BytesField(event, f::kDebugAnnotations, a);
  }
}

void PerfettoSink::WriteEvent(const Out& o, uint64_t default_track, int64_t* last_ts) {
  const Rec& r = recs_[o.rec];
  std::string &packet = packet_, &event = event_, &interned = interned_bytes_;  // reused: no allocation per event
  packet.clear(), event.clear(), interned.clear();
  VarintField(&packet, f::kTimestamp, static_cast<uint64_t>(o.ts - *last_ts));
  *last_ts = o.ts;
  VarintField(&packet, f::kSequenceId, sequence_);
  VarintField(&event, f::kType, o.type);
  if (tracks_[r.track].uuid != default_track) VarintField(&event, f::kTrackUuid, tracks_[r.track].uuid);
  if (o.type == kCounter) DoubleField(&event, f::kDoubleCounterValue, r.value);
  if (o.type == kBegin || o.type == kInstant) {
    // Each interned string in the first packet that uses it.
    auto intern = [&](Table table, uint32_t field, uint32_t iid) {
      if (written_[table][iid - 1]) return;
      written_[table][iid - 1] = true;
      std::string& entry = entry_;
      entry.clear();
      VarintField(&entry, 1, iid);
      BytesField(&entry, 2, strings_[table][iid - 1]);
      BytesField(&interned, field, entry);
    };
    intern(kCats, 1, r.cat_iid);
    intern(kNames, 2, r.name_iid);
    for (int32_t k = 0; k < r.n_args; ++k) intern(kArgNames, 3, args_[r.args + k].key_iid);
    VarintField(&event, f::kCategoryIids, r.cat_iid);
    VarintField(&event, f::kNameIid, r.name_iid);
    WriteAnnotations(&event, r);
    for (uint64_t id : r.flows_out) Fixed64Field(&event, f::kFlowIds, id);
    if (o.type == kBegin && r.flow_in != 0) Fixed64Field(&event, f::kTerminatingFlowIds, r.flow_in);
  }
  if (!interned.empty()) BytesField(&packet, f::kInternedData, interned);
  BytesField(&packet, f::kTrackEvent, event);
  Packet(packet);
}

void PerfettoSink::FlushProcess() {
  if (tracks_.empty()) return;
  PlaceAsync();
  for (const Track& t : tracks_) {
    std::string packet;
    BytesField(&packet, f::kTrackDescriptor, t.descriptor);
    Packet(packet);
  }
  BindFlows();
  const std::vector<Out> events = Sequence();
  // The track most events are on is the sequence's default (its events omit it).
  std::vector<size_t> per_track(tracks_.size(), 0);
  for (const Out& o : events) ++per_track[recs_[o.rec].track];
  const uint64_t default_track = tracks_[std::max_element(per_track.begin(), per_track.end()) - per_track.begin()].uuid;
  int64_t last_ts = events.empty() ? 0 : events.front().ts;
  // The sequence's first packet: clears its state, snapshots the
  // incremental clock against BOOTTIME at the first time, sets defaults.
  std::string first, defaults, event_defaults, snapshot, clock;
  VarintField(&first, f::kTimestamp, static_cast<uint64_t>(last_ts));
  VarintField(&first, f::kTimestampClockId, kClockBoottime);
  VarintField(&first, f::kSequenceId, sequence_);
  VarintField(&first, f::kSequenceFlags, kSeqIncrementalStateCleared);
  for (uint32_t id : {kClockBoottime, kClockIncremental}) {
    clock.clear();
    VarintField(&clock, 1, id);
    VarintField(&clock, 2, static_cast<uint64_t>(last_ts));
    if (id == kClockIncremental) VarintField(&clock, 3, 1);  // is_incremental
    BytesField(&snapshot, 1, clock);
  }
  BytesField(&first, f::kClockSnapshot, snapshot);
  VarintField(&event_defaults, 11, default_track);  // TrackEventDefaults.track_uuid
  VarintField(&defaults, f::kTimestampClockId, kClockIncremental);
  BytesField(&defaults, 11, event_defaults);  // TracePacketDefaults.track_event_defaults
  BytesField(&first, f::kPacketDefaults, defaults);
  Packet(first);
  for (const Out& o : events) WriteEvent(o, default_track, &last_ts);
  tracks_.clear();
  by_tid_.clear();
  counters_.clear();
  lane_ends_.clear();
  lane_tracks_.clear();
  async_.clear();
  recs_.clear();
  args_.clear();
  flows_.clear();
  for (int t = 0; t < 3; ++t) {
    interned_[t].clear();
    strings_[t].clear();
    written_[t].clear();
  }
}

}  // namespace

std::string StepTracePerfetto(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids) {
  std::string out;
  PerfettoSink sink(&out);
  StepTraceEvents(step, trace_pids, &sink);
  sink.Finish();
  return out;
}

}  // namespace rlscope

// What a step's trace holds, independent of its file format: tracks (a
// process, its threads, and tracks of their own for GPU streams and sampled
// CPU), slices, async ranges, instants and flows. step_trace.h walks a
// StepProfile into a TraceSink; chrome_trace.h (JSON) and perfetto_trace.h
// (protobuf TrackEvent) are the sinks, so both formats hold the same events.
// Counters: per process, how many sampled threads ran in each CPU category
// and how many streams of each GPU ran work, over the step.
//
// Contract for sinks: for each process, Process() comes first, then its
// tracks (Thread) and its events, before the next Process(); a track is
// declared before any event on it; times are nanoseconds on the
// aggregator's clock. Strings passed by view live only during the call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <type_traits>
#include <string_view>
#include <vector>

namespace rlscope {

// One argument of an event ("args" in JSON, a debug annotation in Perfetto).
struct TraceArg {
  enum class Type : uint8_t { kInt, kUint, kDouble, kString, kBool, kInts3 };
  std::string_view key;
  Type type = Type::kInt;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string_view s;
  std::array<int64_t, 3> v{};
};

// An event's arguments, in order, at most kMax (no allocation; the slots
// not used are not even initialised: one is made per event).
class TraceArgs {
 public:
  static constexpr int kMax = 8;
  TraceArgs& Int(std::string_view k, int64_t v) { return Add(k, TraceArg::Type::kInt).i = v, *this; }
  TraceArgs& Uint(std::string_view k, uint64_t v) { return Add(k, TraceArg::Type::kUint).u = v, *this; }
  TraceArgs& Double(std::string_view k, double v) { return Add(k, TraceArg::Type::kDouble).d = v, *this; }
  TraceArgs& String(std::string_view k, std::string_view v) { return Add(k, TraceArg::Type::kString).s = v, *this; }
  TraceArgs& Bool(std::string_view k, bool v) { return Add(k, TraceArg::Type::kBool).i = v, *this; }
  TraceArgs& Ints3(std::string_view k, const std::array<int64_t, 3>& v) {
    return Add(k, TraceArg::Type::kInts3).v = v, *this;
  }
  int size() const { return n_; }
  const TraceArg& operator[](int i) const { return *std::launder(reinterpret_cast<const TraceArg*>(slots_[i])); }

 private:
  static_assert(std::is_trivially_copyable_v<TraceArg> && std::is_trivially_destructible_v<TraceArg>);
  TraceArg& Add(std::string_view k, TraceArg::Type t) {
    TraceArg& a = *new (slots_[n_ < kMax ? n_++ : kMax - 1]) TraceArg{};
    a.key = k;
    a.type = t;
    return a;
  }
  alignas(TraceArg) unsigned char slots_[kMax][sizeof(TraceArg)];  // [0, n_) hold a TraceArg each
  int n_ = 0;
};

// Where a range was before overhead correction moved it (absent: not moved).
struct RawTimes {
  int64_t begin_ns = 0, end_ns = 0;
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // A process track: its label, its place among processes (controller 0)
  // and its Ray identity as "key=value" labels (actor, node, job, worker).
  virtual void Process(int64_t pid, std::string_view name, int64_t sort_index,
                       const std::vector<std::string>& labels) = 0;
  // A thread track of the process (tid: a real thread id, or a track id of
  // its own far above them: GPU streams, sampled CPU).
  virtual void Thread(int64_t pid, int64_t tid, std::string_view name, int64_t sort_index) = 0;
  // A complete slice [begin_ns, end_ns] on a thread track.
  virtual void Slice(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, int64_t begin_ns,
                     int64_t end_ns, const TraceArgs& args, const RawTimes* raw = nullptr) = 0;
  // A start/end range (may end on another thread), by its range id.
  virtual void Async(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, uint64_t id,
                     int64_t begin_ns, int64_t end_ns, const TraceArgs& args, const RawTimes* raw = nullptr) = 0;
  virtual void Instant(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, int64_t ts_ns,
                       const TraceArgs& args) = 0;
  // A counter track's value from ts_ns on (the track: `name` under the
  // process, made on its first value).
  virtual void Counter(int64_t pid, std::string_view name, int64_t ts_ns, double value) = 0;
  // A flow arrow's two ends, each in its own process's events: it starts
  // at the slice that begins at ts_ns on tid (else the instant there) and
  // ends at the slice that begins at ts_ns on tid (a launch to what it
  // launched; a controller's Ray call submit to the worker's execution).
  // `id` is unique in the trace; both ends carry the same name and cat.
  virtual void FlowStart(int64_t pid, uint64_t id, std::string_view name, std::string_view cat, int64_t tid,
                         int64_t ts_ns) = 0;
  virtual void FlowEnd(int64_t pid, uint64_t id, std::string_view name, std::string_view cat, int64_t tid,
                       int64_t ts_ns) = 0;
  // The events of items [0, n), in that order: `each(sink, i)` makes item
  // i's on `sink`. A sink may make parts of the range on other threads, each
  // on a sink of its own, and keep their events in order; so `each` may
  // only read what it shares with others (a ProcessTimeline, the step) and
  // write only to the sink it is given.
  virtual void ForEach(size_t n, const std::function<void(TraceSink*, size_t)>& each) {
    for (size_t i = 0; i < n; ++i) each(this, i);
  }
};

}  // namespace rlscope

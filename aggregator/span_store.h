// A process's completed spans (records.h), in completion order, until no
// step to come can hold them; cut to a step thread by thread. One of
// ProcessTimeline's parts (timeline.h); RangePairing fills it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "aggregator/chunk_queue.h"
#include "aggregator/records.h"
#include "aggregator/time_blocks.h"

namespace rlscope {

class SpanStore {
 public:
  // A span that closed (its end not before its begin).
  void Add(const Span& span);
  // The completed spans overlapping [begin, end) (a zero-length one inside
  // it), appended to `spans` thread by thread (threads in the order they
  // first closed one, each's in completion order), so a step's spans need
  // no merge of its batches' runs to be put in thread order (SortSlice).
  // `reserve_more`: room kept after them (the open spans the caller adds).
  // With `second_core`, a large output's fresh pages are mapped by two
  // threads (prefault.h). Reads only the blocks that can hold any
  // (time_blocks.h).
  void Cut(int64_t begin_ns, int64_t end_ns, std::vector<Span>* spans, size_t reserve_more, bool second_core) const;
  // The earliest begin of the spans ending at or after `ns`; `ns` when none
  // begins before it (ReleasePoint).
  int64_t EarliestBeginEndingFrom(int64_t ns) const;
  // Forgets the spans that no step beginning at or after `ns` can contain:
  // those ending before `ns`, or at `ns` having begun earlier, of those
  // held now. Those at the front go; one kept there keeps those behind it
  // in memory, but no later Cut or EarliestBeginEndingFrom sees them
  // (TimeBlocks::Forget).
  void DiscardBefore(int64_t ns);
  // Spans held, forgotten ones not yet let go among them.
  size_t size() const { return done_.size(); }
  // Spans read by Cut and EarliestBeginEndingFrom so far (tests).
  uint64_t spans_read() const { return spans_read_; }

 private:
  // done_tids_' index of `tid` (its size when absent), `hint` tried first.
  size_t DoneThread(int64_t tid, size_t hint) const;
  // Forgotten by a discard at `floor_ns` (TimeBlocks::Forget).
  static bool Forgotten(const Span& s, int64_t floor_ns) {
    return s.end_ns < floor_ns || (s.end_ns == floor_ns && s.begin_ns < floor_ns);
  }
  // Calls f(span) for each span not forgotten in a block that may hold one
  // beginning before `before_ns` and ending at or after `from_ns`, in
  // completion order.
  template <typename F>
  void ForEachIn(int64_t from_ns, int64_t before_ns, const F& f) const;

  ChunkQueue<Span> done_;  // completed, in completion order
  TimeBlocks blocks_;      // of done_: begins and ends
  // The threads that closed what done_ holds (some may have none left in
  // it), in order of first sight; cleared when done_ empties.
  std::vector<int64_t> done_tids_;
  size_t last_done_ = 0;  // done_tids_ index of the last span closed
  mutable uint64_t spans_read_ = 0;
};

}  // namespace rlscope

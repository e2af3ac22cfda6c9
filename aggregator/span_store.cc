#include "aggregator/span_store.h"

#include <algorithm>

#include "aggregator/prefault.h"

namespace rlscope {

void SpanStore::Add(const Span& span) {
  blocks_.Added(done_.size(), span.begin_ns, span.end_ns);
  done_.push_back(span);
  if (done_tids_.empty() || done_tids_[last_done_] != span.tid) {
    last_done_ = DoneThread(span.tid, last_done_);
    if (last_done_ == done_tids_.size()) done_tids_.push_back(span.tid);
  }
}

size_t SpanStore::DoneThread(int64_t tid, size_t hint) const {
  if (hint < done_tids_.size() && done_tids_[hint] == tid) return hint;
  return static_cast<size_t>(std::find(done_tids_.begin(), done_tids_.end(), tid) - done_tids_.begin());
}

template <typename F>
void SpanStore::ForEachIn(int64_t from_ns, int64_t before_ns, const F& f) const {
  spans_read_ += blocks_.ForEach(done_.size(), from_ns, before_ns, [&](size_t i, int64_t floor_ns) {
    const Span& s = done_[i];
    if (!Forgotten(s, floor_ns)) f(s);
  });
}

void SpanStore::Cut(int64_t begin_ns, int64_t end_ns, std::vector<Span>* spans, size_t reserve_more,
                    bool second_core) const {
  auto in_step = [&](const Span& s) {
    return (s.begin_ns < end_ns && s.end_ns > begin_ns) ||
           (s.begin_ns == s.end_ns && s.begin_ns >= begin_ns && s.begin_ns < end_ns);
  };
  const size_t base = spans->size();
  // (Every span in_step begins before end_ns and ends at or after begin_ns:
  // ForEachIn's blocks.) Counted first: the step's spans of each thread (done_tids_ order).
  std::vector<size_t> at(std::max<size_t>(1, done_tids_.size()), 0);
  const bool one_thread = done_tids_.size() <= 1;
  size_t t = 0;  // done_tids_ index of the span before
  ForEachIn(begin_ns, end_ns, [&](const Span& s) {
    if (!in_step(s)) return;
    if (!one_thread) t = DoneThread(s.tid, t);  // every tid in done_ is in done_tids_
    ++at[t];
  });
  if (one_thread) {  // one thread closed them all: in order as they are
    spans->reserve(base + at[0] + reserve_more);
    PrefaultCapacity(spans, second_core);
    ForEachIn(begin_ns, end_ns, [&](const Span& s) {
      if (in_step(s)) spans->push_back(s);
    });
    return;
  }
  // Each thread's spans placed after room for the step's of the threads
  // before it.
  size_t next = base;
  for (size_t& a : at) {
    const size_t count = a;
    a = next;
    next += count;
  }
  spans->reserve(next + reserve_more);
  PrefaultCapacity(spans, second_core);
  spans->resize(next);
  t = 0;
  ForEachIn(begin_ns, end_ns, [&](const Span& s) {
    if (!in_step(s)) return;
    t = DoneThread(s.tid, t);
    (*spans)[at[t]++] = s;
  });
}

int64_t SpanStore::EarliestBeginEndingFrom(int64_t ns) const {
  int64_t earliest = ns;
  ForEachIn(ns, ns, [&](const Span& s) {
    if (s.end_ns >= ns && s.begin_ns < earliest) earliest = s.begin_ns;
  });
  return earliest;
}

void SpanStore::DiscardBefore(int64_t ns) {
  // A step beginning at `ns` still takes what is exactly at `ns` (Cut is
  // [begin, end)): zero-length spans there are kept.
  blocks_.Forget(done_.size(), ns);
  while (!done_.empty() && Forgotten(done_.front(), blocks_.FrontFloor())) {
    done_.pop_front();
    blocks_.PoppedFront();
  }
  if (done_.empty()) {
    blocks_.Clear();
    done_tids_.clear();
    last_done_ = 0;
  }
}

}  // namespace rlscope

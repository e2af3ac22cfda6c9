#include "aggregator/span_store.h"

#include <algorithm>

#include "aggregator/prefault.h"

namespace rlscope {

void SpanStore::Add(const Span& span) {
  done_.push_back(span);
  if (done_tids_.empty() || done_tids_[last_done_] != span.tid) {
    last_done_ = DoneThread(span.tid, last_done_);
    if (last_done_ == done_tids_.size()) {
      done_tids_.push_back(span.tid);
      done_counts_.push_back(0);
    }
  }
  ++done_counts_[last_done_];
}

size_t SpanStore::DoneThread(int64_t tid, size_t hint) const {
  if (hint < done_tids_.size() && done_tids_[hint] == tid) return hint;
  return static_cast<size_t>(std::find(done_tids_.begin(), done_tids_.end(), tid) - done_tids_.begin());
}

void SpanStore::Cut(int64_t begin_ns, int64_t end_ns, std::vector<Span>* spans, size_t reserve_more,
                    bool second_core) const {
  auto in_step = [&](const Span& s) {
    return (s.begin_ns < end_ns && s.end_ns > begin_ns) ||
           (s.begin_ns == s.end_ns && s.begin_ns >= begin_ns && s.begin_ns < end_ns);
  };
  const size_t base = spans->size();
  if (done_tids_.size() <= 1) {  // one thread closed them all: in order as they are
    spans->reserve(base + done_.size() + reserve_more);
    // Mostly filled: done_ holds what ended after the last step written.
    PrefaultCapacity(spans, second_core);
    for (const Span& s : done_) {
      if (in_step(s)) spans->push_back(s);
    }
    return;
  }
  // Each thread's spans placed after room for all of the threads' before
  // it (done_tids_ order, done_counts_), then the room they left closed up.
  std::vector<size_t> first(done_tids_.size()), at(done_tids_.size());
  size_t next = base;
  for (size_t i = 0; i < at.size(); ++i) {
    first[i] = at[i] = next;
    next += done_counts_[i];
  }
  spans->reserve(next + reserve_more);
  PrefaultCapacity(spans, second_core);
  spans->resize(next);
  size_t t = 0;  // done_tids_ index of the span before
  for (const Span& s : done_) {
    if (!in_step(s)) continue;
    t = DoneThread(s.tid, t);  // every tid in done_ is in done_tids_
    (*spans)[at[t]++] = s;
  }
  size_t to = base;
  for (size_t i = 0; i < at.size(); ++i) {
    if (to != first[i]) std::move(spans->begin() + first[i], spans->begin() + at[i], spans->begin() + to);
    to += at[i] - first[i];
  }
  spans->resize(to);
}

int64_t SpanStore::EarliestBeginEndingFrom(int64_t ns) const {
  int64_t earliest = ns;
  for (const Span& s : done_) {
    if (s.end_ns >= ns && s.begin_ns < earliest) earliest = s.begin_ns;
  }
  return earliest;
}

void SpanStore::DiscardBefore(int64_t ns) {
  // A step beginning at `ns` still takes what is exactly at `ns` (Cut is
  // [begin, end)): zero-length spans there are kept.
  done_.erase(std::remove_if(done_.begin(), done_.end(),
                             [ns](const Span& s) { return s.end_ns < ns || (s.end_ns == ns && s.begin_ns < ns); }),
              done_.end());
  if (done_.empty()) {
    done_tids_.clear();
    done_counts_.clear();
    last_done_ = 0;
    return;
  }
  std::fill(done_counts_.begin(), done_counts_.end(), 0);
  size_t t = 0;
  for (const Span& s : done_) {
    t = DoneThread(s.tid, t);
    ++done_counts_[t];
  }
}

}  // namespace rlscope

// A bounded single-producer/single-consumer ring of EventRecords.
//
// Threading contract: exactly one producer thread calls TryPush(); exactly one
// consumer (the collector's flush thread) calls Drain(). Neither blocks, locks,
// allocates or makes a syscall. When the ring is full TryPush() drops the record
// and counts it; the count is read by the consumer with dropped().
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "native/event.h"

namespace rlscope {

class ThreadBuffer {
 public:
  // `capacity` is rounded up to a power of two (minimum 16 records).
  ThreadBuffer(int64_t tid, size_t capacity);
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  int64_t tid() const { return tid_; }
  size_t capacity() const { return mask_ + 1; }

  // Producer only. Returns false (and counts a drop, unless `counted` is
  // false: the profiler's own records) when full. An ordinary record
  // (privileged=false) leaves the last reserve() slots free: they take only
  // privileged ones, the closes of recorded ranges and the step edges, so a
  // full ring drops whole ranges and keeps step boundaries.
  inline __attribute__((always_inline)) bool TryPush(const EventRecord& record, bool privileged = true,
                                                     bool counted = true) {
    const uint64_t limit = privileged ? mask_ : mask_ - reserve_;
    const uint64_t head = head_.load(std::memory_order_relaxed);  // own index
    if (head - cached_tail_ > limit) {
      // Acquire pairs with the consumer's release in Drain(): the slots it
      // freed are no longer being read.
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head - cached_tail_ > limit) {
        // Relaxed: a statistic, read by the consumer after the fact.
        if (counted) dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return false;
      }
    }
    slots_[head & mask_] = record;
    // Relaxed: a statistic (written()), like dropped_.
    if (!counted) uncounted_.store(uncounted_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Release publishes the slot contents to the consumer.
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
  // Producer only: records pushed so far, and the last one pushed (valid
  // when pushed() > 0; the consumer only reads slots, so it stays intact).
  uint64_t pushed() const { return head_.load(std::memory_order_relaxed); }
  const EventRecord& last() const { return slots_[(head_.load(std::memory_order_relaxed) - 1) & mask_]; }
  // Slots only privileged records may take: an eighth of the ring, at most 256.
  size_t reserve() const { return static_cast<size_t>(reserve_); }
  // Producer only, after a successful TryPush: true once per half ring of
  // records, the moment for the caller to wake the consumer early (a dense
  // burst fills the ring faster than the flush interval empties it).
  bool AtHalfMark() const { return (head_.load(std::memory_order_relaxed) & (mask_ >> 1)) == 0; }

  // Consumer only. Calls fn(const EventRecord*, size_t n) for up to two
  // contiguous runs of the records present now, then frees them. Returns the
  // number of records drained.
  template <typename Fn>
  size_t Drain(Fn&& fn, size_t max_records = SIZE_MAX) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);  // own index
    uint64_t head = head_.load(std::memory_order_acquire);  // see published slots
    if (head - tail > max_records) head = tail + max_records;
    const size_t n = static_cast<size_t>(head - tail);
    if (n == 0) return 0;
    const size_t begin = static_cast<size_t>(tail & mask_);
    const size_t first = n < capacity() - begin ? n : capacity() - begin;
    fn(&slots_[begin], first);
    if (first < n) fn(&slots_[0], n - first);
    // Release: our reads of the slots happen before the producer reuses them.
    tail_.store(head, std::memory_order_release);
    return n;
  }

  // Consumer only. Calls fn(EventRecord&) on each of the first `n` records
  // present (n <= size()), in order, without freeing them: the consumer owns
  // the slots between its index and the producer's, so it may rewrite them
  // before Drain (the CPU sampler resolves addresses to names there).
  template <typename Fn>
  void VisitPending(size_t n, Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);  // own index
    // Acquire: the producer's writes to these slots are visible.
    const uint64_t head = head_.load(std::memory_order_acquire);
    if (n > head - tail) n = static_cast<size_t>(head - tail);
    for (size_t i = 0; i < n; ++i) fn(slots_[(tail + i) & mask_]);
  }

  // Records currently buffered (approximate when racing with the producer).
  size_t size() const {
    return static_cast<size_t>(head_.load(std::memory_order_acquire) -
                               tail_.load(std::memory_order_acquire));
  }
  // Records accepted since creation, less the uncounted ones (the
  // profiler's own: cost samples). What the process recorded.
  uint64_t written() const {
    const uint64_t head = head_.load(std::memory_order_acquire);
    return head - std::min(head, uncounted_.load(std::memory_order_relaxed));
  }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  const int64_t tid_;
  const uint64_t mask_;
  const uint64_t reserve_;
  // 64-byte aligned (no record straddles a cache line) and touched at
  // construction, so the first lap pays no page faults on the hot path.
  struct AlignedFree {
    void operator()(EventRecord* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<EventRecord[], AlignedFree> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the producer
  uint64_t cached_tail_ = 0;                   // producer's view of tail_
  std::atomic<uint64_t> dropped_{0};           // written by the producer
  std::atomic<uint64_t> uncounted_{0};         // written by the producer: accepted with counted=false
  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the consumer
};

}  // namespace rlscope

// A single-producer/single-consumer ring of EventRecords that overflows into
// reserved memory, by chunks, instead of dropping.
//
// Threading contract: exactly one producer thread calls TryPush(); exactly one
// consumer (the collector's flush thread) calls Drain(). Neither blocks or
// locks; the producer never allocates or makes a syscall.
//
// The ring is fixed. A ring given a MemoryBudget also reserves an overflow
// store (virtual memory the kernel backs on first touch): when the ring is
// full, the producer starts an overflow episode and writes that record and
// every later one there, so order is kept, until the consumer has drained the
// whole store (and so the ring); the next record then goes to the ring again.
// The store's memory is taken from the budget a chunk (kOverflowChunkBytes)
// at a time, by the producer as it enters the chunk, and given back (pages
// and bytes) by the consumer once the chunk is drained. Without a budget, or
// with the budget used up, a record that finds no room is dropped and counted.
//
//   ring:      [tail ......... head)            head frozen during an episode
//   overflow:           [otail ..... ohead)     records of the current episode
//   drained:   ring up to the episode's start head, then the overflow records
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "native/event.h"

namespace rlscope {

// A process-wide byte budget (buffers.max_mb), shared by the rings'
// reservations and the overflow chunks. Any thread; lock-free.
class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes) {}
  // Takes `bytes` unless the total would pass the limit.
  bool TryTake(int64_t bytes);
  void Give(int64_t bytes);
  int64_t limit() const { return limit_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  // Overflow chunks: taken and given like the above, with their statistics.
  bool TryTakeOverflow(int64_t bytes);
  void GiveOverflow(int64_t bytes);
  void CountEpisode() { episodes_.fetch_add(1, std::memory_order_relaxed); }
  // Statistics (relaxed: read after the fact): overflow bytes taken now, the
  // most ever taken at once, and the overflow episodes started.
  int64_t overflow_bytes() const { return overflow_.load(std::memory_order_relaxed); }
  int64_t overflow_peak_bytes() const { return overflow_peak_.load(std::memory_order_relaxed); }
  uint64_t overflow_episodes() const { return episodes_.load(std::memory_order_relaxed); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> overflow_{0};
  std::atomic<int64_t> overflow_peak_{0};
  std::atomic<uint64_t> episodes_{0};
};

class ThreadBuffer {
 public:
  static constexpr size_t kOverflowChunkBytes = size_t{64} << 10;
  static constexpr uint64_t kChunkRecords = kOverflowChunkBytes / sizeof(EventRecord);
  // The most a thread's overflow store reserves (virtual memory).
  static constexpr size_t kMaxOverflowBytes = size_t{64} << 20;

  // `capacity` is rounded up to a power of two (minimum 16 records). With a
  // `budget` (which must outlive the ring), an overflow store of the largest
  // power of two of bytes within min(budget->limit(), kMaxOverflowBytes), two
  // chunks at least, is reserved; if that fails, the ring has none.
  ThreadBuffer(int64_t tid, size_t capacity, MemoryBudget* budget = nullptr);
  ~ThreadBuffer();  // gives back the overflow bytes still taken
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  int64_t tid() const { return tid_; }
  size_t capacity() const { return mask_ + 1; }
  // Records the overflow store holds; 0 without one.
  size_t overflow_capacity() const { return overflow_ != nullptr ? omask_ + 1 : 0; }

  // Producer only. Returns false (and counts a drop, unless `counted` is
  // false: the profiler's own records) when there is no room. An ordinary
  // record (privileged=false) leaves the last reserve() slots free, of the
  // ring and of the overflow's store and budget alike: they take only
  // privileged ones, the closes of recorded ranges and the step edges, so a
  // full buffer drops whole ranges and keeps step boundaries.
  inline __attribute__((always_inline)) bool TryPush(const EventRecord& record, bool privileged = true,
                                                     bool counted = true) {
    const uint64_t limit = privileged ? mask_ : mask_ - reserve_;
    const uint64_t head = head_.load(std::memory_order_relaxed);  // own index
    // Full by the producer's last view of tail_; always, during an overflow
    // episode (cached_tail_ is set so): the rest is out of line.
    if (__builtin_expect(head - cached_tail_ > limit, 0)) {
      const auto w = std::bit_cast<std::array<uint64_t, 4>>(record);
      const bool pushed = PushSlow(w[0], w[1], w[2], w[3], (privileged ? kPrivileged : 0) | (counted ? kCounted : 0));
      UpdateFastEnd();
      return pushed;
    }
    WriteRing(head, record, counted);
    UpdateFastEnd();
    return true;
  }
  // Producer only: TryPush's common case alone, for the handlers' fast
  // lanes (collector.h). False, with nothing done, where a push needs more:
  // the ring full by the producer's last view of tail_, an overflow episode,
  // or the push that reaches a half mark (its caller wakes the consumer).
  // One comparison: fast_end_ holds where these stop (UpdateFastEnd). The
  // record comes as its four words (std::bit_cast<EventRecord> of them),
  // stored as such.
  inline __attribute__((always_inline)) bool TryPushFast(const std::array<uint64_t, 4>& words, bool privileged) {
    const uint64_t head = head_.load(std::memory_order_relaxed);  // own index
    if (head >= fast_end_[privileged ? 1 : 0]) return false;
    // Word by word: one store each (a whole-record copy is built on the
    // stack first).
    char* slot = reinterpret_cast<char*>(&slots_[head & mask_]);
    std::memcpy(slot, &words[0], 8);
    std::memcpy(slot + 8, &words[1], 8);
    std::memcpy(slot + 16, &words[2], 8);
    std::memcpy(slot + 24, &words[3], 8);
    // Release publishes the slot contents to the consumer.
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
  // Producer only: records pushed so far, and the last one pushed (valid
  // when pushed() > 0).
  uint64_t pushed() const {
    return head_.load(std::memory_order_relaxed) + overflow_pushed_.load(std::memory_order_relaxed);
  }
  const EventRecord& last() const {
    // The consumer gives drained overflow chunks back (zeroing them): an
    // overflow record is read from the producer's copy.
    return in_overflow_ ? last_overflow_ : slots_[(head_.load(std::memory_order_relaxed) - 1) & mask_];
  }
  // Slots only privileged records may take: an eighth of the ring, at most 256.
  size_t reserve() const { return static_cast<size_t>(reserve_); }
  // Producer only, after a successful TryPush: true once per half ring of
  // records, and once per overflow chunk during an episode (head_ is frozen
  // then; half_mask_ says when), the moment for the caller to wake the
  // consumer early (a dense burst fills the ring faster than the flush
  // interval empties it).
  bool AtHalfMark() const { return (head_.load(std::memory_order_relaxed) & half_mask_) == 0; }

  // Consumer only. Calls fn(const EventRecord*, size_t n) for up to four
  // contiguous runs of the records present now, in push order (the ring's,
  // then the overflow's), and frees them. Returns the number drained.
  template <typename Fn>
  size_t Drain(Fn&& fn, size_t max_records = SIZE_MAX) {
    size_t n = DrainRing(fn, max_records);
    if (overflow_ != nullptr) n += DrainOverflow(fn, max_records - n);
    return n;
  }

  // Consumer only, and only for a ring without an overflow store (the CPU
  // sampler's). Calls fn(EventRecord&) on each of the first `n` records
  // present (n <= size()), in order, without freeing them: the consumer owns
  // the slots between its index and the producer's, so it may rewrite them
  // before Drain (the CPU sampler resolves addresses to names there).
  template <typename Fn>
  void VisitPending(size_t n, Fn&& fn) {
    assert(overflow_ == nullptr);
    const uint64_t tail = tail_.load(std::memory_order_relaxed);  // own index
    // Acquire: the producer's writes to these slots are visible.
    const uint64_t head = head_.load(std::memory_order_acquire);
    if (n > head - tail) n = static_cast<size_t>(head - tail);
    for (size_t i = 0; i < n; ++i) fn(slots_[(tail + i) & mask_]);
  }

  // Records currently buffered, overflow included (approximate when racing
  // with the producer; on the consumer, a Drain of that many drains that many).
  size_t size() const {
    const uint64_t ring = head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_acquire);
    return static_cast<size_t>(ring + (overflow_ != nullptr ? OverflowPending() : 0));
  }
  // Records accepted since creation, less the uncounted ones (the
  // profiler's own: cost samples). What the process recorded.
  uint64_t written() const {
    const uint64_t pushed = head_.load(std::memory_order_acquire) + overflow_pushed_.load(std::memory_order_relaxed);
    return pushed - std::min(pushed, uncounted_.load(std::memory_order_relaxed));
  }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  // Producer: the record into ring slot `head`, published.
  inline __attribute__((always_inline)) void WriteRing(uint64_t head, const EventRecord& record, bool counted) {
    slots_[head & mask_] = record;
    // Relaxed: a statistic (written()), like dropped_.
    if (!counted) uncounted_.store(uncounted_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Release publishes the slot contents to the consumer.
    head_.store(head + 1, std::memory_order_release);
  }
  // Producer, after each TryPush: the heads TryPushFast stops at, ordinary
  // and privileged: the first that would reach a half mark, or pass the
  // room the producer's last view of tail_ leaves; 0 during an episode.
  // Conservative between updates: tail_ only moves on (more room), and
  // the half mark is reached through TryPush, which updates them again.
  inline __attribute__((always_inline)) void UpdateFastEnd() {
    if (in_overflow_) {
      fast_end_[0] = fast_end_[1] = 0;
      return;
    }
    const uint64_t head = head_.load(std::memory_order_relaxed);  // own index
    // The smallest h >= head with (h + 1) & half_mask_ == 0.
    const uint64_t half = ((head + 1 + half_mask_) & ~half_mask_) - 1;
    fast_end_[0] = std::min(half, cached_tail_ + (mask_ - reserve_) + 1);
    fast_end_[1] = std::min(half, cached_tail_ + mask_ + 1);
  }
  // Producer, out of line: everything after the fast path's full check.
  // The record comes as four words, in registers: by reference (or by value,
  // on the stack) every caller would build it in memory first, or set up a
  // frame for it, fast path included.
  static constexpr unsigned kPrivileged = 1, kCounted = 2;
  __attribute__((noinline)) bool PushSlow(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3, unsigned mode);
  bool LeaveOverflow();
  using Words = std::array<uint64_t, 4>;  // a record, as PushSlow takes it
  bool PushOverflow(const Words& record, bool privileged, bool counted, uint64_t head);
  bool OverflowRoom(uint64_t need);
  bool Drop(bool counted);
  // Consumer: publishes otail (gives back the chunks drained first).
  void SettleOverflow(uint64_t otail);
  uint64_t OverflowPending() const;

  // Calls fn on the n records of `base` (a power-of-two ring) from index
  // `from`: one run, or two where the ring's end falls inside.
  template <typename Fn>
  static void Runs(const EventRecord* base, uint64_t mask, uint64_t from, size_t n, Fn& fn) {
    const size_t begin = static_cast<size_t>(from & mask);
    const size_t room = static_cast<size_t>(mask + 1) - begin;
    const size_t first = n < room ? n : room;
    fn(&base[begin], first);
    if (first < n) fn(&base[0], n - first);
  }
  template <typename Fn>
  size_t DrainRing(Fn& fn, size_t max_records) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);  // own index
    uint64_t head = head_.load(std::memory_order_acquire);        // see published slots
    if (head - tail > max_records) head = tail + max_records;
    const size_t n = static_cast<size_t>(head - tail);
    if (n == 0) return 0;
    Runs(slots_.get(), mask_, tail, n, fn);
    // Release: our reads of the slots happen before the producer reuses them.
    tail_.store(head, std::memory_order_release);
    return n;
  }
  // The current episode's records, once the ring is drained up to its start.
  // Episodes start at strictly increasing heads, and a new one starts only
  // after the consumer drained the last one: so the records below ohead_
  // belong to the episode whose start is read after it.
  template <typename Fn>
  size_t DrainOverflow(Fn& fn, size_t max_records) {
    // Acquire: the records below ohead are written, and so are the episode's
    // start fields (stored before its first record), read relaxed below.
    const uint64_t ohead = ohead_.load(std::memory_order_acquire);
    uint64_t otail = otail_.load(std::memory_order_relaxed);  // own index
    const uint64_t ostart = episode_ostart_.load(std::memory_order_relaxed);
    size_t n = 0;
    if (ohead > ostart && episode_start_.load(std::memory_order_relaxed) == tail_.load(std::memory_order_relaxed)) {
      otail = std::max(otail, ostart);  // an episode starts on a chunk of its own
      if (ohead > otail) n = static_cast<size_t>(std::min<uint64_t>(ohead - otail, max_records));
      if (n > 0) Runs(overflow_, omask_, otail, n, fn);
      otail += n;
    }
    SettleOverflow(otail);
    return n;
  }

  const int64_t tid_;
  const uint64_t mask_;
  const uint64_t reserve_;
  // 64-byte aligned (no record straddles a cache line) and touched at
  // construction, so the first lap pays no page faults on the hot path.
  struct AlignedFree {
    void operator()(EventRecord* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<EventRecord[], AlignedFree> slots_;
  EventRecord* overflow_ = nullptr;  // the overflow store (mmap'ed), or null
  uint64_t omask_ = 0;               // its records - 1
  MemoryBudget* budget_ = nullptr;   // set with overflow_

  // Producer's. During an episode cached_tail_ is head_ - mask_ - 1, so the
  // fast path's check fails.
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the producer
  uint64_t cached_tail_ = 0;                   // producer's view of tail_
  uint64_t half_mask_;                         // AtHalfMark's: mask_ / 2 outside episodes
  uint64_t fast_end_[2] = {0, 0};              // TryPushFast's stops (UpdateFastEnd): ordinary, privileged
  std::atomic<uint64_t> dropped_{0};           // written by the producer
  std::atomic<uint64_t> uncounted_{0};         // written by the producer: accepted with counted=false
  bool in_overflow_ = false;                   // in an episode
  uint64_t cached_otail_ = 0;                  // producer's view of otail_
  uint64_t otaken_ = 0;                        // overflow chunks below this index are taken from the budget
  std::atomic<uint64_t> overflow_pushed_{0};   // records written to the store (a statistic)
  EventRecord last_overflow_{};                // the last of them
  // Published by the producer: the next overflow index (release: the records
  // below it are written), and the current or last episode's start: its
  // ring head and first overflow index (stored before its first record).
  alignas(64) std::atomic<uint64_t> ohead_{0};
  std::atomic<uint64_t> episode_start_{0};
  std::atomic<uint64_t> episode_ostart_{0};
  std::atomic<bool> overflow_active_{false};  // in an episode (release at its end: all of it drained)

  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the consumer
  std::atomic<uint64_t> otail_{0};             // written by the consumer: overflow drained below it
  uint64_t ogiven_ = 0;                        // consumer's: chunks below it given back
};

}  // namespace rlscope

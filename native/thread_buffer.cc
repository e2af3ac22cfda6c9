#include "native/thread_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace rlscope {
namespace {
uint64_t RoundUpPow2(size_t n) {
  uint64_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

// The overflow store's bytes for a budget: a power of two, two chunks at least.
size_t OverflowBytes(const MemoryBudget& budget) {
  const int64_t want = std::min<int64_t>(budget.limit(), static_cast<int64_t>(ThreadBuffer::kMaxOverflowBytes));
  size_t bytes = 2 * ThreadBuffer::kOverflowChunkBytes;
  while (static_cast<int64_t>(bytes * 2) <= want) bytes *= 2;
  return bytes;
}

// A record's words into `slot`, a word at a time from registers (whole-record
// copies of words just stored would wait on store forwarding).
void Put(EventRecord* slot, const std::array<uint64_t, 4>& words) {
  const uint64_t w0 = words[0], w1 = words[1], w2 = words[2], w3 = words[3];
  char* p = reinterpret_cast<char*>(slot);
  std::memcpy(p, &w0, 8);
  std::memcpy(p + 8, &w1, 8);
  std::memcpy(p + 16, &w2, 8);
  std::memcpy(p + 24, &w3, 8);
}

uint64_t RoundUpToChunk(uint64_t index) {
  return (index + ThreadBuffer::kChunkRecords - 1) & ~(ThreadBuffer::kChunkRecords - 1);
}
}  // namespace

// Relaxed throughout: the budget orders nothing but itself (each
// read-modify-write sees every earlier one).
bool MemoryBudget::TryTake(int64_t bytes) {
  int64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > limit_) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

void MemoryBudget::Give(int64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

bool MemoryBudget::TryTakeOverflow(int64_t bytes) {
  if (!TryTake(bytes)) return false;
  const int64_t now = overflow_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = overflow_peak_.load(std::memory_order_relaxed);
  while (now > peak && !overflow_peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return true;
}

void MemoryBudget::GiveOverflow(int64_t bytes) {
  overflow_.fetch_sub(bytes, std::memory_order_relaxed);
  Give(bytes);
}

ThreadBuffer::ThreadBuffer(int64_t tid, size_t capacity, MemoryBudget* budget)
    : tid_(tid),
      mask_(RoundUpPow2(capacity) - 1),
      reserve_(std::min<uint64_t>((mask_ + 1) / 8, 256)),
      slots_(static_cast<EventRecord*>(::operator new[]((mask_ + 1) * sizeof(EventRecord), std::align_val_t{64}))),
      half_mask_(mask_ >> 1) {
  std::memset(static_cast<void*>(slots_.get()), 0, (mask_ + 1) * sizeof(EventRecord));
  UpdateFastEnd();
  if (budget == nullptr) return;
  // Reserved, not committed: pages are backed on first touch and handed back
  // with MADV_DONTNEED; the budget, not the kernel, bounds what is used.
  const size_t bytes = OverflowBytes(*budget);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;  // no overflow: a full ring drops
  overflow_ = static_cast<EventRecord*>(p);
  omask_ = bytes / sizeof(EventRecord) - 1;
  budget_ = budget;
}

ThreadBuffer::~ThreadBuffer() {
  if (overflow_ == nullptr) return;
  munmap(overflow_, (omask_ + 1) * sizeof(EventRecord));
  // Both sides are done: what the producer took and the consumer did not give.
  if (otaken_ > ogiven_) budget_->GiveOverflow(static_cast<int64_t>((otaken_ - ogiven_) * sizeof(EventRecord)));
}

inline bool ThreadBuffer::Drop(bool counted) {
  // Relaxed: a statistic, read by the consumer after the fact.
  if (counted) dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return false;
}

// Producer, during an episode: ends it once the consumer drained every
// overflow record. It drains those only after the ring up to the episode's
// start (head_, frozen since): the ring is then empty too.
// Inlined into PushSlow, like the two below: the record stays in registers.
inline __attribute__((always_inline)) bool ThreadBuffer::LeaveOverflow() {
  const uint64_t ohead = ohead_.load(std::memory_order_relaxed);  // own index
  // Acquire pairs with the consumer's release of otail_, stored after its
  // release of tail_: the caller's load of tail_ sees the ring drained.
  if (otail_.load(std::memory_order_acquire) != ohead) return false;
  in_overflow_ = false;
  half_mask_ = mask_ >> 1;
  // The next episode starts on a fresh chunk: chunks taken ahead (no record
  // in them, no page touched) go back now; the last one written to is the
  // consumer's to give back.
  const uint64_t end = RoundUpToChunk(ohead);
  if (otaken_ > end) {
    budget_->GiveOverflow(static_cast<int64_t>((otaken_ - end) * sizeof(EventRecord)));
    otaken_ = end;
  }
  // Release: a consumer that sees the episode over sees it fully drained.
  overflow_active_.store(false, std::memory_order_release);
  return true;
}

// Producer: whether overflow index `need` may be written: its chunk's last
// lap was drained and given back, and the budget covers it.
inline __attribute__((always_inline)) bool ThreadBuffer::OverflowRoom(uint64_t need) {
  const uint64_t end = (need | (kChunkRecords - 1)) + 1;  // the end of need's chunk
  if (end - cached_otail_ > omask_ + 1) {
    // Acquire pairs with the consumer's release of otail_, after it gave
    // back (madvise) the chunks below.
    cached_otail_ = otail_.load(std::memory_order_acquire);
    if (end - cached_otail_ > omask_ + 1) return false;
  }
  while (need >= otaken_) {  // one atomic per chunk
    if (!budget_->TryTakeOverflow(static_cast<int64_t>(kOverflowChunkBytes))) return false;
    otaken_ += kChunkRecords;
  }
  return true;
}

// Producer: the record into the overflow store, starting an episode if none
// runs. A record that finds no room is dropped; if it would have started the
// episode, none starts (the ring's reserve stays for privileged records).
inline __attribute__((always_inline)) bool ThreadBuffer::PushOverflow(const Words& record, bool privileged,
                                                                      bool counted, uint64_t head) {
  const bool starting = !in_overflow_;
  uint64_t index = ohead_.load(std::memory_order_relaxed);  // own index
  // An episode starts on a chunk of its own, so that the consumer may give
  // the last episode's last chunk back once it is drained.
  if (starting) index = RoundUpToChunk(index);
  if (!OverflowRoom(index + (privileged ? 0 : reserve_))) return Drop(counted);
  Put(&overflow_[index & omask_], record);
  Put(&last_overflow_, record);
  // Relaxed: statistics (written()).
  if (!counted) uncounted_.store(uncounted_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  overflow_pushed_.store(overflow_pushed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (starting) {
    in_overflow_ = true;
    cached_tail_ = head - mask_ - 1;  // the fast path's check fails from now on
    // Relaxed: published by the release of ohead_ below.
    episode_start_.store(head, std::memory_order_relaxed);
    episode_ostart_.store(index, std::memory_order_relaxed);
    overflow_active_.store(true, std::memory_order_relaxed);
    budget_->CountEpisode();
  }
  // AtHalfMark with head_ frozen (and never 0 here: the ring was full):
  // true at each chunk's first record, else false.
  half_mask_ = (index & (kChunkRecords - 1)) == 0 ? 0 : head & (~head + 1);
  // Release publishes the record (and an episode's start) to the consumer.
  ohead_.store(index + 1, std::memory_order_release);
  return true;
}

bool ThreadBuffer::PushSlow(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3, unsigned mode) {
  const Words record{w0, w1, w2, w3};
  const bool privileged = (mode & kPrivileged) != 0, counted = (mode & kCounted) != 0;
  const uint64_t limit = privileged ? mask_ : mask_ - reserve_;
  const uint64_t head = head_.load(std::memory_order_relaxed);  // own index
  if (in_overflow_ && !LeaveOverflow()) return PushOverflow(record, privileged, counted, head);
  // Acquire pairs with the consumer's release in Drain(): the slots it
  // freed are no longer being read.
  cached_tail_ = tail_.load(std::memory_order_acquire);
  if (head - cached_tail_ <= limit) {
    WriteRing(head, std::bit_cast<EventRecord>(record), counted);  // once a lap, or leaving an episode
    return true;
  }
  if (overflow_ != nullptr) return PushOverflow(record, privileged, counted, head);
  return Drop(counted);
}

uint64_t ThreadBuffer::OverflowPending() const {
  // Acquire: as in DrainOverflow; records below the episode's first index
  // are none (the chunk it skipped).
  const uint64_t ohead = ohead_.load(std::memory_order_acquire);
  const uint64_t from =
      std::max(otail_.load(std::memory_order_acquire), episode_ostart_.load(std::memory_order_relaxed));
  return ohead > from ? ohead - from : 0;
}

void ThreadBuffer::SettleOverflow(uint64_t otail) {
  // Acquire pairs with LeaveOverflow's release: the episode is over and was
  // drained, so otail is its end, and the producer starts the next one past
  // this chunk: the chunk is done.
  if (!overflow_active_.load(std::memory_order_acquire)) otail = RoundUpToChunk(otail);
  const uint64_t done = otail & ~(kChunkRecords - 1);
  // One madvise per contiguous run (two where the store's end falls inside):
  // each costs the producer's core a TLB shootdown.
  while (ogiven_ < done) {
    const uint64_t begin = ogiven_ & omask_;
    const uint64_t n = std::min(done - ogiven_, omask_ + 1 - begin);
    madvise(&overflow_[begin], n * sizeof(EventRecord), MADV_DONTNEED);
    budget_->GiveOverflow(static_cast<int64_t>(n * sizeof(EventRecord)));
    ogiven_ += n;
  }
  // Release: our reads of the records, and the chunks' release, happen
  // before the producer reuses them.
  if (otail != otail_.load(std::memory_order_relaxed)) otail_.store(otail, std::memory_order_release);
}

}  // namespace rlscope

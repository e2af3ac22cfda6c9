// Tests for ThreadBuffer's overflow (native/thread_buffer.h): a full ring
// overflows into the thread's reserved store, by chunks taken from a
// MemoryBudget, instead of dropping; order is kept, the memory goes back once
// drained, and with the budget used up records drop as a full ring's do.
// Part of native_test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "native/event.h"
#include "native/thread_buffer.h"

namespace rlscope {
namespace {

constexpr uint64_t kChunk = ThreadBuffer::kChunkRecords;
constexpr int64_t kChunkBytes = static_cast<int64_t>(ThreadBuffer::kOverflowChunkBytes);

// Record `value`, stamped value * 10 (a torn record shows).
EventRecord Numbered(uint64_t value) {
  EventRecord r{};
  r.ts = value * 10;
  r.value = value;
  return r;
}

std::vector<uint64_t> Drained(ThreadBuffer& buf, size_t max_records = SIZE_MAX) {
  std::vector<uint64_t> out;
  buf.Drain(
      [&](const EventRecord* r, size_t n) {
        for (size_t i = 0; i < n; ++i) out.push_back(r[i].value);
      },
      max_records);
  return out;
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// Pushes values [from, to); returns how many were accepted.
uint64_t PushRange(ThreadBuffer& buf, uint64_t from, uint64_t to, bool privileged = true) {
  uint64_t accepted = 0;
  for (uint64_t i = from; i < to; ++i) accepted += buf.TryPush(Numbered(i), privileged) ? 1 : 0;
  return accepted;
}

TEST(ThreadBufferOverflowTest, AFullRingOverflowsInOrderWithoutDropping) {
  MemoryBudget budget(1 << 20);
  ThreadBuffer buf(1, 16, &budget);
  ASSERT_EQ(buf.overflow_capacity(), size_t{1 << 20} / sizeof(EventRecord));
  const uint64_t n = 16 + 3 * kChunk + 5;  // the ring, then into a fourth chunk
  ASSERT_EQ(PushRange(buf, 0, n), n);
  EXPECT_EQ(buf.dropped(), 0u);
  EXPECT_EQ(buf.size(), n);
  EXPECT_EQ(buf.written(), n);
  EXPECT_EQ(buf.pushed(), n);
  EXPECT_EQ(buf.last().value, n - 1);
  EXPECT_EQ(budget.overflow_episodes(), 1u);
  EXPECT_EQ(budget.used(), 4 * kChunkBytes);
  EXPECT_EQ(Drained(buf), Range(0, n));
  EXPECT_EQ(buf.size(), 0u);
}

TEST(ThreadBufferOverflowTest, WithoutABudgetAFullRingDrops) {
  ThreadBuffer buf(1, 16);
  EXPECT_EQ(buf.overflow_capacity(), 0u);
  EXPECT_EQ(PushRange(buf, 0, 20), 16u);
  EXPECT_EQ(buf.dropped(), 4u);
}

// Max_records spans the ring and the overflow; what stays waits its turn.
TEST(ThreadBufferOverflowTest, DrainHonoursMaxRecordsAcrossRingAndOverflow) {
  MemoryBudget budget(1 << 20);
  ThreadBuffer buf(1, 16, &budget);
  ASSERT_EQ(PushRange(buf, 0, 40), 40u);
  EXPECT_EQ(Drained(buf, 10), Range(0, 10));
  EXPECT_EQ(buf.size(), 30u);
  EXPECT_EQ(Drained(buf, 10), Range(10, 20));  // 6 of the ring, 4 of the overflow
  ASSERT_EQ(PushRange(buf, 40, 50), 10u);      // still overflowing: behind 20..39
  EXPECT_EQ(buf.size(), 30u);
  EXPECT_EQ(Drained(buf), Range(20, 50));
}

// Once the consumer drained it all, the producer's next record goes to the
// ring; the next full ring starts a second episode, drained after the ring
// records before it.
TEST(ThreadBufferOverflowTest, LeavesOverflowOnceDrainedAndASecondEpisodeKeepsOrder) {
  MemoryBudget budget(1 << 20);
  ThreadBuffer buf(1, 16, &budget);
  ASSERT_EQ(PushRange(buf, 0, 20), 20u);
  EXPECT_EQ(Drained(buf), Range(0, 20));
  ASSERT_EQ(PushRange(buf, 20, 36), 16u);  // the ring again: exactly full, no episode
  EXPECT_EQ(budget.overflow_episodes(), 1u);
  EXPECT_EQ(Drained(buf, 5), Range(20, 25));
  ASSERT_EQ(PushRange(buf, 36, 50), 14u);  // 5 fit in the ring, 9 overflow
  EXPECT_EQ(budget.overflow_episodes(), 2u);
  EXPECT_EQ(buf.size(), 25u);
  EXPECT_EQ(buf.last().value, 49u);
  EXPECT_EQ(Drained(buf), Range(25, 50));
  EXPECT_EQ(buf.written(), 50u);
  EXPECT_EQ(buf.dropped(), 0u);
}

TEST(ThreadBufferOverflowTest, MemoryGoesBackToTheBudgetOnceDrained) {
  MemoryBudget budget(1 << 20);
  {
    ThreadBuffer buf(1, 16, &budget);
    ASSERT_EQ(PushRange(buf, 0, 16 + 2 * kChunk + 1), 16 + 2 * kChunk + 1);
    EXPECT_EQ(budget.used(), 3 * kChunkBytes);
    EXPECT_EQ(budget.overflow_bytes(), 3 * kChunkBytes);
    // Drained chunks go back at once; the last, partial one once the producer
    // left the episode (its next record goes to the ring).
    EXPECT_EQ(Drained(buf, 16 + kChunk + 1).size(), 16 + kChunk + 1);
    EXPECT_EQ(budget.used(), 2 * kChunkBytes);
    EXPECT_EQ(Drained(buf).size(), kChunk);
    EXPECT_EQ(budget.used(), kChunkBytes);
    ASSERT_TRUE(buf.TryPush(Numbered(7)));
    EXPECT_EQ(Drained(buf), std::vector<uint64_t>{7});
    EXPECT_EQ(budget.used(), 0);
    EXPECT_EQ(budget.overflow_peak_bytes(), 3 * kChunkBytes);
    // A second episode starts on a fresh chunk and gives it back too.
    ASSERT_EQ(PushRange(buf, 100, 120), 20u);
    EXPECT_EQ(budget.used(), kChunkBytes);
    EXPECT_EQ(Drained(buf), Range(100, 120));
    ASSERT_TRUE(buf.TryPush(Numbered(8)));
    EXPECT_EQ(Drained(buf), std::vector<uint64_t>{8});
    EXPECT_EQ(budget.used(), 0);
    // A ring destroyed mid-episode gives back what it holds.
    ASSERT_EQ(PushRange(buf, 200, 240), 40u);
    EXPECT_EQ(budget.used(), kChunkBytes);
  }
  EXPECT_EQ(budget.used(), 0);
  EXPECT_EQ(budget.overflow_episodes(), 3u);
}

// Budget used up: ordinary records drop and leave reserve() records of room
// to privileged ones, as a full ring without overflow does.
TEST(ThreadBufferOverflowTest, AnExhaustedBudgetDropsCountedAndKeepsTheReserve) {
  MemoryBudget budget(2 * kChunkBytes);  // two chunks: 2 * kChunk records
  ThreadBuffer buf(1, 64, &budget);
  ASSERT_EQ(buf.reserve(), 8u);
  const uint64_t ordinary = 56 + 2 * kChunk - 8;  // the ring's and the overflow's share
  EXPECT_EQ(PushRange(buf, 0, ordinary + 100, /*privileged=*/false), ordinary);
  EXPECT_EQ(buf.dropped(), 100u);
  EXPECT_EQ(PushRange(buf, 10000, 10008), 8u);  // the closes and step edges fit
  EXPECT_FALSE(buf.TryPush(Numbered(20000)));   // now it is full
  EXPECT_EQ(buf.dropped(), 101u);
  std::vector<uint64_t> expected = Range(0, ordinary);
  for (uint64_t v : Range(10000, 10008)) expected.push_back(v);
  EXPECT_EQ(Drained(buf), expected);
  EXPECT_EQ(buf.written(), ordinary + 8);
}

// With no budget left for a first chunk, no episode starts: the ring keeps
// its reserve for privileged records, exactly as without overflow.
TEST(ThreadBufferOverflowTest, NoBudgetForAFirstChunkBehavesAsAFullRing) {
  MemoryBudget budget(2 * kChunkBytes);
  ASSERT_TRUE(budget.TryTake(2 * kChunkBytes));  // the rings took it all
  ThreadBuffer buf(1, 64, &budget);
  EXPECT_EQ(PushRange(buf, 0, 100, /*privileged=*/false), 56u);
  EXPECT_EQ(PushRange(buf, 100, 108), 8u);
  EXPECT_FALSE(buf.TryPush(Numbered(200)));
  EXPECT_EQ(buf.dropped(), 45u);
  EXPECT_EQ(budget.overflow_episodes(), 0u);
  std::vector<uint64_t> expected = Range(0, 56);
  for (uint64_t v : Range(100, 108)) expected.push_back(v);
  EXPECT_EQ(Drained(buf), expected);
}

// The consumer is woken once per half ring, and once per overflow chunk
// during an episode (head_ is frozen then: never at every record).
TEST(ThreadBufferOverflowTest, TheHalfMarkComesOncePerOverflowChunk) {
  MemoryBudget budget(1 << 20);
  ThreadBuffer buf(1, 16, &budget);
  std::vector<uint64_t> marks;
  for (uint64_t i = 1; i <= 16 + 2 * kChunk + 10; ++i) {
    ASSERT_TRUE(buf.TryPush(Numbered(i)));
    if (buf.AtHalfMark()) marks.push_back(i);
  }
  EXPECT_EQ(marks, (std::vector<uint64_t>{8, 16, 17, 17 + kChunk, 17 + 2 * kChunk}));
  Drained(buf);
  ASSERT_TRUE(buf.TryPush(Numbered(0)));  // the ring again: its own marks
  EXPECT_FALSE(buf.AtHalfMark());
}

// Uncounted records (cost samples) overflow too, and stay out of written().
TEST(ThreadBufferOverflowTest, UncountedRecordsOverflowAndAreNotWritten) {
  MemoryBudget budget(1 << 20);
  ThreadBuffer buf(1, 16, &budget);
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE(buf.TryPush(Numbered(i), true, /*counted=*/i % 3 != 0));
  EXPECT_EQ(buf.written(), 20u);
  EXPECT_EQ(buf.pushed(), 30u);
  EXPECT_EQ(Drained(buf), Range(0, 30));
}

// A producer far ahead of a consumer that pauses: every record arrives once,
// in order, nothing dropped. The store (1 MiB budget) is small, so it wraps
// many times; the test keeps the producer within half of it (its own flow
// control, so no drop is possible whatever the timing), and every few drains
// the consumer waits until the producer is two rings ahead, so episodes start
// and end all along.
TEST(ThreadBufferOverflowTest, ConcurrentSlowConsumerGetsEverythingInOrder) {
  constexpr uint64_t kProduced = 2000000;
  MemoryBudget budget(1 << 20);
  auto buf = std::make_unique<ThreadBuffer>(7, 1024, &budget);
  const uint64_t bound = buf->overflow_capacity() / 2;
  std::atomic<uint64_t> pushed{0}, consumed{0};
  std::thread producer([&] {
    for (uint64_t i = 0; i < kProduced; ++i) {
      while (i - consumed.load(std::memory_order_acquire) >= bound) std::this_thread::yield();
      buf->TryPush(Numbered(i), /*privileged=*/i % 2 == 1);
      pushed.store(i + 1, std::memory_order_release);
    }
  });
  uint64_t next = 0;
  bool in_order = true, intact = true;
  auto consume = [&](const EventRecord* r, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      in_order = in_order && r[i].value == next;
      intact = intact && r[i].ts == r[i].value * 10;
      next = r[i].value + 1;
    }
  };
  for (uint64_t round = 0; consumed.load() < kProduced; ++round) {
    if (round % 8 == 0) {  // a pause: the producer gets two rings ahead
      const uint64_t until = std::min(kProduced, consumed.load() + 2048);
      while (pushed.load(std::memory_order_acquire) < until) std::this_thread::yield();
    }
    const size_t n = buf->Drain(consume, round % 3 == 0 ? 1500 : SIZE_MAX);
    consumed.store(consumed.load() + n, std::memory_order_release);
  }
  producer.join();
  EXPECT_TRUE(in_order);
  EXPECT_TRUE(intact);
  EXPECT_EQ(next, kProduced);
  EXPECT_EQ(buf->dropped(), 0u);
  EXPECT_EQ(buf->written(), kProduced);
  EXPECT_EQ(buf->size(), 0u);
  EXPECT_GE(budget.overflow_episodes(), 1u);
  buf.reset();
  EXPECT_EQ(budget.used(), 0);
}

}  // namespace
}  // namespace rlscope

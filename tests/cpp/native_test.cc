// Tests for rlscope_native: the record layout, the SPSC ring, string
// interning, the tick converter, wire format v1 and the configuration schema.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <msgpack.hpp>

#include "native/clock.h"
#include "native/config.h"
#include "native/event.h"
#include "native/steps.h"
#include "native/string_table.h"
#include "native/thread_buffer.h"
#include "native/probe_packet.h"
#include "native/wire.h"

namespace rlscope {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- event.h

TEST(EventRecordTest, IsThirtyTwoBytes) {
  EXPECT_EQ(sizeof(EventRecord), 32u);
  EXPECT_TRUE(std::is_trivially_copyable_v<EventRecord>);
}

// -------------------------------------------------------- thread_buffer.h

EventRecord Record(uint64_t value) {
  EventRecord r{};
  r.ts = value * 10;
  r.value = value;
  r.kind = static_cast<uint8_t>(EventKind::kMark);
  return r;
}

// Drains everything; returns the values and the size of each run.
std::vector<uint64_t> DrainValues(ThreadBuffer& buf, std::vector<size_t>* runs = nullptr,
                                  size_t max_records = SIZE_MAX) {
  std::vector<uint64_t> out;
  buf.Drain(
      [&](const EventRecord* r, size_t n) {
        if (runs != nullptr) runs->push_back(n);
        for (size_t i = 0; i < n; ++i) out.push_back(r[i].value);
      },
      max_records);
  return out;
}

TEST(ThreadBufferTest, CapacityRoundsUpToPowerOfTwoWithMinimum16) {
  EXPECT_EQ(ThreadBuffer(1, 0).capacity(), 16u);
  EXPECT_EQ(ThreadBuffer(1, 1).capacity(), 16u);
  EXPECT_EQ(ThreadBuffer(1, 16).capacity(), 16u);
  EXPECT_EQ(ThreadBuffer(1, 17).capacity(), 32u);
  EXPECT_EQ(ThreadBuffer(1, 1000).capacity(), 1024u);
  EXPECT_EQ(ThreadBuffer(1, 1024).capacity(), 1024u);
  EXPECT_EQ(ThreadBuffer(42, 16).tid(), 42);
}

TEST(ThreadBufferTest, TheHalfMarkComesOncePerHalfRingWhateverTheDraining) {
  ThreadBuffer b(1, 16);
  std::vector<int> marks;
  for (int i = 1; i <= 40; ++i) {
    ASSERT_TRUE(b.TryPush(EventRecord{}));
    if (b.AtHalfMark()) marks.push_back(i);
    if (i % 5 == 0) b.Drain([](const EventRecord*, size_t) {});
  }
  EXPECT_EQ(marks, (std::vector<int>{8, 16, 24, 32, 40}));
}

// The handlers' fast push (TryPushFast) beside TryPush, as the hot path
// mixes them: the fast one never makes the push that reaches a half mark,
// so the caller of TryPush still sees each one (and wakes the consumer).
TEST(ThreadBufferTest, FastPushesLeaveEachHalfMarkToTryPush) {
  ThreadBuffer b(1, 16);
  std::vector<int> marks;
  int fast = 0;
  for (int i = 1; i <= 40; ++i) {
    if (b.TryPushFast(std::bit_cast<std::array<uint64_t, 4>>(Record(i)), false)) {
      ++fast;
      EXPECT_FALSE(b.AtHalfMark()) << i;
    } else {
      ASSERT_TRUE(b.TryPush(Record(i), false));
      if (b.AtHalfMark()) marks.push_back(i);
    }
    if (i % 5 == 0) b.Drain([](const EventRecord*, size_t) {});
  }
  EXPECT_EQ(marks, (std::vector<int>{8, 16, 24, 32, 40}));
  EXPECT_GT(fast, 20);  // the common case goes the fast way
}

// Neither push ever writes over a slot the consumer has not drained, with or
// without an overflow store, ordinary and privileged records mixed: what
// comes out is exactly what was accepted, in order, and the rest counted.
TEST(ThreadBufferTest, FastAndFullPushesMixedLoseNothingUncountedAndKeepOrder) {
  for (const bool with_overflow : {false, true}) {
    MemoryBudget budget(1 << 20);
    ThreadBuffer b(1, 16, with_overflow ? &budget : nullptr);
    std::mt19937 rng(7);
    std::vector<uint64_t> accepted, drained;
    int fast = 0;
    constexpr uint64_t kPushes = 20000;
    for (uint64_t i = 0; i < kPushes; ++i) {
      const bool privileged = rng() % 4 == 0;
      if (b.TryPushFast(std::bit_cast<std::array<uint64_t, 4>>(Record(i)), privileged)) {
        ++fast;
        accepted.push_back(i);
      } else if (b.TryPush(Record(i), privileged)) {
        accepted.push_back(i);
      }
      if (rng() % 23 == 0) {
        for (uint64_t v : DrainValues(b)) drained.push_back(v);
      }
    }
    for (uint64_t v : DrainValues(b)) drained.push_back(v);
    EXPECT_EQ(drained, accepted) << "overflow " << with_overflow;
    EXPECT_EQ(b.written(), accepted.size());
    EXPECT_EQ(b.dropped(), kPushes - accepted.size());
    EXPECT_GT(fast, 0);
    if (with_overflow) {
      EXPECT_EQ(b.dropped(), 0u);  // the store takes what the ring cannot
    }
  }
}

TEST(ThreadBufferTest, DrainReturnsRecordsInPushOrder) {
  ThreadBuffer buf(1, 16);
  EXPECT_EQ(DrainValues(buf), std::vector<uint64_t>{});
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(buf.TryPush(Record(i)));
  EXPECT_EQ(buf.size(), 5u);
  std::vector<size_t> runs;
  EXPECT_EQ(DrainValues(buf, &runs), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(runs, std::vector<size_t>{5});
  EXPECT_EQ(buf.size(), 0u);
  EXPECT_EQ(DrainValues(buf), std::vector<uint64_t>{});
}

TEST(ThreadBufferTest, DrainRespectsMaxRecords) {
  ThreadBuffer buf(1, 16);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(buf.TryPush(Record(i)));
  EXPECT_EQ(DrainValues(buf, nullptr, 4), (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(buf.size(), 6u);
  EXPECT_EQ(DrainValues(buf), (std::vector<uint64_t>{4, 5, 6, 7, 8, 9}));
}

// The profiler's own records (cost samples) are shipped but are not what the
// process recorded: written() leaves them out, full or not.
TEST(ThreadBufferTest, UncountedRecordsAreShippedButNotWritten) {
  ThreadBuffer buf(1, 16);
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(buf.TryPush(Record(i), true, /*counted=*/i % 3 != 0));
  EXPECT_EQ(buf.written(), 4u);
  EXPECT_EQ(DrainValues(buf).size(), 6u);
  EXPECT_EQ(buf.written(), 4u);
}

TEST(ThreadBufferTest, WraparoundDrainsInTwoRuns) {
  ThreadBuffer buf(1, 16);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(buf.TryPush(Record(i)));
  ASSERT_EQ(DrainValues(buf).size(), 10u);
  // Slots 10..15 then 0..5: the ring end falls inside these 12 records.
  for (uint64_t i = 10; i < 22; ++i) ASSERT_TRUE(buf.TryPush(Record(i)));
  std::vector<size_t> runs;
  std::vector<uint64_t> expected;
  for (uint64_t i = 10; i < 22; ++i) expected.push_back(i);
  EXPECT_EQ(DrainValues(buf, &runs), expected);
  EXPECT_EQ(runs, (std::vector<size_t>{6, 6}));
  EXPECT_EQ(buf.written(), 22u);
  EXPECT_EQ(buf.dropped(), 0u);
}

TEST(ThreadBufferTest, OrdinaryRecordsLeaveTheReserveToPrivilegedOnes) {
  ThreadBuffer buf(1, 64);
  ASSERT_EQ(buf.reserve(), 8u);  // an eighth of the ring
  int accepted = 0;
  for (uint64_t i = 0; i < 100; ++i) accepted += buf.TryPush(Record(i), /*privileged=*/false) ? 1 : 0;
  EXPECT_EQ(accepted, 56);
  EXPECT_EQ(buf.dropped(), 44u);
  // The closes of what was recorded and the step edges still fit.
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(buf.TryPush(Record(200 + i), /*privileged=*/true));
  EXPECT_FALSE(buf.TryPush(Record(300), /*privileged=*/true));  // the ring is full
  EXPECT_EQ(buf.size(), 64u);
  EXPECT_EQ(ThreadBuffer(1, 1 << 20).reserve(), 256u);  // at most 256
}

TEST(ThreadBufferTest, FullBufferDropsAndCountsExactly) {
  ThreadBuffer buf(1, 16);
  int accepted = 0;
  for (uint64_t i = 0; i < 25; ++i) accepted += buf.TryPush(Record(i)) ? 1 : 0;
  EXPECT_EQ(accepted, 16);
  EXPECT_EQ(buf.written(), 16u);
  EXPECT_EQ(buf.dropped(), 9u);
  EXPECT_EQ(buf.size(), 16u);
  // The survivors are the oldest 16; drops lose the newest.
  std::vector<uint64_t> expected;
  for (uint64_t i = 0; i < 16; ++i) expected.push_back(i);
  EXPECT_EQ(DrainValues(buf), expected);
  // Space is reusable after a drain, and the counters keep accumulating.
  EXPECT_TRUE(buf.TryPush(Record(100)));
  EXPECT_EQ(buf.written(), 17u);
  EXPECT_EQ(buf.dropped(), 9u);
  EXPECT_EQ(DrainValues(buf), std::vector<uint64_t>{100});
}

TEST(ThreadBufferTest, ConcurrentProducerConsumerLosesNothingUncounted) {
  constexpr uint64_t kProduced = 1000000;
  ThreadBuffer buf(7, 1024);
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (uint64_t i = 0; i < kProduced; ++i) buf.TryPush(Record(i));
    done.store(true, std::memory_order_release);
  });

  uint64_t drained = 0;
  uint64_t next_min = 0;  // values must strictly increase: in order, no duplicates
  bool in_order = true;
  bool fields_intact = true;
  auto consume = [&](const EventRecord* r, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (r[i].value < next_min) in_order = false;
      if (r[i].ts != r[i].value * 10) fields_intact = false;
      next_min = r[i].value + 1;
    }
    drained += n;
  };
  while (!done.load(std::memory_order_acquire)) {
    if (buf.Drain(consume) == 0) std::this_thread::yield();
  }
  buf.Drain(consume);
  producer.join();
  buf.Drain(consume);

  EXPECT_TRUE(in_order);
  EXPECT_TRUE(fields_intact);
  EXPECT_EQ(drained + buf.dropped(), kProduced);
  EXPECT_EQ(buf.written(), drained);
  EXPECT_EQ(buf.size(), 0u);
}

// -------------------------------------------------------- string_table.h

TEST(StringTableTest, IdsStartAtOneAndAreDense) {
  StringTable table;
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.Intern("alpha"), 1u);
  EXPECT_EQ(table.Intern("beta"), 2u);
  EXPECT_EQ(table.Intern("alpha"), 1u);
  EXPECT_EQ(table.Intern(""), 3u);
  EXPECT_EQ(table.Intern("gamma"), 4u);
  EXPECT_EQ(table.size(), 4u);
  EXPECT_STREQ(table.Get(1), "alpha");
  EXPECT_STREQ(table.Get(2), "beta");
  EXPECT_STREQ(table.Get(3), "");
  EXPECT_EQ(table.Get(0), nullptr);
  EXPECT_EQ(table.Get(5), nullptr);
}

TEST(StringTableTest, GetPointersStayValidAsTableGrows) {
  StringTable table;
  const uint32_t id = table.Intern("first");
  const char* p = table.Get(id);
  for (int i = 0; i < 10000; ++i) table.Intern("s" + std::to_string(i));
  EXPECT_EQ(table.Get(id), p);
  EXPECT_STREQ(p, "first");
  EXPECT_EQ(table.Intern("first"), id);
}

TEST(StringTableTest, CopySinceShipsEachStringOnce) {
  StringTable table;
  table.Intern("a");
  table.Intern("b");
  std::vector<std::pair<uint32_t, std::string>> out;
  uint32_t next = table.CopySince(1, &out);
  EXPECT_EQ(next, 3u);
  EXPECT_EQ(out, (std::vector<std::pair<uint32_t, std::string>>{{1, "a"}, {2, "b"}}));

  out.clear();
  EXPECT_EQ(table.CopySince(next, &out), 3u);
  EXPECT_TRUE(out.empty());

  table.Intern("a");  // not new
  table.Intern("c");
  next = table.CopySince(next, &out);
  EXPECT_EQ(next, 4u);
  EXPECT_EQ(out, (std::vector<std::pair<uint32_t, std::string>>{{3, "c"}}));

  out.clear();
  EXPECT_EQ(table.CopySince(0, &out), 4u);  // 0 means "from the start"
  EXPECT_EQ(out.size(), 3u);
}

TEST(NameCacheTest, SamePointerWithNewContentsGetsNewId) {
  StringTable table;
  NameCache cache(&table);
  EXPECT_EQ(cache.Lookup(nullptr), 0u);

  char buf[32];
  std::strcpy(buf, "step 1");
  const uint32_t id1 = cache.Lookup(buf);
  EXPECT_STREQ(table.Get(id1), "step 1");
  EXPECT_EQ(cache.Lookup(buf), id1);

  std::strcpy(buf, "step 2");
  const uint32_t id2 = cache.Lookup(buf);
  EXPECT_NE(id2, id1);
  EXPECT_STREQ(table.Get(id2), "step 2");

  std::strcpy(buf, "step 1");
  EXPECT_EQ(cache.Lookup(buf), id1);

  // A different pointer with equal contents maps to the same id.
  const std::string copy = "step 2";
  EXPECT_EQ(cache.Lookup(copy.c_str()), id2);
  EXPECT_EQ(table.size(), 2u);
}

// The hot path's inline check (Hit): only after a Lookup of the same
// pointer, only while the contents are the same, bytes 16-31 included, and
// never for a name too long to check inline or one near its page's end.
TEST(NameCacheTest, TheInlineHitNeedsALookupOfThatPointerAndTheSameContents) {
  StringTable table;
  NameCache cache(&table);
  uint32_t id = 0;
  alignas(64) char buf[64];
  std::strcpy(buf, "step 1");
  EXPECT_FALSE(cache.Hit(buf, &id));  // never looked up
  const uint32_t id1 = cache.Lookup(buf);
  ASSERT_TRUE(cache.Hit(buf, &id));
  EXPECT_EQ(id, id1);
  std::strcpy(buf, "step 2");
  EXPECT_FALSE(cache.Hit(buf, &id));  // same pointer, new contents
  const uint32_t id2 = cache.Lookup(buf);
  EXPECT_NE(id2, id1);
  ASSERT_TRUE(cache.Hit(buf, &id));
  EXPECT_EQ(id, id2);
  std::strcpy(buf, "step");  // a prefix: its terminator differs
  EXPECT_FALSE(cache.Hit(buf, &id));

  // 16 to 31 bytes: two loads; a change past the first 16 is seen.
  for (const size_t len : {15, 16, 20, 31}) {
    std::string name(len, 'n');
    std::memcpy(buf, name.c_str(), len + 1);
    const uint32_t lid = cache.Lookup(buf);
    ASSERT_TRUE(cache.Hit(buf, &id)) << len;
    EXPECT_EQ(id, lid);
    buf[len - 1] = 'x';
    EXPECT_FALSE(cache.Hit(buf, &id)) << len;
    buf[len - 1] = 'n';
    buf[len] = 'n';
    buf[len + 1] = 0;
    EXPECT_FALSE(cache.Hit(buf, &id)) << len << " (longer)";
  }
  // 32 bytes and more: Lookup (strcmp) only.
  const std::string long_name(40, 'L');
  std::memcpy(buf, long_name.c_str(), long_name.size() + 1);
  const uint32_t lid = cache.Lookup(buf);
  EXPECT_FALSE(cache.Hit(buf, &id));
  EXPECT_EQ(cache.Lookup(buf), lid);
  EXPECT_STREQ(table.Get(lid), long_name.c_str());
}

TEST(NameCacheTest, TheInlineCheckNeverReadsIntoTheNextPage) {
  StringTable table;
  NameCache cache(&table);
  const long page = sysconf(_SC_PAGESIZE);
  ASSERT_EQ(page, 4096);
  char* p = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(mprotect(p + page, page, PROT_NONE), 0);  // a read past the first page faults
  char* s = p + page - 9;
  std::strcpy(s, "near_end");
  const uint32_t id = cache.Lookup(s);
  uint32_t hit = 0;
  EXPECT_FALSE(cache.Hit(s, &hit));  // left to Lookup: 32 bytes from s cross the page
  EXPECT_EQ(cache.Lookup(s), id);
  EXPECT_STREQ(table.Get(id), "near_end");
  char* t = p + page - 32;  // the last 32 bytes of the page: inline
  std::strcpy(t, "fits");
  const uint32_t tid = cache.Lookup(t);
  ASSERT_TRUE(cache.Hit(t, &hit));
  EXPECT_EQ(hit, tid);
  munmap(p, 2 * page);
}

// --------------------------------------------------------------- clock.h

TEST(TickConverterTest, MonotonicIsIdentity) {
  TickConverter conv(ClockSource::kMonotonic);
  EXPECT_EQ(conv.source(), ClockSource::kMonotonic);
  conv.Sample();
  EXPECT_EQ(conv.ToNs(0), 0);
  EXPECT_EQ(conv.ToNs(123456789), 123456789);
  const uint64_t t = ReadTicks(ClockSource::kMonotonic);
  EXPECT_EQ(conv.ToNs(t), static_cast<int64_t>(t));
}

TEST(TickConverterTest, TscConvertsToMonotonicWithin50us) {
  if (!TscIsInvariant()) {
    GTEST_SKIP() << "this CPU does not advertise an invariant TSC (constant_tsc and nonstop_tsc)";
  }
  TickConverter conv(ClockSource::kTsc);
  conv.Sample();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  conv.Sample();
  EXPECT_GT(conv.ns_per_tick(), 0.0);
  // Bracket the tick read with two monotonic reads.
  const int64_t before = MonotonicNs();
  const int64_t converted = conv.ToNs(ReadTicks(ClockSource::kTsc));
  const int64_t after = MonotonicNs();
  EXPECT_GE(converted, before - 50000) << "after=" << after;
  EXPECT_LE(converted, after + 50000) << "before=" << before;
}

// ---------------------------------------------------------------- wire.h

wire::Hello SampleHello() {
  wire::Hello h;
  h.session = 0xDEADBEEFCAFEF00Dull;
  h.identity.host = "node-3";
  h.identity.pid = 4242;
  h.identity.rank = 1;
  h.identity.role = "worker";
  h.identity.name = "train.py";
  h.identity.labels = {{"ray.actor_id", "abc123"}, {"ray.job_id", "01000000"}, {"empty", ""}};
  h.clock = "monotonic";
  h.start_ns = 1234567890123;
  h.costs = {{"push", 8.5}, {"py_nvtx_push", 312.25}, {"mark", 0.0}};
  h.clock_domain = "5d0c2a7e-boot:4026531834";
  return h;
}

wire::Event MakeEvent(EventKind kind, int64_t ts, uint32_t name, uint64_t value = 0, uint8_t flags = kFlagNone,
                      uint32_t domain = 0, uint32_t category = 0) {
  wire::Event e;
  e.kind = static_cast<uint8_t>(kind);
  e.ts_ns = ts;
  e.name = name;
  e.value = value;
  e.flags = flags;
  e.domain = domain;
  e.category = category;
  return e;
}

wire::Batch SampleBatch() {
  wire::Batch b;
  b.session = 0xDEADBEEFCAFEF00Dull;
  b.seq = 17;
  b.watermark_ns = 9000000000000;
  b.dropped = 3;
  b.strings = {{1, "train_step"}, {2, "gen"}, {3, "my.domain"}, {4, "ünïcode ✓"}};
  b.thread_names = {{4242, "MainThread"}, {4250, "flush"}};
  b.categories = {{3, 7, "compute"}, {0, 1, "io"}};
  const int64_t t0 = 8999999000000;
  wire::ThreadEvents main_thread;
  main_thread.tid = 4242;
  main_thread.events = {
      MakeEvent(EventKind::kRangePush, t0, 1),
      MakeEvent(EventKind::kMark, t0 + 5, 2, UINT64_MAX, kFlagHasPayload, 3, 7),
      MakeEvent(EventKind::kMark, t0 + 5, 2),  // equal timestamp
      MakeEvent(EventKind::kRangeStart, t0 + 1000000, 2, 77, kFlagNone, 3, 0),
      MakeEvent(EventKind::kRangePop, t0 + 2000000, 0),
      MakeEvent(EventKind::kMark, t0 + 1999999, 4, 1ull << 40, kFlagHasPayload, UINT32_MAX,
                UINT32_MAX),  // clock step backwards
  };
  wire::ThreadEvents flush_thread;
  flush_thread.tid = 4250;
  flush_thread.events = {MakeEvent(EventKind::kRangeEnd, t0 + 3000000, 2, 77)};
  wire::ThreadEvents empty_thread;
  empty_thread.tid = -1;
  b.threads = {main_thread, flush_thread, empty_thread};
  return b;
}

wire::Bye SampleBye() {
  wire::Bye b;
  b.session = 0xDEADBEEFCAFEF00Dull;
  b.events = 123456789;
  b.dropped = 42;
  return b;
}

void ExpectSameHello(const wire::Hello& a, const wire::Hello& b) {
  EXPECT_EQ(a.session, b.session);
  EXPECT_EQ(a.identity.host, b.identity.host);
  EXPECT_EQ(a.identity.pid, b.identity.pid);
  EXPECT_EQ(a.identity.rank, b.identity.rank);
  EXPECT_EQ(a.identity.role, b.identity.role);
  EXPECT_EQ(a.identity.name, b.identity.name);
  EXPECT_EQ(a.identity.labels, b.identity.labels);
  EXPECT_EQ(a.clock, b.clock);
  EXPECT_EQ(a.start_ns, b.start_ns);
  EXPECT_EQ(a.costs, b.costs);
  EXPECT_EQ(a.clock_domain, b.clock_domain);
}

void ExpectSameBatch(const wire::Batch& a, const wire::Batch& b) {
  EXPECT_EQ(a.session, b.session);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.watermark_ns, b.watermark_ns);
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.strings, b.strings);
  EXPECT_EQ(a.thread_names, b.thread_names);
  EXPECT_EQ(a.categories, b.categories);
  EXPECT_EQ(a.threads, b.threads);
}

wire::DecodeResult DecodeString(const std::string& s) { return wire::Decode(s.data(), s.size()); }

TEST(WireTest, HelloRoundTrips) {
  const wire::Hello h = SampleHello();
  const wire::DecodeResult r = DecodeString(wire::Encode(h));
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(std::holds_alternative<wire::Hello>(r.message));
  ExpectSameHello(std::get<wire::Hello>(r.message), h);

  wire::Hello unknown_rank = h;
  unknown_rank.identity.rank = -1;
  unknown_rank.identity.labels.clear();
  const wire::DecodeResult r2 = DecodeString(wire::Encode(unknown_rank));
  ASSERT_TRUE(r2.ok) << r2.error;
  ExpectSameHello(std::get<wire::Hello>(r2.message), unknown_rank);
}

TEST(WireTest, BatchRoundTrips) {
  const wire::Batch b = SampleBatch();
  const std::string bytes = wire::Encode(b);
  const wire::DecodeResult r = DecodeString(bytes);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(std::holds_alternative<wire::Batch>(r.message));
  ExpectSameBatch(std::get<wire::Batch>(r.message), b);
  // Re-encoding the decoded batch reproduces the same bytes.
  EXPECT_EQ(wire::Encode(r.message), bytes);
}

TEST(WireTest, CpuSamplesRoundTrip) {
  wire::Batch b;
  b.session = 3;
  wire::Event e;
  e.kind = static_cast<uint8_t>(EventKind::kCpuSample);
  e.ts_ns = 123456789;
  e.value = 0x7f0012345678;  // an instruction address
  e.name = 4;                // the shared object's path
  e.category = 5;            // the Python frame's module
  e.domain = 4000;           // us of thread CPU time
  b.threads = {{77, {e}}};
  const wire::DecodeResult r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::get<wire::Batch>(r.message).threads[0].events[0], e);
}

TEST(WireTest, EmptyBatchRoundTrips) {
  wire::Batch b;
  b.session = 1;
  const wire::DecodeResult r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  ExpectSameBatch(std::get<wire::Batch>(r.message), b);
}

TEST(WireTest, ArmingEdgesRoundTripAndTheirAbsenceIsKept) {
  wire::Batch b;
  b.session = 4;
  b.reports_arming = true;
  b.arming = {{1000, true}, {5000, false}, {9000, true}};
  wire::DecodeResult r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(std::get<wire::Batch>(r.message).reports_arming);
  EXPECT_EQ(std::get<wire::Batch>(r.message).arming, b.arming);
  b.arming.clear();  // reports, no edge since the last batch
  r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(std::get<wire::Batch>(r.message).reports_arming);
  b.reports_arming = false;  // another trigger: says nothing
  r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(std::get<wire::Batch>(r.message).reports_arming);
}

TEST(WireTest, MemorySamplesRoundTripAndNegativeBytesAreRefused) {
  wire::Batch b;
  b.session = 4;
  b.memory = {{1000, 512LL << 20}, {21000, 530LL << 20}};
  wire::DecodeResult r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::get<wire::Batch>(r.message).memory, b.memory);
  b.memory = {{1000, -1}};
  r = DecodeString(wire::Encode(b));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("batch.memory[0]"));
}

TEST(WireTest, GpuMemoryRecordsRoundTrip) {
  wire::Batch b;
  b.session = 5;
  GpuRecord m;
  m.kind = static_cast<uint8_t>(GpuKind::kMemory);
  m.start_ns = m.end_ns = 1000;
  m.subkind = kMemoryAllocation | kMemoryKindDevice << 8;
  m.bytes = uint64_t{1} << 30;
  m.device = 1;
  b.gpu = {m};
  const wire::DecodeResult r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::get<wire::Batch>(r.message).gpu, b.gpu);
}

TEST(WireTest, ByeRoundTrips) {
  const wire::Bye b = SampleBye();
  const wire::DecodeResult r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(std::holds_alternative<wire::Bye>(r.message));
  const auto& d = std::get<wire::Bye>(r.message);
  EXPECT_EQ(d.session, b.session);
  EXPECT_EQ(d.events, b.events);
  EXPECT_EQ(d.dropped, b.dropped);
}

TEST(WireTest, GpuRecordsRoundTrip) {
  wire::Batch b;
  b.session = 9;
  GpuRecord k;
  k.kind = static_cast<uint8_t>(GpuKind::kKernel);
  k.start_ns = 1000;
  k.end_ns = 1500;
  k.correlation = 42;
  k.name = 3;
  k.device = 1;
  k.context = 2;
  k.stream = 7;
  k.grid[0] = 128;
  k.grid[1] = 2;
  k.grid[2] = 1;
  k.block[0] = 256;
  k.block[1] = 1;
  k.block[2] = 1;
  GpuRecord api;
  api.kind = static_cast<uint8_t>(GpuKind::kRuntimeApi);
  api.start_ns = 900;
  api.end_ns = 950;
  api.correlation = 42;
  api.tid = 4242;
  api.name = 4;
  GpuRecord copy;
  copy.kind = static_cast<uint8_t>(GpuKind::kMemcpy);
  copy.start_ns = 2000;
  copy.end_ns = 2000;
  copy.bytes = uint64_t{1} << 33;
  copy.subkind = 1;
  b.gpu = {k, api, copy};
  const wire::DecodeResult r = DecodeString(wire::Encode(b));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::get<wire::Batch>(r.message).gpu, b.gpu);
}

TEST(WireTest, ControlRoundTripsWithAProbeRequest) {
  wire::Control c;
  c.window = wire::Control::Window::kClosed;
  c.step = 4;
  c.probe = true;
  c.probe_port = 40001;
  c.probe_host = "10.0.0.7";
  c.probe_key = 0xfedcba9876543210ull;
  c.same_clock = true;
  const std::string bytes = wire::Encode(c);
  const wire::DecodeResult r = wire::Decode(bytes.data(), bytes.size());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::get<wire::Control>(r.message), c);
  // Absent: no request (an older aggregator's Control).
  wire::Control plain;
  const std::string plain_bytes = wire::Encode(plain);
  EXPECT_EQ(plain_bytes.find("probe\xc3"), std::string::npos);
  const auto decoded_plain = std::get<wire::Control>(wire::Decode(plain_bytes.data(), plain_bytes.size()).message);
  EXPECT_FALSE(decoded_plain.probe);
  EXPECT_FALSE(decoded_plain.same_clock);  // absent: not known to be (an older aggregator's answer)
}

TEST(ProbePacketTest, RequestsAndRepliesRoundTripAndNothingElseDecodes) {
  char buf[probe::kPacketBytes];
  const probe::Request req{0x0123456789abcdefull, 42, 0xfeedfacecafebeefull, -5};
  probe::Encode(req, buf);
  probe::Request r;
  ASSERT_TRUE(probe::Decode(buf, sizeof(buf), &r));
  EXPECT_EQ(r.key, req.key);
  EXPECT_EQ(r.session, 42u);
  EXPECT_EQ(r.nonce, req.nonce);
  EXPECT_EQ(r.t1, -5);
  probe::Reply as_reply;
  EXPECT_FALSE(probe::Decode(buf, sizeof(buf), &as_reply));  // a request is not a reply
  EXPECT_FALSE(probe::Decode(buf, sizeof(buf) - 1, &r));     // nor a short one anything
  const probe::Reply rep{7, 1, 2000000000000, 2000000000500};
  probe::Encode(rep, buf);
  ASSERT_TRUE(probe::Decode(buf, sizeof(buf), &as_reply));
  EXPECT_EQ(as_reply.nonce, 7u);
  EXPECT_EQ(as_reply.t2, 2000000000000);
  EXPECT_EQ(as_reply.t3, 2000000000500);
  buf[4] = 2;  // another version
  EXPECT_FALSE(probe::Decode(buf, sizeof(buf), &as_reply));
}

TEST(ProbePacketTest, EndpointHosts) {
  EXPECT_EQ(probe::EndpointHost("tcp://10.0.0.7:5557"), "10.0.0.7");
  EXPECT_EQ(probe::EndpointHost("tcp://[::1]:5557"), "::1");
  EXPECT_EQ(probe::EndpointHost("tcp://*:5557"), "*");
  EXPECT_EQ(probe::EndpointHost("tcp://node-3.cluster:5557"), "node-3.cluster");
  EXPECT_EQ(probe::EndpointHost("ipc:///tmp/agg.sock"), "");
  EXPECT_EQ(probe::EndpointHost("tcp://5557"), "");
  EXPECT_TRUE(probe::IsWildcardHost("0.0.0.0"));
  EXPECT_FALSE(probe::IsWildcardHost("127.0.0.1"));
}

TEST(WireTest, HelloSelectedFlagRoundTrips) {
  wire::Hello h;
  h.session = 5;
  h.selected = false;
  const wire::DecodeResult r = DecodeString(wire::Encode(h));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(std::get<wire::Hello>(r.message).selected);
}

TEST(WireTest, ExpectedRoundTrips) {
  wire::Expected ex;
  ex.session = 42;
  ex.processes = {{{"actor_id", "abc"}, {"class_name", "Learner"}, {"node_id", "n1"}}, {{"pid", "4242"}}, {}};
  const wire::DecodeResult r = DecodeString(wire::Encode(ex));
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(std::holds_alternative<wire::Expected>(r.message));
  EXPECT_EQ(std::get<wire::Expected>(r.message), ex);
}

TEST(WireTest, BatchWriterIsReusableAndResetsDeltasPerThread) {
  const wire::Batch b = SampleBatch();
  wire::BatchWriter w;
  std::string first;
  for (int round = 0; round < 2; ++round) {
    w.Begin(b.session, b.seq, b.watermark_ns, b.dropped);
    w.Strings(b.strings);
    w.ThreadNames(b.thread_names);
    w.Categories(b.categories);
    w.Gpu(b.gpu);
    w.Probes(b.probes);
    w.Arming(b.reports_arming, b.arming);
    w.Memory(b.memory);
    w.BeginThreads(b.threads.size());
    for (const auto& te : b.threads) {
      w.BeginThread(te.tid, te.events.size());
      for (const auto& e : te.events) w.AddEvent(e);
    }
    const std::string bytes(w.Finish().data(), w.Finish().size());
    if (round == 0) first = bytes;
    EXPECT_EQ(bytes, wire::Encode(b)) << "round " << round;
  }
  EXPECT_EQ(first, wire::Encode(b));
}

// An event's fields are packed by hand (one buffer write per event): the
// bytes must be msgpack-c's own, at every encoding's boundary.
TEST(WireTest, EventsPackAsMsgpackPacksThem) {
  const std::vector<int64_t> deltas = {
      0,        1,     31,           127,          128,       255,       256,
      65535,    65536, 4294967295LL, 4294967296LL, INT64_MAX, -1,        -32,
      -33,      -128,  -129,         -32768,       -32769,    INT32_MIN, static_cast<int64_t>(INT32_MIN) - 1,
      INT64_MIN};
  const std::vector<uint64_t> values = {0, 127, 128, 255, 256, 65535, 65536, 4294967295ULL, 4294967296ULL, UINT64_MAX};
  wire::BatchWriter w;
  w.Begin(1, 2, 3, 0);
  w.BeginThreads(1);
  msgpack::sbuffer expected;
  msgpack::packer<msgpack::sbuffer> pk(expected);
  const size_t head = w.Finish().size();
  int64_t ts = 0, prev = 0;
  size_t n = 0;
  for (int64_t d : deltas) {
    for (uint64_t v : values) {
      ts = static_cast<int64_t>(static_cast<uint64_t>(prev) + static_cast<uint64_t>(d));  // delta d exactly
      wire::Event e;
      e.kind = static_cast<uint8_t>(v & 0xff);
      e.ts_ns = ts;
      e.name = static_cast<uint32_t>(v);
      e.domain = static_cast<uint32_t>(v >> 3);
      e.category = static_cast<uint32_t>(v >> 17);
      e.value = v;
      e.flags = static_cast<uint8_t>(v >> 1);
      w.AddEvent(e);
      pk.pack_uint8(e.kind);
      pk.pack_int64(d);
      pk.pack_uint32(e.name);
      pk.pack_uint32(e.domain);
      pk.pack_uint32(e.category);
      pk.pack_uint64(e.value);
      pk.pack_uint8(e.flags);
      prev = ts;
      ++n;
    }
  }
  ASSERT_EQ(n, deltas.size() * values.size());
  const std::string got(w.Finish().data() + head, w.Finish().size() - head);
  EXPECT_EQ(got, std::string(expected.data(), expected.size()));
}

// Hand-encodes [magic, version, type, body] with `body` packing one map.
template <typename BodyFn>
std::string Frame(std::string_view magic, uint64_t version, uint64_t type, BodyFn body) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(4);
  pk.pack_str(static_cast<uint32_t>(magic.size()));
  pk.pack_str_body(magic.data(), static_cast<uint32_t>(magic.size()));
  pk.pack_uint64(version);
  pk.pack_uint64(type);
  body(pk);
  return std::string(buf.data(), buf.size());
}

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// A minimal batch body whose one thread carries `flat` as its event array.
// A batch's map with its four scalar keys packed, `more` keys to follow.
void PackBatchHead(Packer& pk, uint32_t more) {
  pk.pack_map(4 + more);
  PackStr(pk, "session");
  pk.pack_uint64(1);
  PackStr(pk, "seq");
  pk.pack_uint64(0);
  PackStr(pk, "watermark_ns");
  pk.pack_int64(0);
  PackStr(pk, "dropped");
  pk.pack_uint64(0);
}

std::string BatchWithEvents(const std::vector<int64_t>& flat) {
  return Frame("RLSC", 1, 2, [&](Packer& pk) {
    PackBatchHead(pk, 1);
    PackStr(pk, "threads");
    pk.pack_array(1);
    pk.pack_array(2);
    pk.pack_int64(99);
    pk.pack_array(static_cast<uint32_t>(flat.size()));
    for (int64_t v : flat) pk.pack_int64(v);
  });
}

std::string ByeBody(bool with_dropped, bool with_unknown_key) {
  return Frame("RLSC", 1, 3, [&](Packer& pk) {
    pk.pack_map(2 + (with_dropped ? 1 : 0) + (with_unknown_key ? 1 : 0));
    PackStr(pk, "session");
    pk.pack_uint64(5);
    if (with_unknown_key) {
      PackStr(pk, "added_in_a_later_minor_revision");
      pk.pack_array(2);
      pk.pack_nil();
      pk.pack_true();
    }
    PackStr(pk, "events");
    pk.pack_uint64(10);
    if (with_dropped) {
      PackStr(pk, "dropped");
      pk.pack_uint64(2);
    }
  });
}

TEST(WireTest, HandEncodedFrameDecodes) {
  const wire::DecodeResult r = DecodeString(BatchWithEvents({5, 100, 1, 0, 0, 0, 0,  //
                                                             5, 0,   1, 0, 0, 0, 0,  //
                                                             5, -3,  1, 0, 0, 9, 1}));
  ASSERT_TRUE(r.ok) << r.error;
  const auto& b = std::get<wire::Batch>(r.message);
  ASSERT_EQ(b.threads.size(), 1u);
  EXPECT_EQ(b.threads[0].tid, 99);
  ASSERT_EQ(b.threads[0].events.size(), 3u);
  EXPECT_EQ(b.threads[0].events[0].ts_ns, 100);
  EXPECT_EQ(b.threads[0].events[1].ts_ns, 100);
  EXPECT_EQ(b.threads[0].events[2].ts_ns, 97);
  EXPECT_EQ(b.threads[0].events[2].value, 9u);
  EXPECT_EQ(b.threads[0].events[2].flags, kFlagHasPayload);
  EXPECT_TRUE(b.strings.empty());
}

TEST(WireTest, UnknownMapKeysAreIgnored) {
  const wire::DecodeResult r = DecodeString(ByeBody(true, true));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(std::get<wire::Bye>(r.message).dropped, 2u);
}

TEST(WireTest, RejectsEveryTruncatedPrefix) {
  for (const std::string& frame :
       {wire::Encode(SampleBatch()), wire::Encode(SampleHello()), wire::Encode(SampleBye())}) {
    ASSERT_TRUE(DecodeString(frame).ok);
    for (size_t len = 0; len < frame.size(); ++len) {
      const wire::DecodeResult r = wire::Decode(frame.data(), len);
      ASSERT_FALSE(r.ok) << "prefix of " << len << " of " << frame.size() << " bytes decoded";
      EXPECT_FALSE(r.error.empty());
      EXPECT_THAT(r.error, HasSubstr("truncated")) << len;
    }
  }
}

TEST(WireTest, RejectsTrailingBytes) {
  const std::string frame = wire::Encode(SampleBye()) + '\x00';
  const wire::DecodeResult r = DecodeString(frame);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("trailing"));
}

TEST(WireTest, RejectsOtherVersion) {
  const wire::DecodeResult r = DecodeString(Frame("RLSC", 2, 3, [](Packer& pk) { pk.pack_map(0); }));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("version"));
  EXPECT_THAT(r.error, HasSubstr("version 2"));
}

TEST(WireTest, RejectsWrongMagic) {
  const wire::DecodeResult r = DecodeString(Frame("RLSX", 1, 3, [](Packer& pk) { pk.pack_map(0); }));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("magic"));
  EXPECT_THAT(r.error, HasSubstr("RLSX"));
}

TEST(WireTest, RejectsNonFrameShapes) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(0);
  wire::DecodeResult r = wire::Decode(buf.data(), buf.size());
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("frame"));

  buf.clear();
  pk.pack_array(3);
  PackStr(pk, "RLSC");
  pk.pack_uint8(1);
  pk.pack_uint8(3);
  r = wire::Decode(buf.data(), buf.size());
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("[magic, version, type, body]"));

  r = DecodeString(Frame("RLSC", 1, 3, [](Packer& p) { p.pack_array(0); }));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("frame.body"));
}

TEST(WireTest, RejectsUnknownMessageType) {
  for (uint64_t type : {0ull, 7ull, 9ull, 257ull, 258ull, 259ull}) {
    const wire::DecodeResult r = DecodeString(Frame("RLSC", 1, type, [](Packer& pk) { pk.pack_map(0); }));
    EXPECT_FALSE(r.ok) << "type " << type;
    EXPECT_THAT(r.error, HasSubstr("unknown message type " + std::to_string(type)));
  }
}

TEST(WireTest, ExpectedWithNonStringValueIsRejected) {
  const wire::DecodeResult r = DecodeString(Frame("RLSC", 1, 4, [](Packer& pk) {
    pk.pack_map(2);
    pk.pack(std::string("session"));
    pk.pack_uint64(1);
    pk.pack(std::string("processes"));
    pk.pack_array(1);
    pk.pack_map(1);
    pk.pack(std::string("pid"));
    pk.pack_uint64(7);
  }));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("expected.processes[0][pid]"));
}

TEST(WireTest, OffCpuSamplesAndProcessCpuDecode) {
  // kOffCpuSample: thread 4242 off CPU for the GIL, 20,000 us; kProcessCpu: 7 s of CPU.
  const wire::DecodeResult off = DecodeString(BatchWithEvents({8, 100, 0, 20000, 1, 4242, 0}));
  ASSERT_TRUE(off.ok) << off.error;
  const wire::Event& e = std::get<wire::Batch>(off.message).threads[0].events[0];
  EXPECT_EQ(e.kind, static_cast<uint8_t>(EventKind::kOffCpuSample));
  EXPECT_EQ(e.value, 4242u);
  EXPECT_EQ(e.category, static_cast<uint32_t>(OffCpuReason::kGil));
  EXPECT_EQ(e.domain, 20000u);
  const wire::DecodeResult cpu = DecodeString(BatchWithEvents({9, 100, 0, 0, 0, 7000000000ull, 0}));
  ASSERT_TRUE(cpu.ok) << cpu.error;
  EXPECT_EQ(std::get<wire::Batch>(cpu.message).threads[0].events[0].value, 7000000000ull);
}

TEST(WireTest, RejectsUnknownEventKind) {
  for (int64_t kind : {0, 10, 255, 256 + 1}) {
    const wire::DecodeResult r = DecodeString(BatchWithEvents({kind, 0, 1, 0, 0, 0, 0}));
    EXPECT_FALSE(r.ok) << "kind " << kind;
    EXPECT_THAT(r.error, HasSubstr("unknown event kind " + std::to_string(kind)));
    EXPECT_THAT(r.error, HasSubstr("batch.threads[0].events[0].kind"));
  }
}

TEST(WireTest, RejectsOutOfRangeEventFields) {
  // name, domain, category are 32-bit ids and flags is 8 bits: a larger value
  // is an error, not silently truncated.
  const int64_t big32 = int64_t{1} << 32;
  struct Case {
    std::vector<int64_t> flat;
    const char* field;
  } cases[] = {
      {{5, 0, big32 + 1, 0, 0, 0, 0}, "events[0].name"},
      {{5, 0, 1, big32, 0, 0, 0}, "events[0].domain"},
      {{5, 0, 1, 0, big32, 0, 0}, "events[0].category"},
      {{5, 0, 1, 0, 0, 0, 256 + 1}, "events[0].flags"},
  };
  for (const Case& c : cases) {
    const wire::DecodeResult r = DecodeString(BatchWithEvents(c.flat));
    EXPECT_FALSE(r.ok) << c.field;
    EXPECT_THAT(r.error, HasSubstr(c.field));
  }
}

TEST(WireTest, RejectsEventArrayNotMultipleOfSeven) {
  const wire::DecodeResult r = DecodeString(BatchWithEvents({5, 0, 1, 0, 0, 0, 0, 5}));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("batch.threads[0].events"));
  EXPECT_THAT(r.error, HasSubstr("length 8 is not a multiple of 7"));
}

// A batch whose one extra key `key` holds the flat array `flat` (tuples of a
// fixed length: probes, arming, memory).
std::string BatchWithTuples(const char* key, const std::vector<int64_t>& flat) {
  return Frame("RLSC", 1, 2, [&](Packer& pk) {
    PackBatchHead(pk, 2);
    PackStr(pk, "threads");
    pk.pack_array(0);
    PackStr(pk, key);
    pk.pack_array(static_cast<uint32_t>(flat.size()));
    for (int64_t v : flat) pk.pack_int64(v);
  });
}

TEST(WireTest, TupleArraysDecodeWholeTuplesOrSayWhich) {
  const wire::DecodeResult probes = DecodeString(BatchWithTuples("probes", {1, 2, 3, 4, 5, 6, 7, 8}));
  ASSERT_TRUE(probes.ok) << probes.error;
  const auto& b = std::get<wire::Batch>(probes.message);
  ASSERT_EQ(b.probes.size(), 2u);
  EXPECT_EQ(b.probes[1].t1, 5);
  EXPECT_EQ(b.probes[1].t4, 8);
  const wire::DecodeResult memory = DecodeString(BatchWithTuples("memory", {10, 4096, 20, 8192}));
  ASSERT_TRUE(memory.ok) << memory.error;
  EXPECT_EQ(std::get<wire::Batch>(memory.message).memory[1].rss_bytes, 8192);
  struct Case {
    const char* key;
    std::vector<int64_t> flat;
    const char* error;
  } cases[] = {
      {"probes", {1, 2, 3, 4, 5}, "batch.probes: length 5 is not a multiple of 4"},
      {"arming", {1, 1, 2}, "batch.arming: length 3 is not a multiple of 2"},
      {"memory", {10, 4096, 20}, "batch.memory: length 3 is not a multiple of 2"},
      {"memory", {10, 4096, 20, -1}, "batch.memory[1]: negative resident bytes"},
  };
  for (const Case& c : cases) {
    const wire::DecodeResult r = DecodeString(BatchWithTuples(c.key, c.flat));
    EXPECT_FALSE(r.ok) << c.error;
    EXPECT_THAT(r.error, HasSubstr(c.error));
  }
}

TEST(WireTest, RejectsWrongFieldType) {
  const wire::DecodeResult r = DecodeString(BatchWithEvents({5, 0, -1, 0, 0, 0, 0}));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("events[0].name"));
  EXPECT_THAT(r.error, HasSubstr("expected an unsigned integer, got int"));
}

TEST(WireTest, RejectsMissingRequiredKey) {
  wire::DecodeResult r = DecodeString(ByeBody(false, false));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("missing key 'dropped'"));
  EXPECT_THAT(r.error, HasSubstr("bye"));

  r = DecodeString(Frame("RLSC", 1, 2, [](Packer& pk) { PackBatchHead(pk, 0); }));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("missing key 'threads'"));

  r = DecodeString(Frame("RLSC", 1, 1, [](Packer& pk) {
    pk.pack_map(1);
    PackStr(pk, "session");
    pk.pack_uint64(1);
  }));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("hello: missing key 'host'"));
}

TEST(WireTest, RejectsStringIdZero) {
  const wire::DecodeResult r = DecodeString(Frame("RLSC", 1, 2, [](Packer& pk) {
    PackBatchHead(pk, 1);
    PackStr(pk, "strings");
    pk.pack_array(1);
    pk.pack_array(2);
    pk.pack_uint32(0);
    PackStr(pk, "x");
  }));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("batch.strings[0]"));
}

TEST(WireTest, RejectsHugeDeclaredLengths) {
  // An array header claiming ~2^32 elements in a 5-byte frame.
  const std::string frame("\xdd\xff\xff\xff\xf0", 5);
  const wire::DecodeResult r = DecodeString(frame);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
  const std::string map_frame("\xdf\x0f\xff\xff\xff", 5);
  EXPECT_FALSE(DecodeString(map_frame).ok);
}

// Frames of 64 KB and more are unpacked into a zone the thread keeps and
// clears after each: a frame decodes the same after any other, whole,
// truncated or corrupt, and what was decoded owns its strings.
TEST(WireTest, LargeFramesDecodeTheSameAfterAnyOther) {
  wire::Batch big = SampleBatch();
  for (uint32_t id = 100; id < 400; ++id) big.strings.emplace_back(id, "a_long_name_of_string_" + std::to_string(id));
  for (int t = 0; t < 3; ++t) {
    wire::ThreadEvents te{1000 + t, {}};
    for (int i = 0; i < 6000; ++i) {
      te.events.push_back({1000000 + i * 997 + t, 0, static_cast<uint32_t>(100 + i % 300), 0, 0,
                           static_cast<uint8_t>(i % 2 == 0 ? EventKind::kRangePush : EventKind::kRangePop), 0});
    }
    big.threads.push_back(std::move(te));
  }
  const std::string frame = wire::Encode(big);
  ASSERT_GE(frame.size(), size_t{64} << 10);
  const wire::DecodeResult first = DecodeString(frame);
  ASSERT_TRUE(first.ok) << first.error;
  std::mt19937 rng(7);
  for (int iter = 0; iter < 60; ++iter) {
    std::string f = frame;
    if (iter % 3 == 0) {
      f.resize(rng() % f.size());  // truncated
    } else if (iter % 3 == 1) {
      f[rng() % f.size()] = static_cast<char>(rng());  // corrupt, or not
    }
    wire::DecodeResult r;
    ASSERT_NO_THROW(r = DecodeString(f)) << "iteration " << iter;
    if (iter % 3 == 0) {
      EXPECT_THAT(r.error, HasSubstr("truncated")) << "iteration " << iter;
    }
    const wire::DecodeResult again = DecodeString(frame);
    ASSERT_TRUE(again.ok) << again.error;
    ExpectSameBatch(std::get<wire::Batch>(again.message), big);
  }
  ExpectSameBatch(std::get<wire::Batch>(first.message), big);  // kept nothing of the zone
  EXPECT_EQ(wire::Encode(first.message), frame);
}

// Deterministic mutation fuzzing: Decode must always return, never crash or
// throw, and a failure always carries an error.
TEST(WireTest, FuzzedFramesNeverCrash) {
  const std::vector<std::string> seeds = {wire::Encode(SampleHello()), wire::Encode(SampleBatch()),
                                          wire::Encode(SampleBye()), BatchWithEvents({5, 0, 1, 0, 0, 0, 0})};
  std::mt19937 rng(20240607);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f = seeds[rng() % seeds.size()];
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations && !f.empty(); ++m) {
      const size_t pos = rng() % f.size();
      switch (rng() % 5) {
        case 0: f[pos] = static_cast<char>(rng()); break;                         // overwrite
        case 1: f[pos] = static_cast<char>(f[pos] ^ (1u << (rng() % 8))); break;  // bit flip
        case 2: f.resize(pos); break;                                             // truncate
        case 3: f.insert(pos, 1, static_cast<char>(rng())); break;                // insert
        case 4: f[pos] = "\xc0\xc2\xc3\xcc\xcd\xce\xcf\xd9\xdc\xdd\xde\xdf\xff"[rng() % 13]; break;
      }
    }
    wire::DecodeResult r;
    ASSERT_NO_THROW(r = DecodeString(f)) << "iteration " << iter;
    if (r.ok) {
      ++ok;
      EXPECT_TRUE(r.error.empty());
    } else {
      ++failed;
      ASSERT_FALSE(r.error.empty()) << "iteration " << iter;
    }
  }
  // Both outcomes occur, so the mutations are neither all fatal nor no-ops.
  EXPECT_GT(ok, 0);
  EXPECT_GT(failed, 10000);
}

// -------------------------------------------------------------- config.h

// Writes `text` to a fresh file under the test temp dir; returns its path.
std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "native_test_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

std::string JoinErrors(const ConfigResult& r) {
  std::string s;
  for (const auto& e : r.errors) s += e + "\n";
  return s;
}

TEST(ConfigTest, EmptyDocumentGivesDefaults) {
  for (const char* text : {"", "\n", "# only a comment\n", "---\n"}) {
    const ConfigResult r = ParseConfig(text, "empty.yaml");
    ASSERT_TRUE(r.ok()) << JoinErrors(r);
    const Config& c = r.config;
    EXPECT_EQ(c.aggregator, "auto");
    EXPECT_EQ(c.output_dir, "rlscope_out");
    EXPECT_TRUE(c.ranks.all);
    EXPECT_TRUE(c.steps.all);
    EXPECT_TRUE(c.steps.Contains(123456));
    EXPECT_TRUE(c.subtasks.empty());
    EXPECT_FALSE(c.discrete);
    EXPECT_TRUE(c.controller);
    EXPECT_EQ(c.capture_range, "controller");
    EXPECT_TRUE(c.gpu.kernels);
    EXPECT_FALSE(c.gpu.driver_api);
    EXPECT_EQ(c.buffers.per_thread_kb, 1024);
    EXPECT_EQ(c.flush.interval_ms, 20);
    EXPECT_TRUE(c.correction.enabled);
  }
  const ConfigResult env = LoadConfigFromEnvValue("");
  EXPECT_TRUE(env.ok());
  EXPECT_TRUE(env.config.steps.all);
}

constexpr char kFullConfig[] = R"(# a complete configuration
aggregator: tcp://10.0.0.5:5555
output_dir: /tmp/rlscope_runs/ppo
ranks: [0, 1]
steps: "2-5"
subtasks: [gen, update_actor]
discrete: true
controller: false
capture_range: nvtx:foo
cpu:
  nvtx: true
  python_api: false
gpu:
  kernels: false
  memcpy: true
  memset: false
  runtime_api: false
  driver_api: true
  sync: false
buffers:
  per_thread_kb: 64
  max_mb: 32
flush:
  interval_ms: 50
  exit_timeout_ms: 2000
  step_grace_ms: 100
correction:
  enabled: false
)";

void ExpectFullConfig(const Config& c) {
  EXPECT_EQ(c.aggregator, "tcp://10.0.0.5:5555");
  EXPECT_EQ(c.output_dir, "/tmp/rlscope_runs/ppo");
  EXPECT_FALSE(c.ranks.all);
  EXPECT_EQ(c.ranks.values, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(c.steps.all);
  EXPECT_EQ(c.steps.values, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_TRUE(c.steps.Contains(4));
  EXPECT_FALSE(c.steps.Contains(6));
  EXPECT_EQ(c.subtasks, (std::vector<std::string>{"gen", "update_actor"}));
  EXPECT_TRUE(c.discrete);
  EXPECT_FALSE(c.controller);
  EXPECT_EQ(c.capture_range, "nvtx:foo");
  EXPECT_TRUE(c.cpu.nvtx);
  EXPECT_FALSE(c.cpu.python_api);
  EXPECT_FALSE(c.gpu.kernels);
  EXPECT_TRUE(c.gpu.memcpy);
  EXPECT_FALSE(c.gpu.memset);
  EXPECT_FALSE(c.gpu.runtime_api);
  EXPECT_TRUE(c.gpu.driver_api);
  EXPECT_FALSE(c.gpu.sync);
  EXPECT_EQ(c.buffers.per_thread_kb, 64);
  EXPECT_EQ(c.buffers.max_mb, 32);
  EXPECT_EQ(c.flush.interval_ms, 50);
  EXPECT_EQ(c.flush.exit_timeout_ms, 2000);
  EXPECT_EQ(c.flush.step_grace_ms, 100);
  EXPECT_FALSE(c.correction.enabled);
}

TEST(ConfigTest, FullFileParses) {
  const std::string path = WriteTempFile("full.yaml", kFullConfig);
  const ConfigResult r = LoadConfigFile(path);
  ASSERT_TRUE(r.ok()) << JoinErrors(r);
  ExpectFullConfig(r.config);
  // A path in RLSCOPE_CONFIG loads the same file.
  const ConfigResult env = LoadConfigFromEnvValue(path);
  ASSERT_TRUE(env.ok()) << JoinErrors(env);
  ExpectFullConfig(env.config);
  std::remove(path.c_str());
}

TEST(ConfigTest, SelectionForms) {
  struct Case {
    const char* yaml;
    std::vector<int64_t> values;
  } cases[] = {
      {"steps: [2, 3, 5]", {2, 3, 5}},
      {"steps: [5, 2, 3, 3]", {2, 3, 5}},  // sorted, unique
      {"steps: 7", {7}},
      {"steps: \"1,4-6\"", {1, 4, 5, 6}},
      {"steps: [0, \"10-12\"]", {0, 10, 11, 12}},
      {"steps: \"3-3\"", {3}},
  };
  for (const Case& c : cases) {
    const ConfigResult r = ParseConfig(c.yaml, "s.yaml");
    ASSERT_TRUE(r.ok()) << c.yaml << ": " << JoinErrors(r);
    EXPECT_FALSE(r.config.steps.all) << c.yaml;
    EXPECT_EQ(r.config.steps.values, c.values) << c.yaml;
  }
  const ConfigResult all = ParseConfig("steps: all\nranks: all\n", "s.yaml");
  ASSERT_TRUE(all.ok()) << JoinErrors(all);
  EXPECT_TRUE(all.config.steps.all);
  EXPECT_TRUE(all.config.ranks.all);
  EXPECT_EQ(all.config.steps.ToString(), "all");
  EXPECT_EQ(ParseConfig("ranks: [3, 1]", "s.yaml").config.ranks.ToString(), "[1, 3]");
}

TEST(ConfigTest, EmptyRangeNamesFileLineAndKey) {
  const std::string path = WriteTempFile("bad_range.yaml", "# comment\nranks: [0]\nsteps: \"5-2\"\n");
  const ConfigResult r = LoadConfigFile(path);
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  const std::string& e = r.errors[0];
  EXPECT_THAT(e, HasSubstr(path + ":3:"));
  EXPECT_THAT(e, HasSubstr("steps"));
  EXPECT_THAT(e, HasSubstr("5-2"));
  std::remove(path.c_str());
}

TEST(ConfigTest, NegativeRankIsRejected) {
  const ConfigResult r = ParseConfig("ranks: [-1]\n", "r.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("r.yaml:1:"));
  EXPECT_THAT(r.errors[0], HasSubstr("ranks"));
  EXPECT_THAT(r.errors[0], HasSubstr("-1"));
}

TEST(ConfigTest, BadSelectionItems) {
  for (const char* yaml : {"steps: [a]", "steps: \"2-x\"", "steps: []", "steps: {a: 1}", "steps: [[1]]",
                           "steps: \"1,,2\"", "steps: \"0-2000000\""}) {
    const ConfigResult r = ParseConfig(yaml, "s.yaml");
    ASSERT_EQ(r.errors.size(), 1u) << yaml;
    EXPECT_THAT(r.errors[0], HasSubstr("steps: ")) << yaml;
  }
}

TEST(ConfigTest, UnknownKeySuggestsNearest) {
  const ConfigResult r = ParseConfig("ranks: all\nstpes: [1]\n", "u.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("u.yaml:2:"));
  EXPECT_THAT(r.errors[0], HasSubstr("stpes"));
  EXPECT_THAT(r.errors[0], HasSubstr("unknown key"));
  EXPECT_THAT(r.errors[0], HasSubstr("did you mean 'steps'"));

  const ConfigResult far = ParseConfig("completely_unrelated: 1\n", "u.yaml");
  ASSERT_EQ(far.errors.size(), 1u);
  EXPECT_THAT(far.errors[0], HasSubstr("unknown key"));
  EXPECT_THAT(far.errors[0], ::testing::Not(HasSubstr("did you mean")));
}

TEST(ConfigTest, UnknownNestedKeyNamesFullPath) {
  const ConfigResult r = ParseConfig("gpu: {kernal: true}\n", "n.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("gpu.kernal"));
  EXPECT_THAT(r.errors[0], HasSubstr("unknown key"));
  EXPECT_THAT(r.errors[0], HasSubstr("did you mean 'gpu.kernels'"));
}

TEST(ConfigTest, AKeyThatWasReplacedSaysWhatReplacedIt) {
  const ConfigResult r = ParseConfig("steps: all\nclock:\n  warn_bound_us: 50\n", "old.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("old.yaml:3:"));
  EXPECT_THAT(r.errors[0], HasSubstr("clock.warn_bound_us: no longer a key: use clock.max_bound_us"));
  const ConfigResult now =
      ParseConfig("clock: {max_bound_us: 50, max_bound_fraction: 0.02, udp_probes: false}\n", "new.yaml");
  ASSERT_TRUE(now.ok()) << JoinErrors(now);
  EXPECT_EQ(now.config.clock.max_bound_us, 50);
  EXPECT_DOUBLE_EQ(now.config.clock.max_bound_fraction, 0.02);
  EXPECT_FALSE(now.config.clock.udp_probes);
}

TEST(ConfigTest, AttributionPatternsReplaceTheirDefaultsAndAreRunKeys) {
  const ConfigResult r = ParseConfig(
      "cpu: {sampling_hz: 250}\n"
      "attribution: {simulator: [mujoco, \"gymnasium.*\"], backend: [\"libtorch*\", jax]}\n",
      "a.yaml");
  ASSERT_TRUE(r.ok()) << JoinErrors(r);
  EXPECT_EQ(r.config.cpu.sampling_hz, 250);
  EXPECT_EQ(r.config.attribution.simulator, (std::vector<std::string>{"mujoco", "gymnasium.*"}));
  EXPECT_EQ(r.config.attribution.backend, (std::vector<std::string>{"libtorch*", "jax"}));
  EXPECT_EQ(r.config.attribution.python, Config().attribution.python);  // unset: the default
  EXPECT_EQ(RunKeysIn(r.keys), (KeySet{"attribution.backend", "attribution.simulator", "cpu.sampling_hz"}));
  Config adopted;
  AdoptRunKeys(r.config, &adopted);
  EXPECT_EQ(adopted.attribution.simulator, r.config.attribution.simulator);
  EXPECT_EQ(adopted.cpu.sampling_hz, 250);
  EXPECT_EQ(Config().cpu.sampling_hz, 1000);
}

TEST(ConfigTest, BadAttributionSaysWhatAndWhere) {
  const ConfigResult typo = ParseConfig("steps: all\nattribution: {simulatr: [mujoco]}\n", "a.yaml");
  ASSERT_EQ(typo.errors.size(), 1u) << JoinErrors(typo);
  EXPECT_THAT(typo.errors[0], HasSubstr("a.yaml:2:15: attribution.simulatr: unknown key"));
  EXPECT_THAT(typo.errors[0], HasSubstr("did you mean 'attribution.simulator'"));
  const ConfigResult scalar = ParseConfig("attribution:\n  backend: libtorch\n", "a.yaml");
  ASSERT_EQ(scalar.errors.size(), 1u) << JoinErrors(scalar);
  EXPECT_THAT(scalar.errors[0], HasSubstr("a.yaml:2:12: attribution.backend: expected a list of patterns"));
  const ConfigResult glob = ParseConfig("attribution: {python: [\"lib[py\"]}\n", "a.yaml");
  ASSERT_EQ(glob.errors.size(), 1u) << JoinErrors(glob);
  EXPECT_THAT(glob.errors[0], HasSubstr("attribution.python: 'lib[py' has an unbalanced [ ]"));
  const ConfigResult rate = ParseConfig("cpu: {sampling_hz: -5}\n", "a.yaml");
  ASSERT_EQ(rate.errors.size(), 1u) << JoinErrors(rate);
  EXPECT_THAT(rate.errors[0], HasSubstr("cpu.sampling_hz: -5 is out of range [0, 100000]"));
}

TEST(ConfigTest, SectionMustBeAMap) {
  const ConfigResult r = ParseConfig("gpu: true\n", "n.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("gpu: expected a section"));
}

TEST(ConfigTest, BadCaptureRangeListsAllowedValues) {
  const ConfigResult r = ParseConfig("capture_range: bogus\n", "c.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  const std::string& e = r.errors[0];
  EXPECT_THAT(e, HasSubstr("capture_range"));
  EXPECT_THAT(e, HasSubstr("'bogus'"));
  EXPECT_THAT(e, HasSubstr("controller"));
  EXPECT_THAT(e, HasSubstr("cudaProfilerApi"));
  EXPECT_THAT(e, HasSubstr("api"));
  EXPECT_THAT(e, HasSubstr("nvtx:<range name>"));
  // "nvtx:" alone names no range.
  EXPECT_FALSE(ParseConfig("capture_range: \"nvtx:\"\n", "c.yaml").ok());
  EXPECT_TRUE(ParseConfig("capture_range: cudaProfilerApi\n", "c.yaml").ok());
}

TEST(ConfigTest, WrongTypes) {
  ConfigResult r = ParseConfig("discrete: maybe\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("t.yaml:1:"));
  EXPECT_THAT(r.errors[0], HasSubstr("discrete"));
  EXPECT_THAT(r.errors[0], HasSubstr("true or false"));

  r = ParseConfig("flush:\n  interval_ms: soon\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("t.yaml:2:"));
  EXPECT_THAT(r.errors[0], HasSubstr("flush.interval_ms"));
  EXPECT_THAT(r.errors[0], HasSubstr("'soon'"));

  r = ParseConfig("buffers: {per_thread_kb: 1}\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("buffers.per_thread_kb"));
  EXPECT_THAT(r.errors[0], HasSubstr("out of range"));

  r = ParseConfig("subtasks: gen\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("subtasks"));

  r = ParseConfig("- steps\n- ranks\n", "t.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("expected a map"));
}

TEST(ConfigTest, YamlSyntaxErrorHasLineNumber) {
  const ConfigResult r = ParseConfig("ranks: all\nsteps: [1, 2\ndiscrete: true\n", "syn.yaml");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], ::testing::MatchesRegex("syn\\.yaml:[0-9]+:[0-9]+: not valid YAML: .*"));

  const ConfigResult tab = ParseConfig("ranks: all\nsteps: [1]\n  bad: : :\n", "syn.yaml");
  ASSERT_EQ(tab.errors.size(), 1u) << JoinErrors(tab);
  EXPECT_THAT(tab.errors[0], HasSubstr("syn.yaml:3:"));
  EXPECT_THAT(tab.errors[0], HasSubstr("not valid YAML"));
}

TEST(ConfigTest, ReportsEveryErrorInAFile) {
  const ConfigResult r = ParseConfig(
      "steps: \"5-2\"\n"
      "ranks: [-1]\n"
      "stpes: 1\n"
      "gpu:\n"
      "  kernal: true\n"
      "discrete: maybe\n"
      "capture_range: controller\n",
      "many.yaml");
  ASSERT_EQ(r.errors.size(), 5u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("many.yaml:1:"));
  EXPECT_THAT(r.errors[1], HasSubstr("many.yaml:2:"));
  EXPECT_THAT(r.errors[2], HasSubstr("many.yaml:3:"));
  EXPECT_THAT(r.errors[3], HasSubstr("many.yaml:5:"));
  EXPECT_THAT(r.errors[3], HasSubstr("gpu.kernal"));
  EXPECT_THAT(r.errors[4], HasSubstr("many.yaml:6:"));
}

TEST(ConfigTest, InlineJsonFromEnvValue) {
  ConfigResult r = LoadConfigFromEnvValue(R"({"steps": [1], "gpu": {"kernels": false}})");
  ASSERT_TRUE(r.ok()) << JoinErrors(r);
  EXPECT_FALSE(r.config.steps.all);
  EXPECT_EQ(r.config.steps.values, std::vector<int64_t>{1});
  EXPECT_FALSE(r.config.gpu.kernels);

  r = LoadConfigFromEnvValue("steps: all");  // one line of inline YAML, not a path
  ASSERT_TRUE(r.ok()) << r.errors[0];
  EXPECT_TRUE(r.config.steps.all);
  r = LoadConfigFromEnvValue("steps: [3]\nranks: [0]\n");  // inline YAML
  ASSERT_TRUE(r.ok()) << JoinErrors(r);
  EXPECT_EQ(r.config.steps.values, std::vector<int64_t>{3});

  r = LoadConfigFromEnvValue(R"({"stpes": [1]})");
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr("RLSCOPE_CONFIG:1:"));
  EXPECT_THAT(r.errors[0], HasSubstr("did you mean 'steps'"));
}

TEST(ConfigTest, MissingFileIsOneErrorNamingThePath) {
  const std::string path = ::testing::TempDir() + "definitely_not_here_rlscope.yaml";
  const ConfigResult r = LoadConfigFromEnvValue(path);
  ASSERT_EQ(r.errors.size(), 1u) << JoinErrors(r);
  EXPECT_THAT(r.errors[0], HasSubstr(path));
}

TEST(ConfigTest, YamlOutputRoundTrips) {
  const ConfigResult full = ParseConfig(kFullConfig, "full.yaml");
  ASSERT_TRUE(full.ok()) << JoinErrors(full);
  for (const Config& original : {full.config, Config{}}) {
    const std::string yaml = ConfigToYaml(original);
    const ConfigResult again = ParseConfig(yaml, "roundtrip.yaml");
    ASSERT_TRUE(again.ok()) << yaml << JoinErrors(again);
    EXPECT_EQ(ConfigToYaml(again.config), yaml);
    const Config& c = again.config;
    EXPECT_EQ(c.aggregator, original.aggregator);
    EXPECT_EQ(c.output_dir, original.output_dir);
    EXPECT_EQ(c.ranks.all, original.ranks.all);
    EXPECT_EQ(c.ranks.values, original.ranks.values);
    EXPECT_EQ(c.steps.all, original.steps.all);
    EXPECT_EQ(c.steps.values, original.steps.values);
    EXPECT_EQ(c.subtasks, original.subtasks);
    EXPECT_EQ(c.discrete, original.discrete);
    EXPECT_EQ(c.controller, original.controller);
    EXPECT_EQ(c.capture_range, original.capture_range);
    EXPECT_EQ(c.cpu.python_api, original.cpu.python_api);
    EXPECT_EQ(c.gpu.driver_api, original.gpu.driver_api);
    EXPECT_EQ(c.gpu.kernels, original.gpu.kernels);
    EXPECT_EQ(c.buffers.per_thread_kb, original.buffers.per_thread_kb);
    EXPECT_EQ(c.flush.step_grace_ms, original.flush.step_grace_ms);
    EXPECT_EQ(c.correction.enabled, original.correction.enabled);
  }
  ExpectFullConfig(ParseConfig(ConfigToYaml(full.config), "roundtrip.yaml").config);
}

TEST(ConfigTest, KeyHelpListsEveryKey) {
  const std::string help = ConfigKeyHelp();
  for (const char* key :
       {"aggregator: ", "steps: all", "gpu.kernels: true", "flush.interval_ms: 20", "correction.enabled: true"}) {
    EXPECT_THAT(help, HasSubstr(key));
  }
}

// ------------------------------------------------------- one config per run

TEST(RunConfigTest, AdoptRunKeysTakesTheSelectionAndKeepsTheProcesssOwnKeys) {
  const ConfigResult run = ParseConfig(
      "steps: \"2-4\"\nranks: [0]\nsubtasks: [gen]\ndiscrete: true\n"
      "controller: false\ncorrection: {enabled: false, scale: 1.5}\n"
      "buffers: {per_thread_kb: 64}\n",
      "run.yaml");
  const ConfigResult own = ParseConfig("steps: [9]\nbuffers: {per_thread_kb: 4096}\ncapture_range: api\n", "own.yaml");
  ASSERT_TRUE(run.ok() && own.ok());
  Config c = own.config;
  AdoptRunKeys(run.config, &c);
  EXPECT_EQ(c.steps.ToString(), "[2, 3, 4]");
  EXPECT_EQ(c.ranks.ToString(), "[0]");
  EXPECT_EQ(c.subtasks, std::vector<std::string>{"gen"});
  EXPECT_TRUE(c.discrete);
  EXPECT_FALSE(c.controller);
  EXPECT_FALSE(c.correction.enabled);
  EXPECT_EQ(c.correction.scale, 1.5);
  EXPECT_EQ(c.buffers.per_thread_kb, 4096);  // the process's own
  EXPECT_EQ(c.capture_range, "api");
  EXPECT_THAT(RunKeyDifferences(c, run.config), ::testing::IsEmpty());
  EXPECT_THAT(RunKeyDifferences(own.config, run.config),
              ::testing::ElementsAre("ranks: all vs [0]", "steps: [9] vs [2, 3, 4]", "subtasks: [] vs [gen]",
                                     "discrete: false vs true", "controller: true vs false",
                                     "correction.enabled: true vs false", "correction.scale: 1 vs 1.5"));
}

TEST(RunConfigTest, ParseSaysWhichKeysWereSetAndOnlyThoseGoOut) {
  const ConfigResult r = ParseConfig("steps: [2]\ncorrection.scale: 1.5\nflush: {interval_ms: 5}\n", "k.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.keys, (KeySet{"steps", "correction.scale", "flush.interval_ms"}));
  EXPECT_EQ(RunKeysIn(r.keys), (KeySet{"steps", "correction.scale"}));
  const ConfigResult back = ParseConfig(ConfigToYaml(r.config, &r.keys), "back.yaml");
  EXPECT_EQ(back.keys, r.keys);
  EXPECT_EQ(back.config.correction.scale, 1.5);
  EXPECT_TRUE(ParseConfig("", "empty.yaml").keys.empty());
}

TEST(RunConfigTest, SelectsProcessByRoleAndRank) {
  Config c = ParseConfig("ranks: [1]\ncontroller: false\n", "c.yaml").config;
  EXPECT_FALSE(SelectsProcess(c, true, -1));
  EXPECT_TRUE(SelectsProcess(c, false, 1));
  EXPECT_FALSE(SelectsProcess(c, false, 0));
  EXPECT_FALSE(SelectsProcess(c, false, -1));  // unknown rank counts as 0
  EXPECT_TRUE(SelectsProcess(Config(), false, -1));
}

TEST(RunConfigTest, EndpointRuleFirstExplicitThenTheConfigsUnlessAuto) {
  Config c;
  EXPECT_EQ(ResolveEndpoint({}, c), "");
  EXPECT_EQ(ResolveEndpoint({"", "auto"}, c), "");
  c.aggregator = "tcp://cfg:1";
  EXPECT_EQ(ResolveEndpoint({"", "auto"}, c), "tcp://cfg:1");
  EXPECT_EQ(ResolveEndpoint({"", "tcp://job:2", "tcp://later:3"}, c), "tcp://job:2");
  EXPECT_EQ(ResolveEndpoint({"tcp://env:4"}, c), "tcp://env:4");
}

TEST(StepsTest, NumberingIsThePayloadWhenNonNegativeElseTheNextOne) {
  EXPECT_EQ(steps::Number(true, 7, 3), 7);
  EXPECT_EQ(steps::Number(true, 0, 3), 0);
  EXPECT_EQ(steps::Number(false, 7, 3), 3);                         // a start/end range's id
  EXPECT_EQ(steps::Number(true, static_cast<uint64_t>(-1), 3), 3);  // negative: numbered in order
}

TEST(StepsTest, WorkersAreArmedAStepAheadTheControllerOnlyForItsStep) {
  const IntSelection s = ParseConfig("steps: [3]\n", "s.yaml").config.steps;
  std::vector<int64_t> workers, controller;
  for (int64_t n = 1; n <= 4; ++n) {
    if (steps::WorkersArmedDuring(s, n)) workers.push_back(n);
    if (steps::ControllerArmedDuring(s, n)) controller.push_back(n);
  }
  EXPECT_EQ(workers, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(controller, (std::vector<int64_t>{3}));
  EXPECT_TRUE(steps::WorkersArmedBefore(s, 3) && steps::ControllerArmedBefore(s, 3));
  EXPECT_FALSE(steps::WorkersArmedBefore(s, 4) || steps::ControllerArmedBefore(s, 4));
}

// The one merge of config layers (config.h MergeConfigLayers), as Python's
// rlscope_ray.init, the Ray plugin and the verl plugin use it.
TEST(ConfigLayersTest, LaterLayersWinKeyByKeyAndSectionsMerge) {
  const ConfigResult r = MergeConfigLayers({{"steps: [2, 3]\nflush: {step_grace_ms: 100}\n", "run.yaml"},
                                            {"{\"flush\": {\"interval_ms\": 5}, \"steps\": \"4-5\"}", "actor", false}});
  ASSERT_TRUE(r.ok()) << r.errors[0];
  EXPECT_EQ(r.config.steps.values, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(r.config.flush.step_grace_ms, 100);
  EXPECT_EQ(r.config.flush.interval_ms, 5);
  EXPECT_EQ(r.keys, (KeySet{"steps", "flush.step_grace_ms", "flush.interval_ms"}));
  EXPECT_EQ(ConfigToJson(r.config, &r.keys), "{\"steps\":[4,5],\"flush\":{\"interval_ms\":5,\"step_grace_ms\":100}}");
}

TEST(ConfigLayersTest, EveryLayersErrorsNameItAGeneratedOneWithoutLineAndColumn) {
  const ConfigResult r = MergeConfigLayers({{"ranks: [0, -2]\n", "a.yaml"},
                                            {"{\"stepz\": [1]}", "runtime_env['rlscope']", false},
                                            {"discrete: true", "b.yaml"}});
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0], "a.yaml:1:8: ranks: -2 is negative (values are >= 0)");  // the list's line and column
  EXPECT_EQ(r.errors[1], "runtime_env['rlscope']: stepz: unknown key (did you mean 'steps'?)");
  EXPECT_TRUE(r.config.discrete);  // a valid layer after them still counts
}

TEST(ConfigLayersTest, JsonIsTypedAndEveryKeyRoundTrips) {
  Config c;
  c.output_dir = "a \"quoted\" dir\n";
  c.correction.scale = 1.04;
  c.ranks.all = false;
  c.ranks.values = {0, 3};
  c.attribution.simulator = {"mujoco", "gymnasium.*"};
  const std::string json = ConfigToJson(c);
  EXPECT_THAT(json, ::testing::HasSubstr("\"output_dir\":\"a \\\"quoted\\\" dir\\u000a\""));
  EXPECT_THAT(json, ::testing::HasSubstr("\"ranks\":[0,3],\"steps\":\"all\""));
  EXPECT_THAT(json, ::testing::HasSubstr("\"scale\":1.04"));
  EXPECT_THAT(json, ::testing::HasSubstr("\"discrete\":false"));
  const ConfigResult back = ParseConfig(json, "json");  // JSON is YAML: every key reads back as it was
  ASSERT_TRUE(back.ok()) << back.errors[0];
  EXPECT_EQ(ConfigToYaml(back.config), ConfigToYaml(c));
}

}  // namespace
}  // namespace rlscope

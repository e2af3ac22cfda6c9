// Whole-process attribution's collector side, outside a signal handler: the
// native stack walk (collector/native_stack.h) over constructed stacks whose
// words are real return addresses, and the off-CPU reason of a thread from
// its /proc text (collector/thread_states.h).
#include <gtest/gtest.h>

#include <math.h>
#include <stdlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collector/native_stack.h"
#include "collector/safe_read.h"
#include "collector/thread_states.h"
#include "native/string_table.h"

namespace rlscope {
namespace {

// A return address in this executable: where ReturnAddress returns to.
__attribute__((noinline)) uint64_t ReturnAddress() {
  uint64_t a = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  asm volatile("" : "+r"(a));  // not a tail call
  return a;
}

// A return address in libc: qsort calls the comparator.
uint64_t g_libc_return = 0;
int Compare(const void* a, const void* b) {
  g_libc_return = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

std::string Base(const char* path) {
  const std::string p = path != nullptr ? path : "";
  return p.substr(p.rfind('/') + 1);
}

class NativeStackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(FaultGuard::Install(&why)) << why;
    int v[3] = {3, 1, 2};
    qsort(v, 3, sizeof(int), Compare);
    ASSERT_NE(g_libc_return, 0u);
    exe_return_ = ReturnAddress();
    map_.Refresh(&strings_);
  }
  std::vector<std::string> Objects(const NativeChain& c) {
    std::vector<std::string> out;
    for (int i = 0; i < c.n; ++i) out.push_back(Base(strings_.Get(map_.ObjectName(c.objects[i]))));
    return out;
  }
  StringTable strings_;
  CodeMap map_;
  uint64_t exe_return_ = 0;
  const uint64_t leaf_ = reinterpret_cast<uint64_t>(static_cast<double (*)(double)>(&::sin));  // an instruction in libm
};

TEST_F(NativeStackTest, AScanFindsTheReturnAddressesOfCodeWithoutFramePointers) {
  int heap = 0;
  // Locals, a heap pointer and a small integer around two return addresses.
  std::vector<uint64_t> stack = {7, reinterpret_cast<uint64_t>(&heap), g_libc_return, 0, 42, exe_return_, 1};
  NativeChain chain;
  SafeReadScope scope(nullptr);
  const auto begin = reinterpret_cast<uint64_t>(stack.data());
  ASSERT_TRUE(map_.WalkFrom(leaf_, begin, /*fp=*/0, &chain, begin + stack.size() * 8));
  EXPECT_EQ(Objects(chain), (std::vector<std::string>{"libm.so.6", "libc.so.6", "native_stack_test"}));
  EXPECT_TRUE(chain.scanned);
  EXPECT_FALSE(chain.frame_pointers);
  // The interned chain of the callers, as the wire carries it.
  const std::string callers = strings_.Get(map_.ChainName(chain.objects[0], chain.PackedCallers(), &strings_));
  EXPECT_NE(callers.find("libc.so.6\n"), std::string::npos) << callers;
  EXPECT_NE(callers.find("native_stack_test"), std::string::npos) << callers;
}

TEST_F(NativeStackTest, NothingAtOrAboveTheStacksEndIsRead) {
  std::vector<uint64_t> stack = {0, g_libc_return, exe_return_};
  const auto begin = reinterpret_cast<uint64_t>(stack.data());
  NativeChain chain;
  SafeReadScope scope(nullptr);
  ASSERT_TRUE(map_.WalkFrom(leaf_, begin, 0, &chain, begin + 16));  // the stack ends before exe_return_
  EXPECT_EQ(Objects(chain), (std::vector<std::string>{"libm.so.6", "libc.so.6"}));
}

TEST_F(NativeStackTest, AFramePointerChainIsFollowedAndNamesEachObjectOnce) {
  // Two frames: [fp] = the caller's frame pointer, [fp + 8] its return address.
  std::vector<uint64_t> stack(16, 0);
  const auto at = [&](size_t i) { return reinterpret_cast<uint64_t>(&stack[i]); };
  stack[4] = at(8), stack[5] = g_libc_return;
  stack[8] = at(12), stack[9] = g_libc_return;  // libc again: named once
  stack[12] = 0, stack[13] = exe_return_;       // the outermost frame
  NativeChain chain;
  SafeReadScope scope(nullptr);
  ASSERT_TRUE(map_.WalkFrom(leaf_, at(0), at(4), &chain, at(0) + stack.size() * 8));
  EXPECT_EQ(Objects(chain), (std::vector<std::string>{"libm.so.6", "libc.so.6", "native_stack_test"}));
  EXPECT_TRUE(chain.frame_pointers);
}

TEST_F(NativeStackTest, AnUnreadableStackIsAShortChainNotAFault) {
  NativeChain chain;
  SafeReadScope scope(nullptr);
  ASSERT_TRUE(map_.WalkFrom(leaf_, /*sp=*/16, /*fp=*/24, &chain));  // page zero
  EXPECT_EQ(Objects(chain), (std::vector<std::string>{"libm.so.6"}));
  EXPECT_EQ(chain.failed_reads, 3);  // the scan below the frame pointer, the frame, the scan above: each a fault caught
  NativeChain none;
  EXPECT_FALSE(map_.WalkFrom(/*ip=*/16, 16, 0, &none));  // a leaf in no object: not walked
  EXPECT_EQ(none.n, 0);
}

TEST(ThreadStates, AWaitingThreadsReasonIsTheSystemCallItWaitsIn) {
  const uint64_t gil = 0x7f0000001000, gil_end = gil + 0x100;
  auto look = [&](const std::string& state, const std::string& syscall) {
    return ClassifyThread("4242 (py (worker) 1) " + state + " 1 2 3", syscall, gil, gil_end);
  };
  EXPECT_TRUE(look("R", "").running);
  auto reason = [&](const std::string& state, const std::string& syscall) { return look(state, syscall).reason; };
  EXPECT_EQ(reason("S", "202 0x7f0000001040 0x189 0x0 0x0 0x0 0x0 0x7ffd 0x7f12"), OffCpuReason::kGil);
  EXPECT_EQ(reason("S", "202 0x55d000000040 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f12"), OffCpuReason::kLock);
  EXPECT_EQ(reason("S", "7 0x1 0x1 0x14 0x0 0x0 0x0 0x7ffd 0x7f12"), OffCpuReason::kPoll);
  EXPECT_EQ(reason("S", "232 0x5 0x1 0x14 0x0 0x0 0x0 0x7ffd 0x7f12"), OffCpuReason::kPoll);
  EXPECT_EQ(reason("S", "0 0x3 0x7ffd 0x1 0x0 0x0 0x0 0x7ffd 0x7f12"), OffCpuReason::kIo);
  EXPECT_EQ(reason("S", "230 0x1 0x0 0x7ffd 0x0 0x0 0x0 0x7ffd 0x7f12"), OffCpuReason::kSleep);
  EXPECT_EQ(reason("S", "61 0xffffffff 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f12"), OffCpuReason::kOther);
  EXPECT_EQ(reason("D", "running"), OffCpuReason::kIo);  // uninterruptible: the disk
  EXPECT_EQ(reason("S", ""), OffCpuReason::kOther);      // unreadable
}

}  // namespace
}  // namespace rlscope

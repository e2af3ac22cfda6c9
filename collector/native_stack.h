// The native stack of a sampled thread, as cross-stack attribution needs it:
// the shared objects its frames are in, from the interrupted instruction
// outwards, each named once (libc's memcpy called by libtorch: libc, then
// libtorch), so the aggregator can take the first that names a category.
//
// Two halves:
//  - CodeMap::Refresh (flush thread): the process's executable segments, each
//    with an object id that stays the same for the process's life, published
//    to signal handlers as an immutable sorted table behind an atomic
//    pointer. A table replaced is freed once no handler is in a walk (a
//    counter the handler holds across its walk; a handler stuck in one, a
//    thread stopped in a debugger, leaves it allocated).
//  - CodeMap::Walk (signal handler, on the sampled thread): the leaf's object,
//    then the return addresses of the frames outwards: the frame-pointer
//    chain from the interrupted frame pointer where it validates (each frame
//    above the one before, within 1 MiB, its return address in code), and a
//    scan of the stack where it does not (frames of code built without frame
//    pointers, most of libc, libm, CPython and libtorch): the words from the
//    stack pointer up, kScanBytes at most, that point into code just after a
//    call instruction (the scan of crash reporters such as Breakpad). A
//    scan can take a stale return address left in a frame's locals for a
//    frame; the walk says which it used (frame pointers, scan) per sample.
//    Neither goes above the thread's stack: glibc puts a thread's
//    descriptor (pthread_self) just above its stack, and the main thread's
//    stack ends at __libc_stack_end, so a shallow stack is not read past
//    its end (a fault there costs microseconds).
//    Every read of the stack and of code goes through SafeRead (a fault is a
//    shorter chain, never a crash); no lock, allocation or system call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "native/string_table.h"

namespace rlscope {

// A walked stack: object ids (CodeMap) from the leaf outwards, distinct.
struct NativeChain {
  static constexpr int kMaxObjects = 5;  // the leaf and 4 callers: one record's fields
  uint16_t objects[kMaxObjects] = {};
  int n = 0;
  bool frame_pointers = false;  // the frame-pointer chain gave at least one caller
  bool scanned = false;         // the scan gave at least one caller
  int failed_reads = 0;         // reads that failed (each a fault the guard caught)
  // Adds `id` unless it is in the chain already; false once full.
  bool Add(uint16_t id) {
    for (int i = 0; i < n; ++i) {
      if (objects[i] == id) return true;
    }
    if (n == kMaxObjects) return false;
    objects[n++] = id;
    return true;
  }
  // The callers (objects 1..4) packed 16 bits each into a record's value;
  // the leaf goes in its name (CodeMap::Unpack reverses both).
  uint64_t PackedCallers() const {
    uint64_t v = 0;
    for (int i = 1; i < n; ++i) v |= static_cast<uint64_t>(objects[i]) << (16 * (i - 1));
    return v;
  }
};

class CodeMap {
 public:
  static constexpr size_t kScanBytes = 4096;  // of the stack above the stack pointer, at most
  static constexpr int kMaxFrames = 64;       // frame-pointer steps, at most
  static constexpr size_t kMaxObjectIds = 65535;

  CodeMap() = default;
  ~CodeMap();
  CodeMap(const CodeMap&) = delete;
  CodeMap& operator=(const CodeMap&) = delete;

  // Flush thread: rebuilds and publishes the table when objects were loaded
  // or unloaded since the last call (dl_iterate_phdr's counters), naming
  // objects in `strings`. Cheap when nothing changed.
  void Refresh(StringTable* strings);
  // Signal handler: the chain of `ucontext`'s stack; false (chain empty)
  // before the first table or when the leaf is in no known object.
  bool Walk(const void* ucontext, NativeChain* chain) const;
  // Flush thread: the interned path of object `id` (0 unknown), and the
  // interned '\n'-joined chain of a record's name (leaf id) and packed
  // callers (kFlagNativeStack's wire value).
  uint32_t ObjectName(uint32_t id) const { return id < names_.size() ? names_[id] : 0; }
  uint32_t ChainName(uint32_t leaf, uint64_t callers, StringTable* strings);
  // Flush thread: the object holding `address` in the current table (its
  // interned path; 0 none): samples taken before a table existed.
  uint32_t NameOf(uint64_t address) const;

  // Walks from `ip` with stack pointer `sp` and frame pointer `fp`, reading
  // no stack at or above `stack_end` (0: kScanBytes above sp at most); Walk
  // calls it with the interrupted registers, tests with constructed stacks.
  bool WalkFrom(uint64_t ip, uint64_t sp, uint64_t fp, NativeChain* chain, uint64_t stack_end = 0) const;

 private:
  struct Range {
    uint64_t begin, end;
    uint16_t object;
  };
  struct Table {
    std::vector<Range> ranges;  // sorted by begin, disjoint
    uint64_t lo = 0, hi = 0;    // all code lies in [lo, hi)
    // The object holding `address`, + 1; 0 none (handler-safe: no allocation).
    uint32_t Find(uint64_t address) const;
  };
  void Publish(Table* table);

  std::atomic<const Table*> current_{nullptr};
  mutable std::atomic<int> in_walk_{0};
  std::vector<const Table*> retired_;  // replaced while a handler was in a walk
  uint64_t adds_ = ~uint64_t{0}, subs_ = ~uint64_t{0};
  std::unordered_map<std::string, uint16_t> ids_;             // path -> object id (from 1)
  std::vector<uint32_t> names_{0};                            // object id -> interned path
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> chains_;  // (leaf, callers) -> interned chain
};

}  // namespace rlscope

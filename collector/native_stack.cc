#include "collector/native_stack.h"

#include <link.h>
#include <pthread.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "collector/safe_read.h"

extern "C" void* __libc_stack_end;  // glibc: the main thread's stack end (its argc)

namespace rlscope {
namespace {

constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 20;  // a frame-pointer step larger than this is not one

// Whether the bytes before `ret` end in a call instruction, so `ret` can be
// a return address: call rel32 (E8), or an indirect call (FF /2) through a
// register or memory operand of 2 to 7 bytes (ModRM reg field 2), with or
// without a REX prefix before it. A few false positives; no false negatives
// for code compilers emit.
bool IsCallSite(uint64_t ret, int* failed_reads) {
  uint8_t b[8];
  if (ret < 8) return false;
  if (!SafeRead(b, reinterpret_cast<const void*>(ret - 8), sizeof(b))) {
    ++*failed_reads;
    return false;
  }
  if (b[3] == 0xE8) return true;  // ret - 5
  for (int k : {2, 3, 4, 6, 7}) {
    const uint8_t op = b[8 - k], modrm = b[9 - k];
    if (op == 0xFF && (modrm & 0x38) == 0x10) return true;
  }
  return false;
}

}  // namespace

uint32_t CodeMap::Table::Find(uint64_t address) const {
  if (address < lo || address >= hi) return 0;
  size_t low = 0, high = ranges.size();
  while (low < high) {  // the first range beginning after address
    const size_t mid = (low + high) / 2;
    if (ranges[mid].begin <= address)
      low = mid + 1;
    else
      high = mid;
  }
  if (low == 0) return 0;
  const Range& r = ranges[low - 1];
  return address < r.end ? r.object : 0;
}

CodeMap::~CodeMap() {
  // Handlers that could still walk are gone with the sampler (no timer
  // outlives the collector); a handler stuck in a walk keeps its table.
  if (in_walk_.load() == 0) {
    delete current_.exchange(nullptr);
    for (const Table* t : retired_) delete t;
  }
}

// The end of the calling thread's stack above `sp`, or 0 when not known:
// the thread's glibc descriptor, which sits just above a stack glibc
// allocated; for the main thread, __libc_stack_end. (Reads the thread
// pointer and a variable: async-signal-safe.)
uint64_t StackEnd(uint64_t sp) {
  constexpr uint64_t kMaxStack = uint64_t{1} << 30;
  const auto self = static_cast<uint64_t>(pthread_self());
  if (self > sp && self - sp < kMaxStack) return self;
  const auto main_end = reinterpret_cast<uint64_t>(__libc_stack_end);
  if (main_end > sp && main_end - sp < kMaxStack) return main_end;
  return 0;
}

bool CodeMap::Walk(const void* ucontext, NativeChain* chain) const {
#if defined(__x86_64__)
  const auto& g = static_cast<const ucontext_t*>(ucontext)->uc_mcontext.gregs;
  const auto sp = static_cast<uint64_t>(g[REG_RSP]);
  return WalkFrom(static_cast<uint64_t>(g[REG_RIP]), sp, static_cast<uint64_t>(g[REG_RBP]), chain, StackEnd(sp));
#else
  (void)ucontext;
  (void)chain;
  return false;
#endif
}

bool CodeMap::WalkFrom(uint64_t ip, uint64_t sp, uint64_t fp, NativeChain* chain, uint64_t stack_end) const {
  in_walk_.fetch_add(1);  // seq_cst: see Publish
  const Table* t = current_.load();
  const uint32_t leaf = t != nullptr ? t->Find(ip) : 0;
  if (leaf == 0) {
    in_walk_.fetch_sub(1);
    return false;
  }
  chain->Add(static_cast<uint16_t>(leaf));
  const uint64_t scan_end = stack_end > sp ? std::min(sp + kScanBytes, stack_end) : sp + kScanBytes;
  const uint64_t frames_end = stack_end > sp ? stack_end : UINT64_MAX;
  // The words of [from, to) that are return addresses, in stack order (outwards).
  auto scan = [&](uint64_t from, uint64_t to) {
    uint64_t words[32];
    for (uint64_t a = from & ~uint64_t{7}; a + 8 <= to && chain->n < NativeChain::kMaxObjects; a += sizeof(words)) {
      const size_t n = std::min<uint64_t>(sizeof(words), to - a) / 8;
      if (!SafeRead(words, reinterpret_cast<const void*>(a), n * 8)) {
        ++chain->failed_reads;
        return;
      }
      for (size_t i = 0; i < n; ++i) {
        const uint32_t obj = t->Find(words[i]);
        if (obj == 0 || !IsCallSite(words[i], &chain->failed_reads)) continue;
        chain->scanned = true;
        if (!chain->Add(static_cast<uint16_t>(obj))) return;
      }
    }
  };
  uint64_t scanned_to = sp;
  if (fp >= sp && fp - sp < kMaxFrameBytes && (fp & 7) == 0) {
    // Frames below the chain: functions that set up no frame (a leaf in libm).
    scan(sp, std::min(fp, scan_end));
    scanned_to = std::min(fp, scan_end);
    uint64_t f = fp;
    for (int step = 0; step < kMaxFrames && chain->n < NativeChain::kMaxObjects && f + 16 <= frames_end; ++step) {
      uint64_t frame[2];  // the caller's frame pointer, the return address
      if (!SafeRead(frame, reinterpret_cast<const void*>(f), sizeof(frame))) {
        ++chain->failed_reads;
        break;
      }
      const uint32_t obj = t->Find(frame[1]);
      if (obj == 0) break;
      chain->frame_pointers = true;
      chain->Add(static_cast<uint16_t>(obj));
      scanned_to = std::max(scanned_to, f + 16);
      const uint64_t next = frame[0];
      if (next <= f || next - f > kMaxFrameBytes || (next & 7) != 0) break;
      f = next;
    }
  }
  // Where the chain stopped (code without frame pointers): the scan goes on.
  if (chain->n < NativeChain::kMaxObjects && scanned_to < scan_end) scan(scanned_to, scan_end);
  in_walk_.fetch_sub(1);
  return true;
}

void CodeMap::Refresh(StringTable* strings) {
  struct Counters {
    uint64_t adds = 0, subs = 0;
  } counters;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
          static_cast<Counters*>(data)->adds = info->dlpi_adds;
          static_cast<Counters*>(data)->subs = info->dlpi_subs;
        }
        return 1;  // the first object carries the counters: stop
      },
      &counters);
  if (counters.adds == adds_ && counters.subs == subs_ && current_.load() != nullptr) return;
  adds_ = counters.adds;
  subs_ = counters.subs;
  struct Walk {
    CodeMap* self;
    Table* table;
    StringTable* strings;
    std::string exe;
  } walk{this, new Table, strings, {}};
  char exe[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  walk.exe = len > 0 ? std::string(exe, static_cast<size_t>(len)) : "(main executable)";
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* w = static_cast<Walk*>(data);
        const std::string path = info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' ? info->dlpi_name : w->exe;
        auto [it, added] = w->self->ids_.emplace(path, 0);
        if (added) {
          if (w->self->names_.size() > kMaxObjectIds) {
            w->self->ids_.erase(it);
            return 0;  // more objects than ids over the process's life: not walked through
          }
          it->second = static_cast<uint16_t>(w->self->names_.size());
          w->self->names_.push_back(w->strings->Intern(path));
        }
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
          const uint64_t begin = info->dlpi_addr + ph.p_vaddr;
          w->table->ranges.push_back({begin, begin + ph.p_memsz, it->second});
        }
        return 0;
      },
      &walk);
  Table* t = walk.table;
  std::sort(t->ranges.begin(), t->ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  if (!t->ranges.empty()) {
    t->lo = t->ranges.front().begin;
    for (const Range& r : t->ranges) t->hi = std::max(t->hi, r.end);
  }
  Publish(t);
}

void CodeMap::Publish(Table* table) {
  retired_.push_back(current_.exchange(table));  // seq_cst, as the handler's counter and load
  // A handler that loaded a retired table entered its walk before the
  // exchange: once the count is seen at 0, none is left in one.
  for (int spin = 0; spin < 100; ++spin) {
    if (in_walk_.load() == 0) {
      for (const Table* t : retired_) delete t;
      retired_.clear();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
}

uint32_t CodeMap::NameOf(uint64_t address) const {
  const Table* t = current_.load();
  return t != nullptr ? ObjectName(t->Find(address)) : 0;
}

uint32_t CodeMap::ChainName(uint32_t leaf, uint64_t callers, StringTable* strings) {
  if (callers == 0) return 0;
  auto [it, added] = chains_.emplace(std::make_pair(leaf, callers), 0);
  if (!added) return it->second;
  std::string joined;
  for (int i = 0; i < NativeChain::kMaxObjects - 1; ++i) {
    const uint32_t id = static_cast<uint32_t>((callers >> (16 * i)) & 0xFFFF);
    if (id == 0) break;
    if (!joined.empty()) joined += '\n';
    joined += strings->Get(ObjectName(id));
  }
  it->second = joined.empty() ? 0 : strings->Intern(joined);
  return it->second;
}

}  // namespace rlscope

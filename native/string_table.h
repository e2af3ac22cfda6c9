// Process-wide string interning: every name on the wire is an id.
//
// Thread-safety: Intern() and the accessors may be called from any thread; the
// table only grows, ids start at 1 and are dense, and a returned `const char*`
// stays valid for the table's lifetime. Interning takes a mutex, so the hot path
// goes through NameCache (per thread, lock-free) first.
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rlscope {

class StringTable {
 public:
  // Returns the id of `s`, adding it if new. Never returns 0.
  uint32_t Intern(std::string_view s);
  // The string of `id`; nullptr for an unknown id.
  const char* Get(uint32_t id) const;
  size_t size() const;
  // Appends (id, string) for ids in [first_id, size] to `out`; returns the
  // next id to ask for. Used by the flush thread to ship new strings once.
  uint32_t CopySince(uint32_t first_id, std::vector<std::pair<uint32_t, std::string>>* out) const;

 private:
  mutable std::mutex mu_;
  std::deque<std::string> strings_;  // strings_[id - 1]; deque keeps c_str stable
  std::unordered_map<std::string_view, uint32_t> ids_;
};

// A per-thread direct-mapped cache from a caller's `const char*` to an id.
// A hit needs the same pointer *and* the same contents, so reused buffers
// (sprintf into a stack array) stay correct. Single thread only.
//
// Hit() is the hot path's check, inline and without a call: a name shorter
// than kInlineBytes is compared as one or two 16-byte loads against the
// entry's copy. It may read past the name's terminator, never past its page
// (a name whose first kInlineBytes cross a page end is left to Lookup),
// which a memory checker such as Valgrind's memcheck may report as a read
// past a heap block; the bytes past the terminator are masked off and never
// decide.
class NameCache {
 public:
  static constexpr size_t kInlineBytes = 32;
  explicit NameCache(StringTable* table) : table_(table) {}
  // True, with the id of `s` in *id, when the entry for it holds it and can
  // say so inline; false: ask Lookup (not cached, a longer name, near a page
  // end, no SSE2). The pointer's page offset is checked once, when Lookup
  // fills the entry.
  inline __attribute__((always_inline)) bool Hit(const char* s, uint32_t* id) const {
    const Entry& e = entries_[Index(s)];
    // inline_ptr is the entry's pointer only where it may be checked
    // inline, else a pointer no caller has (never null).
    if (e.inline_ptr != s) return false;
#if defined(__SSE2__)
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const uint32_t same_lo = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(lo, _mm_load_si128(&e.head[0]))));
    if ((same_lo & e.need[0]) != e.need[0]) return false;
    *id = e.id;
    if (__builtin_expect(e.need[1] == 0, 1)) return true;  // shorter than 16 bytes: one load
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const uint32_t same_hi = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(hi, _mm_load_si128(&e.head[1]))));
    return (same_hi & e.need[1]) == e.need[1];
#else
    (void)id;
    return false;
#endif
  }
  uint32_t Lookup(const char* s) {
    if (s == nullptr) return 0;
    Entry& e = entries_[Index(s)];
    if (e.ptr == s && std::strcmp(e.str, s) == 0) return e.id;
    e.id = table_->Intern(s);
    e.ptr = s;
    e.str = table_->Get(e.id);
    // The inline copy: the name and its terminator, zero-padded; `need`
    // has a bit per byte that must match (0: too long to check inline).
    const size_t len = std::strlen(e.str);
    std::memset(e.head, 0, sizeof(e.head));
    e.inline_ptr = kNotInline;
    if (len < kInlineBytes && (reinterpret_cast<uintptr_t>(s) & 4095) <= 4096 - kInlineBytes) {
      std::memcpy(e.head, e.str, len + 1);
      const uint32_t need = len + 1 == 32 ? UINT32_MAX : (uint32_t{1} << (len + 1)) - 1;
      e.need[0] = static_cast<uint16_t>(need & 0xFFFF);
      e.need[1] = static_cast<uint16_t>(need >> 16);
      e.inline_ptr = s;
    }
    return e.id;
  }

 private:
  static constexpr size_t kSize = 256;
  static constexpr char kNotInlineByte = 0;
  static constexpr const char* kNotInline = &kNotInlineByte;  // an address no caller passes
  static size_t Index(const char* s) { return (reinterpret_cast<uintptr_t>(s) >> 3) & (kSize - 1); }
  struct Entry {
#if defined(__SSE2__)
    __m128i head[2] = {};  // the name's first kInlineBytes, zero-padded
#else
    char head[32] = {};
#endif
    const char* inline_ptr = kNotInline;  // ptr where Hit may check it inline
    const char* ptr = nullptr;
    const char* str = "";
    uint32_t id = 0;  // with need: the entry is 64 bytes (Hit's index is a shift)
    // Bit i of need[h]: byte 16 h + i of head must match (the name and its
    // terminator); need[1] is 0 for a name shorter than 16 bytes.
    uint16_t need[2] = {0, 0};
  };
#if defined(__SSE2__)
  static_assert(sizeof(Entry) == 64, "one cache line per entry; Hit's index is a shift");
#endif
  StringTable* table_;
  Entry entries_[kSize];
};

}  // namespace rlscope

// Process-wide string interning: every name on the wire is an id.
//
// Thread-safety: Intern() and the accessors may be called from any thread; the
// table only grows, ids start at 1 and are dense, and a returned `const char*`
// stays valid for the table's lifetime. Interning takes a mutex, so the hot path
// goes through NameCache (per thread, lock-free) first.
#pragma once

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
  uint32_t CopySince(uint32_t first_id,
                     std::vector<std::pair<uint32_t, std::string>>* out) const;

 private:
  mutable std::mutex mu_;
  std::deque<std::string> strings_;  // strings_[id - 1]; deque keeps c_str stable
  std::unordered_map<std::string_view, uint32_t> ids_;
};

// A per-thread direct-mapped cache from a caller's `const char*` to an id.
// A hit needs the same pointer *and* the same contents (strcmp), so reused
// buffers (sprintf into a stack array) stay correct. Single thread only.
class NameCache {
 public:
  explicit NameCache(StringTable* table) : table_(table) {}
  uint32_t Lookup(const char* s) {
    if (s == nullptr) return 0;
    Entry& e = entries_[(reinterpret_cast<uintptr_t>(s) >> 3) & (kSize - 1)];
    if (e.ptr == s && std::strcmp(e.str, s) == 0) return e.id;
    e.id = table_->Intern(s);
    e.ptr = s;
    e.str = table_->Get(e.id);
    return e.id;
  }

 private:
  static constexpr size_t kSize = 256;
  struct Entry {
    const char* ptr = nullptr;
    const char* str = "";
    uint32_t id = 0;
  };
  StringTable* table_;
  Entry entries_[kSize];
};

}  // namespace rlscope

#include "native/string_table.h"

namespace rlscope {

uint32_t StringTable::Intern(std::string_view s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  strings_.emplace_back(s);
  const uint32_t id = static_cast<uint32_t>(strings_.size());
  ids_.emplace(std::string_view(strings_.back()), id);
  return id;
}

const char* StringTable::Get(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id == 0 || id > strings_.size()) return nullptr;
  return strings_[id - 1].c_str();
}

size_t StringTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return strings_.size();
}

uint32_t StringTable::CopySince(uint32_t first_id, std::vector<std::pair<uint32_t, std::string>>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_id == 0) first_id = 1;
  for (uint32_t id = first_id; id <= strings_.size(); ++id) {
    out->emplace_back(id, strings_[id - 1]);
  }
  return static_cast<uint32_t>(strings_.size()) + 1;
}

}  // namespace rlscope

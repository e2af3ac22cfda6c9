#include "aggregator/process_names.h"

namespace rlscope {

void ProcessNames::Identify(const wire::Hello& hello) {
  hello_ = hello;
  costs_ = CalibratedCosts(hello_.costs);
  BoundIdentity();
}

void ProcessNames::Add(const wire::Batch& batch) {
  for (const auto& [id, s] : batch.strings) strings_[id] = Bounded(s);
  for (const auto& [tid, name] : batch.thread_names) thread_names_[tid] = Bounded(name);
  for (const auto& c : batch.categories) categories_[{c.domain, c.category}] = Bounded(c.name);
}

const char* ProcessNames::String(uint32_t id) const {
  auto it = strings_.find(id);
  return it == strings_.end() ? "" : it->second.c_str();
}

std::string ProcessNames::ThreadName(int64_t tid) const {
  auto it = thread_names_.find(tid);
  return it == thread_names_.end() ? "thread " + std::to_string(tid) : it->second;
}

std::string ProcessNames::CategoryName(uint32_t domain, uint32_t category) const {
  auto it = categories_.find({domain, category});
  return it == categories_.end() ? std::string() : it->second;
}

std::string ProcessNames::Bounded(std::string s) {
  if (s.size() <= kMaxStringBytes) return s;
  ++truncated_strings_;
  const size_t cut = s.size();
  s.resize(kMaxStringBytes);
  while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();  // whole UTF-8 chars
  if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
  s += "...[" + std::to_string(cut) + " bytes]";
  return s;
}

void ProcessNames::BoundIdentity() {
  wire::Identity& id = hello_.identity;
  id.host = Bounded(std::move(id.host));
  id.name = Bounded(std::move(id.name));
  id.role = Bounded(std::move(id.role));
  std::map<std::string, std::string> labels;
  for (auto& [k, v] : id.labels) labels[Bounded(k)] = Bounded(v);
  id.labels = std::move(labels);
  if (hello_.config.size() > 65536) {  // our own YAML is a few KB: this one is read as none
    hello_.config.clear();
    ++truncated_strings_;
  }
}

}  // namespace rlscope

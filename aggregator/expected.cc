#include "aggregator/expected.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace rlscope {
namespace {

std::string Get(const std::map<std::string, std::string>& m, const char* k) {
  auto it = m.find(k);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace

std::vector<ExpectedProcess> NotProfiled(const std::vector<ExpectedProcess>& expected, const ProcessMap& processes) {
  std::vector<ExpectedProcess> missing;
  for (const ExpectedProcess& e : expected) {
    const std::string actor_id = Get(e, "actor_id"), node_id = Get(e, "node_id"), pid = Get(e, "pid");
    bool found = false, node_seen = false;
    for (const auto& [session, p] : processes) {
      const auto& labels = p->identity().labels;
      if (!actor_id.empty() && Get(labels, "actor_id") == actor_id) found = true;
      if (actor_id.empty() && !pid.empty() && std::to_string(p->identity().pid) == pid &&
          (node_id.empty() || Get(labels, "node_id") == node_id)) {
        found = true;
      }
      node_seen |= !node_id.empty() && Get(labels, "node_id") == node_id;
      if (found) break;
    }
    if (found) continue;
    ExpectedProcess out = e;
    if (out.count("reason") == 0) {  // the reporter's own reason wins
      out["reason"] = node_seen ? "its runtime_env asks for profiling and other processes on its node connected, "
                                  "but its collector did not (its worker setup failed: see its log)"
                      : node_id.empty() ? "its runtime_env asks for profiling, but its collector never connected"
                                        : "its runtime_env asks for profiling, but no process on its node connected: "
                                          "the node has no rlscope plugin registered (RAY_RUNTIME_ENV_PLUGINS before "
                                          "`ray start`), or it cannot reach the aggregator";
    }
    missing.push_back(std::move(out));
  }
  return missing;
}

std::string ExpectedList::KeyOf(const ExpectedProcess& e) {
  const std::string actor_id = Get(e, "actor_id");
  return actor_id.empty() ? "pid " + Get(e, "pid") + " on " + Get(e, "node_id") : actor_id;
}

void ExpectedList::Set(const std::vector<ExpectedProcess>& processes, int64_t now_ns) {
  processes_ = processes;
  for (const ExpectedProcess& e : processes_) since_ns_.emplace(KeyOf(e), now_ns);
  stale_ = true;
}

bool ExpectedList::Awaiting(const ProcessMap& processes, int64_t now_ns, int64_t wait_ns) const {
  // Matching the list against the processes costs their product: only after
  // a change to either (ProcessesChanged, Set).
  if (stale_) {
    missing_since_ns_.clear();
    for (const ExpectedProcess& e : NotProfiled(processes_, processes)) {
      if (auto it = since_ns_.find(KeyOf(e)); it != since_ns_.end()) missing_since_ns_.push_back(it->second);
    }
    stale_ = false;
  }
  return std::any_of(missing_since_ns_.begin(), missing_since_ns_.end(),
                     [&](int64_t since) { return now_ns - since < wait_ns; });
}

}  // namespace rlscope

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
}

bool ExpectedList::Awaiting(const ProcessMap& processes, int64_t now_ns, int64_t wait_ns) const {
  // Matching the list against the processes costs their product: only while
  // one of the list is recent enough to be waited for.
  if (std::none_of(since_ns_.begin(), since_ns_.end(), [&](const auto& e) { return now_ns - e.second < wait_ns; })) {
    return false;
  }
  for (const ExpectedProcess& e : NotProfiled(processes_, processes)) {
    auto it = since_ns_.find(KeyOf(e));
    if (it != since_ns_.end() && now_ns - it->second < wait_ns) return true;
  }
  return false;
}

}  // namespace rlscope

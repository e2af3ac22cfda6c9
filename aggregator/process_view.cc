#include "aggregator/process_view.h"

#include "native/names.h"

namespace rlscope {

std::string ProcessName(const ProcessView& p) {
  const wire::Identity& id = p.identity();
  auto it = id.labels.find("actor_class");
  if (it != id.labels.end() && !it->second.empty()) return it->second;
  // A process a profiled actor started (collector/children.h).
  it = id.labels.find(names::kLabelParentActor);
  return it != id.labels.end() && !it->second.empty() ? it->second + " child: " + id.name : id.name;
}

std::string ProcessLabel(const ProcessView& p) {
  const wire::Identity& id = p.identity();
  auto label_of = [&](const char* key) {
    auto it = id.labels.find(key);
    return it == id.labels.end() ? std::string() : it->second;
  };
  const std::string node_ip = label_of("node_ip");
  if (node_ip.empty()) {  // not a Ray process: host / name (role, rank R) / pid P
    std::string label = id.host + " / " + ProcessName(p) + " (" + id.role;
    if (id.rank >= 0) label += ", rank " + std::to_string(id.rank);
    return label + ") / pid " + std::to_string(id.pid);
  }
  // A Ray process: node 10.0.0.2 [node id prefix] / Learner (rank 0) / pid 4242
  std::string label = "node " + node_ip;
  const std::string node_id = label_of("node_id");
  if (!node_id.empty()) label += " [" + node_id.substr(0, 8) + "]";
  label += " / " + ProcessName(p);
  if (id.role == "controller")
    label += " (controller)";
  else if (id.rank >= 0)
    label += " (rank " + std::to_string(id.rank) + ")";
  return label + " / pid " + std::to_string(id.pid);
}

}  // namespace rlscope

#include "aggregator/spool_takeup.h"

#include <unistd.h>

#include <vector>

#include "aggregator/aggregator.h"
#include "native/spool_file.h"

namespace rlscope {

void TakeUpSpoolFiles(Aggregator& agg, const std::string& dir, int64_t now_ns) {
  if (dir.empty()) return;
  for (const std::string& path : ListSpoolFiles(dir)) {
    std::vector<std::string> messages;
    std::string error;
    RecoveredCounts counts;
    if (!ReadSpoolFile(path, &messages, &error)) {
      agg.NoteUnreadableSpool(path, error);  // left in place; said once
      continue;
    }
    const std::string peer = kSpoolPeerPrefix + path.substr(path.rfind('/') + 1);
    const uint64_t events_before = agg.stats().events;
    uint64_t taken = 0;
    for (const std::string& m : messages) {
      if (agg.OnFrame(m.data(), m.size(), now_ns, peer) != 0) ++taken;
    }
    counts.files = 1;
    counts.processes = taken > 0 ? 1 : 0;
    counts.events = agg.stats().events - events_before;
    agg.CountRecovered(counts, path);
    unlink(path.c_str());
  }
}

}  // namespace rlscope

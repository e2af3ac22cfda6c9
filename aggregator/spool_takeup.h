// Taking up what collectors left on this node's disk at exit (native/
// spool_file.h): each file's messages are fed to the aggregator in order, as
// if its process had sent them on a connection of its own (peer
// "spool:<file name>"), then the file is removed. Duplicates of what the
// aggregator applied already are dropped by admission (Admission::FirstTime),
// events of steps already written count as late, as for any replay.
//
// The daemon takes up its run's directory (by the run's key) when it starts,
// every second while it serves, and once more before it finishes;
// `--recover DIR` (rlscope-ray recover) takes up DIR into a run directory and
// finishes. A node's relay forwards its node's files to the root instead
// (relay_main.cc), using ReadSpoolFile the same way.
#pragma once

#include <cstdint>
#include <string>

namespace rlscope {

class Aggregator;

// Takes up every complete spool file in `dir` (none: nothing). Counts go to
// the aggregator's run.json (`recovered`); an unreadable file is counted,
// said and left where it is.
void TakeUpSpoolFiles(Aggregator& agg, const std::string& dir, int64_t now_ns);

}  // namespace rlscope

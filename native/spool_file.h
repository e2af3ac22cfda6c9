// What a collector leaves on its node's disk at exit when the aggregator
// did not take it (collector/link.cc Link::Stop), and how the aggregator, a
// node's relay and `rlscope-ray recover` find and read it back.
//
// Layout: <root>/<run key>/<pid>-<session>.spool, where <root> is
// $RLSCOPE_SPOOL_DIR or <$TMPDIR or /tmp>/rlscope-spool-<uid>, and <run key>
// the digest of the run's secret (RunKey; "no-secret" without one).
// Directories 0700, files 0600: the user's only, like the run directory.
//
// A file is the process's messages as it would have sent them, in order:
// its Hello, a batch re-sending every name, every batch the aggregator had
// not released, and its Bye. Format: the line kSpoolMagic, then per message
// a 4-byte little-endian length and the encoded message (wire.h). A file
// appears under its final name only once complete (written as .tmp, then
// renamed), so a reader never sees half of one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlscope {

inline constexpr char kSpoolMagic[] = "RLSCOPE-SPOOL 1\n";
inline constexpr char kSpoolSuffix[] = ".spool";
// Whoever takes a file up feeds it as a connection of its own named this
// followed by the file's name (aggregator/spool_takeup.cc, relay_main.cc).
inline constexpr char kSpoolPeerPrefix[] = "spool:";

// A 64-bit digest of the run's secret, hex; "" without one. Names the run
// (run.json resume.run_key, the spool directory): an identifier, not a
// credential.
std::string RunKey(const std::string& secret);
// $RLSCOPE_SPOOL_DIR, else <$TMPDIR or /tmp>/rlscope-spool-<uid>.
std::string SpoolRoot();
// The run's directory under SpoolRoot(): its key, or "no-secret".
std::string SpoolDirFor(const std::string& run_key);

struct SpoolWriteResult {
  bool ok = false;
  size_t messages = 0;  // written (all of them when ok)
  std::string path;     // the file, when ok
  std::string error;    // what failed and where, when not ok
};
// Writes `messages` to <dir>/<name>.spool (creating dir, 0700). The space is
// reserved first (posix_fallocate), so a full disk fails before anything is
// left half written; nothing is left on failure.
SpoolWriteResult WriteSpoolFile(const std::string& dir, const std::string& name,
                                const std::vector<std::string>& messages);
// The messages of one file; false with `error` for an unreadable or
// malformed one.
bool ReadSpoolFile(const std::string& path, std::vector<std::string>* messages, std::string* error);
// The complete spool files in `dir`, oldest name first (none when it does
// not exist).
std::vector<std::string> ListSpoolFiles(const std::string& dir);

}  // namespace rlscope

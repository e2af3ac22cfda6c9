// Writing the run's files: directories made 0700, files 0600 (a profile's
// names, timings and identities are its user's only), each file written
// under a temporary name and renamed when complete, so a reader never sees
// half of it.
#pragma once

#include <string>
#include <string_view>

#include "aggregator/exporter.h"

namespace rlscope {

// Makes `path` and its parents (0700); false (errno) when one cannot be.
bool MakeDirs(const std::string& path);

// Appends `data` (whole lines) to `path` (created 0600) whole or not at
// all: a failed write is cut off again, so the file holds only what was
// appended whole; a last line a crash cut short is ended first, so the data
// starts on a line of its own. Each call opens and closes the file (a close
// that fails, as on a full network disk, fails the append). False with
// `error` set on any failure.
bool AppendWhole(const std::string& path, std::string_view data, std::string* error);

// A file written under `path`.tmp and renamed to `path` by Commit. POSIX
// calls, each checked (a full disk shows at write or close): on any failure
// the temporary file goes at once, what was there before stays, and
// error() says why. One thread at a time.
class AtomicFile : public OutputSink {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile() override;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Appends `data` (nothing once something failed).
  void Write(std::string_view data) override;
  // Closes and renames the file into place; false (error()) on any failure.
  bool Commit();
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  void Fail(const std::string& what);

  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::string error_;
};

}  // namespace rlscope

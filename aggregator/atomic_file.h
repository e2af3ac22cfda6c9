// Writing the run's files: directories made 0700, files 0600 (a profile's
// names, timings and identities are its user's only), each file written
// under a temporary name and renamed when complete, so a reader never sees
// half of it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "aggregator/exporter.h"

namespace rlscope {

// Makes `path` and its parents (0700); false (errno) when one cannot be.
bool MakeDirs(const std::string& path);

// A log of whole records at `path` (created 0600), appended to one record
// at a time and kept open between them (a run's figures.jsonl takes a line
// a step, every step when always on: opening it each time cost five system
// calls and the file system's lookup a line). A record is appended whole or
// not at all: a failed write is cut off again, so the file holds only whole
// records; a record a crash cut short before the file was opened is ended
// first, so the next stands on a line of its own. After a failure the file
// is opened again at the next record. The aggregator is its only writer.
// One thread at a time.
class AppendFile {
 public:
  explicit AppendFile(std::string path) : path_(std::move(path)) {}
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  // False with `error` set on any failure.
  bool Append(std::string_view data, std::string* error);
  const std::string& path() const { return path_; }

 private:
  bool Open(std::string* error);
  void Close();

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;  // the file's size: where a failed record is cut off
};

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

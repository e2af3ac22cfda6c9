#include "aggregator/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rlscope {

bool MakeDirs(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;  // most calls: one look, no mkdir each level
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty() && mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
    if (i < path.size()) cur.push_back(path[i]);
  }
  return true;
}

bool AppendWhole(const std::string& path, std::string_view data, std::string* error) {
  // Read too: the end of a line a crash cut short is read back (pread).
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  bool ok = fstat(fd, &st) == 0;
  // A line cut short by a crash before this append: ended, so what comes
  // now stands on a line of its own (the reader skips the broken one).
  char last = '\n';
  if (ok && st.st_size > 0 && pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') {
    ok = write(fd, "\n", 1) == 1;
    if (ok) ++st.st_size;
  }
  const bool sized = ok;
  for (size_t done = 0; ok && done < data.size();) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (!ok) {
    *error = "cannot append to " + path + ": " + std::strerror(errno);
    if (sized && ftruncate(fd, st.st_size) != 0) *error += " (and a part of what was appended is left)";
  }
  if (close(fd) != 0 && ok) {
    *error = "cannot close " + path + ": " + std::strerror(errno);
    ok = false;
  }
  return ok;
}

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp") {
  fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0) Fail("cannot create");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(tmp_.c_str());
}

void AtomicFile::Write(std::string_view data) {
  for (size_t done = 0; ok() && done < data.size();) {
    const ssize_t n = write(fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail("cannot write");
    done += static_cast<size_t>(n);
  }
}

bool AtomicFile::Commit() {
  if (!ok()) return false;
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) return Fail("cannot write"), false;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) return Fail("cannot rename"), false;
  committed_ = true;
  return true;
}

// The temporary file goes at once (a full disk gets its space back while
// the rest of the step is still encoded, for nothing).
void AtomicFile::Fail(const std::string& what) {
  if (error_.empty()) error_ = what + " " + tmp_ + ": " + std::strerror(errno);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(tmp_.c_str());
}

}  // namespace rlscope

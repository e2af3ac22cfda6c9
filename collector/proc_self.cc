#include "collector/proc_self.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

namespace rlscope {

namespace {

std::vector<int64_t> ListFrom(DIR* dir) {
  std::vector<int64_t> tids;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(std::strtoll(e->d_name, nullptr, 10));
  }
  std::sort(tids.begin(), tids.end());
  return tids;
}

}  // namespace

std::vector<int64_t> ListThreads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return {};
  std::vector<int64_t> tids = ListFrom(dir);
  closedir(dir);
  return tids;
}

ThreadLister::~ThreadLister() {
  if (dir_ != nullptr) closedir(dir_);
}

std::vector<int64_t> ThreadLister::List() {
  if (dir_ == nullptr) {
    dir_ = opendir("/proc/self/task");
    if (dir_ == nullptr) return {};
  } else {
    rewinddir(dir_);  // the kernel lists the threads afresh from the start
  }
  return ListFrom(dir_);
}

std::string ReadThreadName(int64_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string line;
  std::getline(in, line);
  return line;
}

bool ThreadBlocksSignal(int64_t tid, int sig) {
  // The whole status (about 1.5 KB; more with a long Groups: line), read
  // to its end with no stream: for the threads that block it, this is
  // looked at again while they do.
  char path[64], buf[16384];
  std::snprintf(path, sizeof(path), "/proc/self/task/%lld/status", static_cast<long long>(tid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t size = 0;
  while (size < sizeof(buf) - 1) {
    const ssize_t n = read(fd, buf + size, sizeof(buf) - 1 - size);
    if (n <= 0) break;
    size += static_cast<size_t>(n);
  }
  close(fd);
  buf[size] = '\0';
  const char* line = std::strstr(buf, "\nSigBlk:");
  if (line == nullptr) return false;
  const unsigned long long mask = std::strtoull(line + 8, nullptr, 16);
  return sig >= 1 && sig <= 64 && ((mask >> (sig - 1)) & 1) != 0;
}

KeptProcFile::KeptProcFile(KeptProcFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

KeptProcFile& KeptProcFile::operator=(KeptProcFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

KeptProcFile::~KeptProcFile() { Close(); }

void KeptProcFile::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string KeptProcFile::Read() {
  if (fd_ < 0 && !path_.empty()) fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return "";
  char buf[512];
  const ssize_t n = pread(fd_, buf, sizeof(buf) - 1, 0);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  Close();  // opened again at the next read: a thread with its id since is read then
  return "";
}

}  // namespace rlscope

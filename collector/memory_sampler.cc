#include "collector/memory_sampler.h"

#include <fcntl.h>
#include <unistd.h>

namespace rlscope {

MemorySampler::MemorySampler() {
  fd_ = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  const long page = sysconf(_SC_PAGESIZE);
  if (page > 0) page_bytes_ = page;
}

MemorySampler::~MemorySampler() {
  if (fd_ >= 0) close(fd_);
}

int64_t MemorySampler::RssBytes() const {
  if (fd_ < 0) return -1;
  char buf[128];
  const ssize_t n = pread(fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  // "size resident shared text lib data dt", in pages.
  const char* p = buf;
  while (*p >= '0' && *p <= '9') ++p;  // size
  if (*p != ' ') return -1;
  ++p;
  if (*p < '0' || *p > '9') return -1;
  int64_t pages = 0;
  for (; *p >= '0' && *p <= '9'; ++p) pages = pages * 10 + (*p - '0');
  return pages * page_bytes_;
}

}  // namespace rlscope

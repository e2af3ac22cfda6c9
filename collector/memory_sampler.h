// The process's resident memory, read on the flush thread once per flush
// (never on a recording thread): what a step's `memory.rss_*` figures and
// the traces' "Memory: RSS" counter track come from (wire.h Batch::memory).
#pragma once

#include <cstdint>

namespace rlscope {

class MemorySampler {
 public:
  // Opens /proc/self/statm once; a failure leaves the sampler off (Sample
  // returns -1).
  MemorySampler();
  ~MemorySampler();
  MemorySampler(const MemorySampler&) = delete;
  MemorySampler& operator=(const MemorySampler&) = delete;

  // Resident bytes now (statm's second field times the page size): one
  // pread, no allocation. -1 when unreadable.
  int64_t RssBytes() const;

 private:
  int fd_ = -1;
  int64_t page_bytes_ = 4096;
};

}  // namespace rlscope

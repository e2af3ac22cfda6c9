// A time index over a queue of records kept in arrival order and let go
// only at its front (a ChunkQueue): per kBlock records, the earliest first
// time and the latest last time among them (a span's begin and end, an
// instant's time twice). A cut reads only the blocks that can hold what it
// takes. Always on, a flush brings many short steps' records at once, each
// step cut in turn: reading every record held for each step made cutting
// grow with the square of the steps a flush brings.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>

namespace rlscope {

class TimeBlocks {
 public:
  // A short step holds tens of a thread's records.
  static constexpr size_t kBlock = 32;

  // A record pushed at the back of the queue, which held `held` before it.
  void Added(size_t held, int64_t first_ns, int64_t last_ns) {
    const size_t at = front_offset_ + held;
    if (at / kBlock == blocks_.size()) blocks_.emplace_back();
    Block& b = blocks_[at / kBlock];
    b.first_ns = std::min(b.first_ns, first_ns);
    b.last_ns = std::max(b.last_ns, last_ns);
  }
  // One record popped from the queue's front.
  void PoppedFront() {
    if (++front_offset_ == kBlock) {
      blocks_.pop_front();
      front_offset_ = 0;
    }
  }
  // The queue emptied.
  void Clear() {
    blocks_.clear();
    front_offset_ = 0;
  }
  // Calls f(from, to) with the queue positions [from, to) of each block
  // that may hold a record whose first time is before `before_ns` and whose
  // last is at or after `from_ns`, in order; `held`: the queue's size.
  // Returns the records those blocks hold.
  template <typename F>
  size_t ForEach(size_t held, int64_t from_ns, int64_t before_ns, const F& f) const {
    size_t read = 0;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      if (blocks_[b].first_ns >= before_ns || blocks_[b].last_ns < from_ns) continue;
      const size_t from = b == 0 ? 0 : b * kBlock - front_offset_;
      const size_t to = std::min(held, (b + 1) * kBlock - front_offset_);
      if (from >= to) continue;
      read += to - from;
      f(from, to);
    }
    return read;
  }

 private:
  struct Block {
    int64_t first_ns = INT64_MAX;
    int64_t last_ns = INT64_MIN;
  };
  std::deque<Block> blocks_;  // the front one's first front_offset_ records let go
  size_t front_offset_ = 0;
};

}  // namespace rlscope

// A time index over a queue of records kept in arrival order and let go
// only at its front (a ChunkQueue): per kBlock records, the earliest first
// time and the latest last time among them (a span's begin and end, an
// instant's time twice). A cut reads only the blocks that can hold what it
// takes. Always on, a flush brings many short steps' records at once, each
// step cut in turn: reading every record held for each step made cutting
// grow with the square of the steps a flush brings.
//
// Discards (Forget) judge the records held when they are made, as erasing
// them would: a record is forgotten at the highest floor of the discards
// made after it came (a process's discard times follow its clock
// estimate, which may move back; records that come later are not judged
// by earlier discards). Only the queue's front is let go: the records
// behind a kept one stay in memory, skipped, until they reach it.
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
    ++popped_;
    while (!floors_.empty() && floors_.front().until <= popped_) floors_.pop_front();
    if (++front_offset_ == kBlock) {
      blocks_.pop_front();
      front_offset_ = 0;
    }
  }
  // The queue emptied.
  void Clear() {
    blocks_.clear();
    front_offset_ = 0;
    floors_.clear();
  }
  // A discard at `ns` of the `held` records the queue holds now.
  void Forget(size_t held, int64_t ns) {
    if (held == 0) return;
    const uint64_t until = popped_ + held;
    // A floor no higher, over records all judged by this one, says nothing more.
    while (!floors_.empty() && floors_.back().ns <= ns) floors_.pop_back();
    if (floors_.empty() || floors_.back().until < until) floors_.push_back({until, ns});
  }
  // The floor the queue's front record is judged at (INT64_MIN: none).
  int64_t FrontFloor() const { return floors_.empty() ? INT64_MIN : floors_.front().ns; }
  // Calls f(i, floor_ns) for each queue position i (in order) of the blocks
  // that may hold a record whose first time is before `before_ns` and
  // whose last is at or after `from_ns`, with the floor that record is
  // judged at; `held`: the queue's size. Returns how many it called f for.
  template <typename F>
  size_t ForEach(size_t held, int64_t from_ns, int64_t before_ns, const F& f) const {
    size_t read = 0, k = 0;  // floors_[k]: the first whose `until` is past the record
    for (size_t b = 0; b < blocks_.size(); ++b) {
      if (blocks_[b].first_ns >= before_ns || blocks_[b].last_ns < from_ns) continue;
      const size_t from = b == 0 ? 0 : b * kBlock - front_offset_;
      const size_t to = std::min(held, (b + 1) * kBlock - front_offset_);
      for (size_t i = from; i < to; ++i) {
        while (k < floors_.size() && floors_[k].until <= popped_ + i) ++k;
        f(i, k < floors_.size() ? floors_[k].ns : INT64_MIN);
      }
      read += to > from ? to - from : 0;
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
  // Discards still judging a record held: the records before the `until`th
  // the queue ever held are forgotten before `ns`. `until` grows and `ns`
  // falls along it, so a record's floor is that of the first past it.
  struct Floor {
    uint64_t until;
    int64_t ns;
  };
  std::deque<Floor> floors_;
  uint64_t popped_ = 0;  // records ever popped
};

}  // namespace rlscope

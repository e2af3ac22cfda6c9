// The collector's spool: every batch message, in order, from the moment it is
// encoded until the aggregator has written the step its events belong to.
//
// Two jobs, one queue. (1) While the aggregator cannot take a message (not
// reachable, its queue full), it and everything after it wait here instead
// of being dropped, and go out in order when it can. (2) A sent message is
// kept until the aggregator releases it (Control.release_ns: every step
// ending before that time is written), so an aggregator that restarted gets
// it again (Rewind: replayed in order, after a message that re-sends every
// name). Messages without events or GPU records (heartbeats, names) are not
// kept once sent.
//
// Bounded: `memory_bytes` in memory. Over it, the oldest sent message goes
// (evicted: no longer replayable; if the aggregator restarts before it
// releases that message's step, its events count as lost); when none is
// left, the oldest unsent ones go to an unlinked temporary file of at most
// `file_bytes` (so the disk is used only while the aggregator cannot take
// them), and beyond that the oldest message still in memory is dropped
// (counted as lost events; the file keeps the older ones). A dropped message
// may have carried names later ones refer to: the next one sent is preceded
// by the preamble again (TakeNamesLost).
//
// Threads: the flush thread only; the counters are atomics read by Stats.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace rlscope {

class Spool {
 public:
  Spool(size_t memory_bytes, size_t file_bytes);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Appends one encoded message; `events` (thread events and GPU records)
  // 0 makes it transient (not kept once sent); `max_ts_ns`: its latest
  // event's time (collector clock).
  void Push(std::string bytes, uint64_t events, int64_t max_ts_ns);
  // Sends what is not sent yet, in order, until `send` returns false (the
  // socket cannot take more now). Returns the number sent.
  using SendFn = std::function<bool(const std::string&)>;
  size_t Pump(const SendFn& send);
  // Forgets sent messages whose events all precede `before_ns`, oldest first.
  void Release(int64_t before_ns);
  // A new aggregator: everything kept goes out again, after `preamble`.
  // Evicted messages of steps not released are lost (counted).
  void Rewind(std::string preamble);
  // True once after an unsent message was dropped: its names (strings,
  // thread names) must be sent again before what follows (SetPreamble).
  bool TakeNamesLost() {
    const bool lost = names_lost_;
    names_lost_ = false;
    return lost;
  }
  // Sent before the next message that goes out (if none is set already).
  void SetPreamble(std::string preamble) {
    if (preamble_.empty()) preamble_ = std::move(preamble);
  }
  // At exit: what was never sent counts as lost; returns those events.
  uint64_t AbandonUnsent();
  // At exit, to leave on disk (spool_file.h): every message kept, sent or
  // not, in order, into `out` (the names' preamble first when one is due),
  // at most `max_bytes` of them; the spool is left empty. `*events`: the
  // events taken; those beyond max_bytes are lost (counted, returned).
  uint64_t TakeAll(size_t max_bytes, std::vector<std::string>* out, uint64_t* events);
  // After TakeAll, when the file could not be written: those events are lost too.
  void CountLost(uint64_t events, uint64_t messages) {
    lost_events_.fetch_add(events, std::memory_order_relaxed);
    lost_messages_.fetch_add(messages, std::memory_order_relaxed);
  }

  bool idle() const { return next_ == entries_.size() && preamble_.empty(); }  // nothing waits to go out
  uint64_t lost_events() const { return lost_events_.load(std::memory_order_relaxed); }
  uint64_t lost_messages() const { return lost_messages_.load(std::memory_order_relaxed); }
  uint64_t evicted_events() const { return evicted_events_.load(std::memory_order_relaxed); }
  uint64_t unsent_events() const { return unsent_events_.load(std::memory_order_relaxed); }
  size_t memory_bytes() const { return memory_used_; }
  size_t file_bytes() const { return file_end_; }
  size_t size() const { return entries_.size(); }
  size_t unsent_messages() const { return entries_.size() - next_; }

 private:
  struct Entry {
    std::string bytes;  // in memory; empty when in the file
    size_t file_offset = 0;
    size_t size = 0;
    uint64_t events = 0;
    int64_t max_ts_ns = 0;
    bool in_file = false;
  };
  // The bytes of `e` (read back from the file when spilled); false on an I/O error.
  bool Load(const Entry& e, std::string* out) const;
  // Keeps memory and file within bounds: evicts sent entries, spills the
  // oldest unsent in-memory ones, drops the oldest in memory when the file
  // is full.
  void Bound();
  // Drops entry `i` (never sent: lost), which is in memory.
  void DropUnsent(size_t i);
  void PopFront();

  const size_t memory_limit_, file_limit_;
  std::deque<Entry> entries_;  // file entries first (the oldest), then memory
  size_t next_ = 0;            // entries_[next_] is the first not sent
  std::string preamble_;       // sent before entries_[next_] (Rewind)
  size_t memory_used_ = 0;
  int fd_ = -1;              // the spill file (unlinked), -1 until needed
  std::string tmp_dir_;      // where it goes: $TMPDIR at construction (the flush thread never reads the environment)
  size_t file_end_ = 0;      // bytes written to it; reset when no entry is in it
  size_t in_file_ = 0;       // entries in the file
  bool names_lost_ = false;  // TakeNamesLost
  // Evicted messages not released yet: (latest event time, events), oldest first.
  std::deque<std::pair<int64_t, uint64_t>> evicted_pending_;
  std::atomic<uint64_t> lost_events_{0}, lost_messages_{0}, evicted_events_{0}, unsent_events_{0};
};

}  // namespace rlscope

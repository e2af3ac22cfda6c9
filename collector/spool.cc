#include "collector/spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace rlscope {

Spool::Spool(size_t memory_bytes, size_t file_bytes) : memory_limit_(memory_bytes), file_limit_(file_bytes) {
  // Read now (the collector's start), never on the flush thread: see tmp_dir_.
  const char* dir = std::getenv("TMPDIR");
  tmp_dir_ = dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

Spool::~Spool() {
  if (fd_ >= 0) close(fd_);
}

void Spool::Push(std::string bytes, uint64_t events, int64_t max_ts_ns) {
  Entry e;
  e.size = bytes.size();
  e.bytes = std::move(bytes);
  e.events = events;
  e.max_ts_ns = max_ts_ns;
  memory_used_ += e.size;
  unsent_events_.fetch_add(events, std::memory_order_relaxed);
  entries_.push_back(std::move(e));
  Bound();
}

size_t Spool::Pump(const SendFn& send) {
  if (!preamble_.empty()) {
    if (!send(preamble_)) return 0;
    preamble_.clear();
  }
  size_t sent = 0;
  std::string loaded;
  while (next_ < entries_.size()) {
    Entry& e = entries_[next_];
    if (e.in_file && !Load(e, &loaded)) {  // unreadable: lost, never to be sent
      lost_events_.fetch_add(e.events, std::memory_order_relaxed);
      lost_messages_.fetch_add(1, std::memory_order_relaxed);
      unsent_events_.fetch_sub(e.events, std::memory_order_relaxed);
      e.events = 0;
      ++next_;
      continue;
    }
    if (!send(e.in_file ? loaded : e.bytes)) break;
    unsent_events_.fetch_sub(e.events, std::memory_order_relaxed);
    ++next_;
    ++sent;
  }
  // Transient messages are done with once sent: drop them from the front.
  while (next_ > 0 && entries_.front().events == 0) PopFront();
  return sent;
}

void Spool::Release(int64_t before_ns) {
  while (next_ > 0 && (entries_.front().events == 0 || entries_.front().max_ts_ns < before_ns)) PopFront();
  while (!evicted_pending_.empty() && evicted_pending_.front().first < before_ns) evicted_pending_.pop_front();
}

void Spool::Rewind(std::string preamble) {
  for (size_t i = 0; i < next_; ++i) unsent_events_.fetch_add(entries_[i].events, std::memory_order_relaxed);
  next_ = 0;
  preamble_ = std::move(preamble);
  // The aggregator that had them is gone before writing their steps.
  for (const auto& [ts, events] : evicted_pending_) {
    lost_events_.fetch_add(events, std::memory_order_relaxed);
    lost_messages_.fetch_add(1, std::memory_order_relaxed);
  }
  evicted_pending_.clear();
}

uint64_t Spool::AbandonUnsent() {
  uint64_t events = 0;
  for (size_t i = next_; i < entries_.size(); ++i) events += entries_[i].events;
  lost_events_.fetch_add(events, std::memory_order_relaxed);
  lost_messages_.fetch_add(unsent_messages(), std::memory_order_relaxed);
  unsent_events_.fetch_sub(events, std::memory_order_relaxed);
  while (entries_.size() > next_) {
    Entry& e = entries_.back();
    if (e.in_file)
      --in_file_;
    else
      memory_used_ -= e.size;
    entries_.pop_back();
  }
  preamble_.clear();
  return events;
}

uint64_t Spool::TakeAll(size_t max_bytes, std::vector<std::string>* out, uint64_t* events) {
  *events = 0;
  uint64_t over = 0, over_messages = 0;
  size_t bytes = 0;
  if (!preamble_.empty()) {
    bytes += preamble_.size();
    out->push_back(std::move(preamble_));
    preamble_.clear();
  }
  std::string loaded;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (i < next_ && e.events == 0) continue;  // sent, nothing to replay
    const bool readable = !e.in_file || Load(e, &loaded);
    if (!readable || bytes + e.size > max_bytes) {
      over += e.events;
      ++over_messages;
      continue;
    }
    bytes += e.size;
    out->push_back(e.in_file ? std::move(loaded) : std::move(e.bytes));
    *events += e.events;
  }
  lost_events_.fetch_add(over, std::memory_order_relaxed);
  lost_messages_.fetch_add(over_messages, std::memory_order_relaxed);
  unsent_events_.store(0, std::memory_order_relaxed);
  entries_.clear();
  next_ = 0;
  memory_used_ = 0;
  in_file_ = 0;
  file_end_ = 0;
  evicted_pending_.clear();
  return over;
}

bool Spool::Load(const Entry& e, std::string* out) const {
  out->resize(e.size);
  size_t done = 0;
  while (done < e.size) {
    const ssize_t n = pread(fd_, out->data() + done, e.size - done, static_cast<off_t>(e.file_offset + done));
    if (n <= 0) {
      out->clear();
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void Spool::PopFront() {
  Entry& e = entries_.front();
  if (e.in_file) {
    if (--in_file_ == 0) {
      file_end_ = 0;
      if (fd_ >= 0 && ftruncate(fd_, 0) != 0) {
      }  // best effort: the next spill overwrites from 0
    }
  } else {
    memory_used_ -= e.size;
  }
  entries_.pop_front();
  if (next_ > 0) --next_;
}

void Spool::DropUnsent(size_t i) {
  const Entry& e = entries_[i];
  lost_events_.fetch_add(e.events, std::memory_order_relaxed);
  lost_messages_.fetch_add(1, std::memory_order_relaxed);
  unsent_events_.fetch_sub(e.events, std::memory_order_relaxed);
  memory_used_ -= e.size;
  entries_.erase(entries_.begin() + static_cast<long>(i));
  names_lost_ = true;
}

void Spool::Bound() {
  while (memory_used_ > memory_limit_ && entries_.size() > 1) {
    // The oldest entry still in memory is right after those in the file.
    Entry& e = entries_[in_file_];
    if (in_file_ < next_) {
      // Sent, kept only for a replay: it goes (never to disk, which is for
      // what the aggregator could not take yet).
      evicted_events_.fetch_add(e.events, std::memory_order_relaxed);
      if (e.events != 0) {
        if (evicted_pending_.size() >= 65536) {  // bounded: the oldest two as one
          evicted_pending_[1].second += evicted_pending_[0].second;
          evicted_pending_.pop_front();
        }
        evicted_pending_.emplace_back(e.max_ts_ns, e.events);
      }
      memory_used_ -= e.size;
      entries_.erase(entries_.begin() + static_cast<long>(in_file_));
      --next_;
      continue;
    }
    bool spilled = false;
    if (file_limit_ > 0 && file_end_ + e.size <= file_limit_) {
      if (fd_ < 0) {
        std::string path = tmp_dir_ + "/rlscope-spool-XXXXXX";
        fd_ = mkstemp(path.data());          // 0600
        if (fd_ >= 0) unlink(path.c_str());  // gone with the process
      }
      if (fd_ >= 0) {
        size_t done = 0;
        while (done < e.size) {
          const ssize_t n = pwrite(fd_, e.bytes.data() + done, e.size - done, static_cast<off_t>(file_end_ + done));
          if (n <= 0) break;
          done += static_cast<size_t>(n);
        }
        if (done == e.size) {
          e.file_offset = file_end_;
          file_end_ += e.size;
          e.in_file = true;
          memory_used_ -= e.size;
          std::string().swap(e.bytes);
          ++in_file_;
          spilled = true;
        }
      }
    }
    // No room in the file (or none at all): the oldest message in memory
    // goes (the file keeps the older ones; its space comes back once no
    // entry is left in it).
    if (!spilled) DropUnsent(in_file_);
  }
}

}  // namespace rlscope

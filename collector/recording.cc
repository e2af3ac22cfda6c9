#include "collector/recording.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace rlscope {

constinit thread_local ThreadState* Recording::tls_state_ __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local bool Recording::tls_exiting_ = false;

namespace {

// Test only: Recording::WaitLateFlushForTesting.
constexpr char kEnvLateFlushEventsForTesting[] = "RLSCOPE_TEST_LATE_FLUSH_EVENTS";

uint64_t EnvCount(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

// Marks a thread's buffer retired when the thread exits; the flush thread
// drains what is left and frees it.
struct ThreadExitHook {
  ThreadEntry* entry = nullptr;
  ~ThreadExitHook() {
    // The thread's state first, then its entry: once `exited` is seen the
    // flush thread may free both, and the CPU sampler's handler, which can
    // interrupt this thread anywhere, finds the state through tls_state_
    // alone (the signal fence keeps the compiler from swapping the stores
    // as this thread's handler sees them).
    Recording::tls_state_ = nullptr;
    Recording::tls_exiting_ = true;  // events from later TLS destructors are dropped
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (entry != nullptr) entry->exited.store(true, std::memory_order_release);
  }
};

Recording::Recording(CollectorContext& ctx)
    : ctx_(ctx),
      clock_source_(ctx.clock_source),
      test_clock_(ctx.test_clock.get()),
      budget_(static_cast<int64_t>(ctx.own.config.buffers.max_mb) << 20),
      late_flush_events_(EnvCount(kEnvLateFlushEventsForTesting)) {}

ThreadState* Recording::Register() {
  if (tls_exiting_ || closed_.load(std::memory_order_relaxed)) {
    CountDropped();
    return nullptr;
  }
  const size_t bytes = static_cast<size_t>(ctx_.own.config.buffers.per_thread_kb) * 1024;
  if (!budget_.TryTake(static_cast<int64_t>(bytes))) {  // the budget first
    CountDropped();
    return nullptr;
  }
  // Allocate, prefault and reserve the overflow outside the lock: the flush
  // thread keeps going.
  auto entry = std::make_unique<ThreadEntry>();
  entry->buffer =
      std::make_unique<ThreadBuffer>(static_cast<int64_t>(syscall(SYS_gettid)), bytes / sizeof(EventRecord), &budget_);
  entry->state = std::make_unique<ThreadState>(&ctx_.strings);
  entry->state->buffer = entry->buffer.get();
  std::lock_guard<std::mutex> lock(registry_mu_);
  threads_.push_back(std::move(entry));
  static thread_local ThreadExitHook hook;
  hook.entry = threads_.back().get();
  tls_state_ = threads_.back()->state.get();
  return tls_state_;
}

void Recording::NameThread(int64_t tid, const std::string& name) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  thread_names_[tid] = name;
  renamed_threads_.push_back(tid);
}

void Recording::NameCategory(uint32_t domain, uint32_t category, const std::string& name) {
  std::lock_guard<std::mutex> lock(meta_mu_);
  categories_.push_back({domain, category, name});
}

void Recording::ForEachThread(const std::function<void(ThreadEntry&)>& fn) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  for (auto& t : threads_) fn(*t);
}

void Recording::SnapshotRings(Outgoing* out) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  for (auto& t : threads_) out->threads.push_back({t->buffer.get(), t->buffer->size()});
}

std::string Recording::ThreadName(int64_t tid) {
  auto it = thread_names_.find(tid);
  std::string name =
      it != thread_names_.end() ? it->second : ReadFirstLine("/proc/self/task/" + std::to_string(tid) + "/comm");
  return name.empty() ? "thread " + std::to_string(tid) : name;
}

void Recording::TakeMetadata(Metadata* out) {
  next_string_id_ = ctx_.strings.CopySince(next_string_id_, &out->strings);
  std::vector<ThreadEntry*> unnamed;
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    for (auto& t : threads_) {
      if (!t->name_sent) unnamed.push_back(t.get());
    }
  }
  std::lock_guard<std::mutex> lock(meta_mu_);
  for (ThreadEntry* e : unnamed) {
    e->name_sent = true;
    const int64_t tid = e->buffer->tid();
    out->thread_names.emplace_back(tid, ThreadName(tid));
  }
  for (int64_t tid : renamed_threads_) out->thread_names.emplace_back(tid, thread_names_[tid]);
  renamed_threads_.clear();
  out->categories.insert(out->categories.end(), categories_.begin() + static_cast<long>(categories_sent_),
                         categories_.end());
  categories_sent_ = categories_.size();
}

void Recording::AllNames(wire::Batch* batch) {
  ctx_.strings.CopySince(1, &batch->strings);
  std::vector<int64_t> named;
  {
    std::lock_guard<std::mutex> lock(registry_mu_);
    for (auto& t : threads_) {
      if (t->name_sent) named.push_back(t->buffer->tid());
    }
  }
  std::lock_guard<std::mutex> lock(meta_mu_);
  for (int64_t tid : named) batch->thread_names.emplace_back(tid, ThreadName(tid));
  batch->categories.assign(categories_.begin(), categories_.begin() + static_cast<long>(categories_sent_));
}

void Recording::RetireExitedThreads(const std::function<void(ThreadEntry&)>& release) {
  std::lock_guard<std::mutex> lock(registry_mu_);
  for (auto it = threads_.begin(); it != threads_.end();) {
    ThreadEntry* e = it->get();
    if (e->exited.load(std::memory_order_acquire) && e->buffer->size() == 0 && e->name_sent &&
        (e->sampled.ring == nullptr || e->sampled.ring->size() == 0)) {
      release(*e);
      retired_dropped_ += e->buffer->dropped();
      retired_written_ += e->buffer->written();
      it = threads_.erase(it);  // the ring gives its overflow bytes back
      budget_.Give(static_cast<int64_t>(ctx_.own.config.buffers.per_thread_kb) * 1024);
    } else {
      ++it;
    }
  }
}

Recording::Counts Recording::Count() {
  Counts c;
  c.dropped = overflow_dropped_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(registry_mu_);
  c.written = retired_written_;
  c.dropped += retired_dropped_;
  for (const auto& t : threads_) {
    c.written += t->buffer->written();  // cost samples are not in written(): counted apart
    c.dropped += t->buffer->dropped();
  }
  c.threads = threads_.size();
  return c;
}

void Recording::WaitLateFlushForTesting(const std::function<bool()>& stopping) {
  if (late_flush_events_ == 0) return;
  if (late_flush_until_ == 0) late_flush_until_ = late_flush_events_;
  uint64_t written = Count().written;
  while (written < late_flush_until_ && !stopping()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    written = Count().written;
  }
  late_flush_until_ = written + late_flush_events_;
}

}  // namespace rlscope

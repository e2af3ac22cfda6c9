#include "aggregator/chrome_trace.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "aggregator/json_writer.h"
#include "aggregator/step_trace.h"

namespace rlscope {
namespace {

using TraceWriter = BasicJsonWriter<JsonBuffer>;

// The JSON encoding of a step's trace (trace_sink.h): metadata "M" events
// name tracks, "X" slices, "b"/"e" async pairs, "i" instants, "s"/"f" flows.
class JsonSink : public TraceSink {
 public:
  // `drain` (none: the output stays in `out`) is called with the output so
  // far whenever it holds kChunkBytes or more, between two events; it
  // empties the buffer. `workers`: threads that may encode long runs of
  // events (ForEach), this one included.
  using Drain = std::function<void(JsonBuffer*)>;
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  JsonSink(TraceWriter* w, JsonBuffer* out, Drain drain, int workers)
      : w_(*w), out_(out), drain_(std::move(drain)), workers_(workers) {}
  void ForEach(size_t n, const std::function<void(TraceSink*, size_t)>& each) override;
  void Process(int64_t pid, std::string_view name, int64_t sort_index,
               const std::vector<std::string>& labels) override {
    MaybeDrain();
    Track("process", pid, 0, name, sort_index);
    if (labels.empty()) return;
    std::string joined;
    for (const std::string& l : labels) joined += (joined.empty() ? "" : ",") + l;
    w_.Newline().BeginObject().Key("ph").String("M").Key("name").String("process_labels");
    w_.Key("pid").Int(pid).Key("tid").Int(0);
    w_.Key("args").BeginObject().Key("labels").String(joined).EndObject().EndObject();
  }
  void Thread(int64_t pid, int64_t tid, std::string_view name, int64_t sort_index) override {
    MaybeDrain();
    Track("thread", pid, tid, name, sort_index);
  }
  void Slice(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, int64_t begin_ns, int64_t end_ns,
             const TraceArgs& args, const RawTimes* raw) override {
    MaybeDrain();
    Head(R"("ph":"X","name":)", name, cat, pid, tid);
    w_.Fixed(R"(,"ts":)").Micros(begin_ns).Fixed(R"(,"dur":)").Micros(end_ns - begin_ns);
    Args(args, raw);
    w_.EndObject();
  }
  void Async(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, uint64_t id, int64_t begin_ns,
             int64_t end_ns, const TraceArgs& args, const RawTimes* raw) override {
    MaybeDrain();
    for (int phase = 0; phase < 2; ++phase) {
      Head(phase == 0 ? R"("ph":"b","name":)" : R"("ph":"e","name":)", name, cat, std::nullopt, 0);
      w_.Fixed(R"(,"id":)").Uint(id).Fixed(R"(,"pid":)").Int(pid).Fixed(R"(,"tid":)").Int(tid);
      w_.Fixed(R"(,"ts":)").Micros(phase == 0 ? begin_ns : end_ns);
      if (phase == 0) Args(args, raw);
      w_.EndObject();
    }
  }
  void Instant(int64_t pid, int64_t tid, std::string_view name, std::string_view cat, int64_t ts_ns,
               const TraceArgs& args) override {
    MaybeDrain();
    Head(R"("ph":"i","s":"t","name":)", name, cat, pid, tid);
    w_.Fixed(R"(,"ts":)").Micros(ts_ns);
    if (args.size() > 0) Args(args, nullptr);
    w_.EndObject();
  }
  void Counter(int64_t pid, std::string_view name, int64_t ts_ns, double value) override {
    MaybeDrain();
    w_.Newline().BeginObject().Key("ph").String("C").Key("name").String(name).Key("pid").Int(pid);
    w_.Key("ts").Micros(ts_ns).Key("args").BeginObject().Key("value").Double(value).EndObject().EndObject();
  }
  // "s" at the start, "f" (bound to the enclosing slice) at the end; the id
  // as "<name>.<id>".
  void FlowStart(int64_t pid, uint64_t id, std::string_view name, std::string_view cat, int64_t tid,
                 int64_t ts_ns) override {
    MaybeDrain();
    FlowPoint("s", pid, id, name, cat, tid, ts_ns);
  }
  void FlowEnd(int64_t pid, uint64_t id, std::string_view name, std::string_view cat, int64_t tid,
               int64_t ts_ns) override {
    MaybeDrain();
    FlowPoint("f", pid, id, name, cat, tid, ts_ns);
  }

 private:
  // A track's metadata: its name and sort index (a process track's tid is 0).
  void Track(const char* kind, int64_t pid, int64_t tid, std::string_view name, int64_t sort_index) {
    w_.Newline().BeginObject().Key("ph").String("M").Key("name").String(std::string(kind) + "_name");
    w_.Key("pid").Int(pid).Key("tid").Int(tid);
    w_.Key("args").BeginObject().Key("name").String(name).EndObject();
    w_.EndObject();
    w_.Newline().BeginObject().Key("ph").String("M").Key("name").String(std::string(kind) + "_sort_index");
    w_.Key("pid").Int(pid).Key("tid").Int(tid);
    w_.Key("args").BeginObject().Key("sort_index").Int(sort_index).EndObject();
    w_.EndObject();
  }
  void FlowPoint(const char* ph, int64_t pid, uint64_t id, std::string_view name, std::string_view cat, int64_t tid,
                 int64_t ts_ns) {
    w_.Newline().BeginObject().Key("ph").String(ph);
    if (ph[0] == 'f') w_.Key("bp").String("e");
    w_.Key("name").String(name).Key("cat").String(cat).Key("id").String(std::string(name) + "." + std::to_string(id));
    w_.Key("pid").Int(pid).Key("tid").Int(tid).Key("ts").Micros(ts_ns).EndObject();
  }
  // An event's opening: `head` (its phase and the "name" key, Fixed), its
  // name and category, then its pid and tid when `pid` is given.
  void Head(std::string_view head, std::string_view name, std::string_view cat, std::optional<int64_t> pid,
            int64_t tid) {
    w_.Newline().BeginObject().Fixed(head).String(name).Fixed(R"(,"cat":)").String(cat);
    if (pid) w_.Fixed(R"(,"pid":)").Int(*pid).Fixed(R"(,"tid":)").Int(tid);
  }
  // "args": each in order, then the raw times as "raw_ts" and "raw_dur".
  void Args(const TraceArgs& args, const RawTimes* raw) {
    w_.Fixed(R"(,"args":{)");
    for (int i = 0; i < args.size(); ++i) {
      const TraceArg& a = args[i];
      w_.Key(a.key);
      switch (a.type) {
        case TraceArg::Type::kInt: w_.Int(a.i); break;
        case TraceArg::Type::kUint: w_.Uint(a.u); break;
        case TraceArg::Type::kDouble: w_.Double(a.d); break;
        case TraceArg::Type::kString: w_.String(a.s); break;
        case TraceArg::Type::kBool: w_.Bool(a.i != 0); break;
        case TraceArg::Type::kInts3: w_.BeginArray().Int(a.v[0]).Int(a.v[1]).Int(a.v[2]).EndArray(); break;
      }
    }
    if (raw != nullptr) w_.Key("raw_ts").Micros(raw->begin_ns).Key("raw_dur").Micros(raw->end_ns - raw->begin_ns);
    w_.EndObject();
  }
  void MaybeDrain() {
    if (drain_ && out_->size() >= kChunkBytes) drain_(out_);
  }
  TraceWriter& w_;
  JsonBuffer* out_;
  Drain drain_;
  int workers_;
};

// A long run of a JsonSink's events (ForEach) encoded in pieces, on the
// calling thread and helper threads: each piece into a buffer of its own
// (a sink that continues the list), handed to `emit` in order on the
// calling thread. At most kAhead pieces wait to be emitted, so memory stays
// bounded. `each` runs on every thread (TraceSink::ForEach's contract). An
// exception on a helper stops the run and is rethrown by Run, every helper
// joined first; a helper that cannot be started leaves the work to the rest.
class PieceEncoder {
 public:
  static constexpr size_t kPieceItems = 8192;
  static constexpr size_t kAhead = 8;
  using Each = std::function<void(TraceSink*, size_t)>;
  PieceEncoder(size_t n, const Each& each, std::function<void(JsonBuffer*)> emit)
      : n_(n),
        pieces_((n + kPieceItems - 1) / kPieceItems),
        each_(each),
        emit_(std::move(emit)),
        bufs_(pieces_),
        ready_(pieces_, 0) {}
  void Run(int helpers);

 private:
  // Takes the next piece to encode, if one may be taken now, with the
  // memory of one emitted before. Under mu_.
  bool Claim(size_t* piece) {
    if (next_ >= pieces_ || next_ >= emitted_ + kAhead) return false;
    *piece = next_++;
    if (!spare_.empty()) {
      bufs_[*piece] = std::move(spare_.back());
      spare_.pop_back();
    }
    return true;
  }
  // Encodes piece k into bufs_[k], which only its claimant touches until
  // ready_[k] is set (under mu_).
  void Encode(size_t k) {
    TraceWriter w(&bufs_[k], true);  // the process's own events came before (trace_sink.h)
    JsonSink sink(&w, &bufs_[k], nullptr, 1);
    for (size_t i = k * kPieceItems; i < std::min(n_, (k + 1) * kPieceItems); ++i) each_(&sink, i);
  }
  void Help();         // a helper thread's loop
  void EmitInOrder();  // the calling thread's loop

  const size_t n_, pieces_;
  const Each& each_;
  std::function<void(JsonBuffer*)> emit_;
  std::vector<JsonBuffer> bufs_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  std::vector<char> ready_;
  std::vector<JsonBuffer> spare_;
  size_t next_ = 0, emitted_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

void PieceEncoder::Help() {
  try {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || error_ || next_ >= pieces_ || next_ < emitted_ + kAhead; });
      size_t k = 0;
      if (stop_ || error_ || !Claim(&k)) return;
      lock.unlock();
      Encode(k);
      lock.lock();
      ready_[k] = 1;
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
    cv_.notify_all();
  }
}

void PieceEncoder::EmitInOrder() {
  std::unique_lock<std::mutex> lock(mu_);
  while (emitted_ < pieces_ && !error_) {
    size_t k = emitted_;
    if (ready_[k]) {
      lock.unlock();
      emit_(&bufs_[k]);
      lock.lock();
      bufs_[k].clear();
      spare_.push_back(std::move(bufs_[k]));  // its memory serves a later piece
      ++emitted_;
      cv_.notify_all();
    } else if (Claim(&k)) {
      lock.unlock();
      Encode(k);
      lock.lock();
      ready_[k] = 1;
    } else {
      cv_.wait(lock);  // a piece claimed by a helper becomes ready, or a helper fails
    }
  }
}

void PieceEncoder::Run(int helpers) {
  std::vector<std::thread> threads;
  auto join = [&] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads) t.join();
  };
  try {
    threads.reserve(static_cast<size_t>(helpers));
    for (int i = 0; i < helpers; ++i) threads.emplace_back([this] { Help(); });
  } catch (...) {
    // No more threads now (none to start, or no memory for one): the ones
    // started and this one do the work; every started one is joined below.
  }
  try {
    EmitInOrder();
  } catch (...) {
    join();
    throw;
  }
  join();
  if (error_) std::rethrow_exception(error_);
}

void JsonSink::ForEach(size_t n, const std::function<void(TraceSink*, size_t)>& each) {
  // Short runs, or one worker: here, in order.
  if (workers_ <= 1 || !drain_ || n < 4 * PieceEncoder::kPieceItems) return TraceSink::ForEach(n, each);
  PieceEncoder(n, each, [this](JsonBuffer* piece) {
    drain_(out_);  // what came before the piece
    drain_(piece);
  }).Run(workers_ - 1);
}

// "otherData": the step, and every process's clock against the aggregator's.
void WriteOtherData(TraceWriter& w, const StepProfile& step) {
  w.Key("otherData").BeginObject();
  w.Key("step").Int(step.step);
  if (!step.capture.empty()) w.Key("capture").String(step.capture);
  w.Key("begin_ns").Int(step.begin_ns);
  w.Key("end_ns").Int(step.end_ns);
  w.Key("reason").String(step.reason);
  w.Key("clock").String("the aggregator's CLOCK_MONOTONIC, microseconds; each collector's clock aligned to it");
  w.Key("clocks").BeginObject();
  for (const ProcessSlice& slice : step.processes) {
    w.Key(ProcessLabel(*slice.process)).BeginObject();
    const ClockEstimate& e = slice.process->clock();
    w.Key("offset_ns").Int(e.offset_ns).Key("drift_ppm").Double(e.drift * 1e6);
    w.Key("bound_ns").IntOrNull(e.bound_ns);
    w.Key("probes").Int(e.probes).EndObject();
  }
  w.EndObject();
  w.EndObject();
}

// The step's trace as JSON, handed to `drain` a chunk at a time (JsonSink),
// the last one included.
void EncodeStepTrace(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids, int workers,
                     const JsonSink::Drain& drain) {
  JsonBuffer out;
  TraceWriter w(&out);
  w.BeginObject();
  w.Key("displayTimeUnit").String("ns");
  WriteOtherData(w, step);
  w.Key("traceEvents").BeginArray();
  JsonSink sink(&w, &out, drain, workers);
  StepTraceEvents(step, trace_pids, &sink);
  w.Newline().EndArray();
  w.EndObject();
  out.push_back('\n');
  drain(&out);
}

}  // namespace

std::string StepTraceJson(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids, int workers) {
  std::string out;
  EncodeStepTrace(step, trace_pids, workers, [&](JsonBuffer* chunk) {
    out.append(chunk->view());
    chunk->clear();
  });
  return out;
}

// The trace writer's thread (TraceJsonOutput with more than one worker):
// writes the chunks the encoder hands over to the step's file, in order,
// while the encoder goes on (at most kQueued chunks wait). Started with the
// first step, kept until Shutdown. An exception on it is rethrown by the
// step's Finish, and the thread is gone: later steps are written at once.
class TraceJsonOutput::Writer {
 public:
  static constexpr size_t kQueued = 4;
  ~Writer() { Stop(); }
  // Starts the thread (false when it cannot: written at once instead).
  bool Start() {
    try {
      thread_ = std::thread([this] { Run(); });
      return true;
    } catch (...) {
      return false;
    }
  }
  bool running() {
    std::lock_guard<std::mutex> lock(mu_);
    return thread_.joinable() && !dead_;
  }
  // The file the chunks of the step now encoded go to.
  void Begin(OutputSink* file) {
    std::lock_guard<std::mutex> lock(mu_);
    file_ = file;
  }
  // Takes `chunk`'s content to be written and leaves it empty (with the
  // memory of a chunk written before, when there is one).
  void Write(JsonBuffer* chunk) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kQueued || dead_; });
    if (dead_) return chunk->clear();  // the file is lost anyway: Finish says why
    queue_.push_back(std::move(*chunk));
    if (!spare_.empty()) {
      *chunk = std::move(spare_.back());
      spare_.pop_back();
    }
    cv_.notify_all();
  }
  // Returns once every chunk handed over since Begin is written.
  void Finish() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return (queue_.empty() && !writing_) || dead_; });
    file_ = nullptr;
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }
  void Stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Run() {
    try {
      std::unique_lock<std::mutex> lock(mu_);
      while (true) {
        cv_.wait(lock, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;  // done_, and all written
        JsonBuffer chunk = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
        cv_.notify_all();
        lock.unlock();
        file_->Write(chunk.view());
        chunk.clear();
        lock.lock();
        writing_ = false;
        spare_.push_back(std::move(chunk));
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      dead_ = true;
      queue_.clear();
      cv_.notify_all();
    }
  }

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_ while the thread runs:
  OutputSink* file_ = nullptr;
  std::deque<JsonBuffer> queue_;
  std::vector<JsonBuffer> spare_;
  bool writing_ = false, done_ = false, dead_ = false;
  std::exception_ptr error_;
};

TraceJsonOutput::TraceJsonOutput(int workers) : workers_(std::clamp(workers, 1, kMaxTraceWorkers)) {}

TraceJsonOutput::~TraceJsonOutput() = default;

void TraceJsonOutput::WriteStep(const StepProfile& step, const TracePids& pids, OutputSink* out) {
  // Written as it is encoded, a chunk at a time: the trace is never whole
  // in memory (it can be hundreds of MB).
  if (workers_ > 1 && !shut_ && writer_ == nullptr) {
    writer_ = std::make_unique<Writer>();
    if (!writer_->Start()) writer_.reset();
  }
  if (writer_ == nullptr || !writer_->running()) {
    EncodeStepTrace(step, pids, workers_, [&](JsonBuffer* chunk) {
      out->Write(chunk->view());
      chunk->clear();
    });
    return;
  }
  writer_->Begin(out);
  try {
    EncodeStepTrace(step, pids, workers_, [&](JsonBuffer* chunk) { writer_->Write(chunk); });
  } catch (...) {
    writer_->Finish();  // nothing of the step's is written after the file goes
    throw;
  }
  writer_->Finish();
}

void TraceJsonOutput::Shutdown() noexcept {
  shut_ = true;
  if (writer_ != nullptr) writer_->Stop();
  writer_.reset();
}

}  // namespace rlscope

// Wire format v1: msgpack messages from collectors to the aggregator.
// The layout is specified in docs/wire_format.md; this file is its code.
//
// Every message is a msgpack array [magic "RLSC", version, type, body-map].
// Message type numbers and map keys are frozen: add, never renumber or reuse.
// Decoding never throws: a bad frame yields an error string saying what and
// where, and the caller counts and drops it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <msgpack.hpp>

#include "native/event.h"
#include "native/gpu_record.h"

namespace rlscope::wire {

inline constexpr char kMagic[] = "RLSC";
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kFieldsPerEvent = 7;
inline constexpr size_t kFieldsPerGpuRecord = 17;

enum class MessageType : uint8_t {
  kHello = 1,
  kBatch = 2,
  kBye = 3,
  kExpected = 4,
  kControl = 5,  // aggregator -> collector
  kProbe = 6,    // collector -> aggregator: a clock probe
};

// The type of an encoded message without decoding it ([0x94, fixstr
// "RLSC", fixint version, fixint type, ...], as Encode writes every one),
// 0 when the frame does not begin so. For ordering, never for trust: the
// decoder still checks everything.
inline uint8_t PeekType(std::string_view frame) {
  if (frame.size() < 8 || static_cast<uint8_t>(frame[0]) != 0x94 || static_cast<uint8_t>(frame[1]) != 0xa4 ||
      frame.substr(2, 4) != "RLSC" || static_cast<uint8_t>(frame[6]) > 0x7f || static_cast<uint8_t>(frame[7]) > 0x7f) {
    return 0;
  }
  return static_cast<uint8_t>(frame[7]);
}

// Who a collector is. `rank` is -1 when unknown.
struct Identity {
  std::string host;
  int64_t pid = 0;
  int64_t rank = -1;
  std::string role;                           // "controller" or "worker"
  std::string name;                           // process name (script or executable)
  std::map<std::string, std::string> labels;  // free-form (Ray ids, ...)
};

struct Hello {
  uint64_t session = 0;  // random per collector instance; the process key
  Identity identity;
  std::string clock;     // "monotonic": timestamps are CLOCK_MONOTONIC ns
  int64_t start_ns = 0;  // collector start on that clock
  // false: this rank/role is not profiled under its config (its own, then
  // the run's once adopted); the aggregator decides by the run's config
  // itself once it is known, and by this before.
  bool selected = true;
  // Calibrated overhead, ns per event (optional key): "push", "pop", "start",
  // "end", "mark" (the collector's own recording, per record kind) and the
  // `nvtx` package's caller-side costs, each charged on the event of its
  // side of a pair opened through an *Ex entry point (kFlagViaNvtxEx, which
  // its pop or end carries too): "py_nvtx_push", "py_nvtx_pop",
  // "py_nvtx_start", "py_nvtx_end", "py_nvtx_mark"; the same through
  // rlscope's own entry points for the package's functions
  // (kFlagViaNvtxFast): "py_fast_push", ... "py_fast_mark"; and for its
  // annotate (kFlagViaNvtxAnnotate): "py_annotate_push", "py_annotate_pop";
  // for rlscope_ray's own ranges (kFlagViaPyRange): "py_range_push",
  // "py_range_pop". A caller-side key's "<key>_spread": the standard error
  // of its calibration rounds' median figure (stated, not charged).
  std::map<std::string, double> costs;
  // A controller's own config (optional key): the keys its RLSCOPE_CONFIG
  // set, as YAML; its run keys go over the aggregator's in the run's config
  // (config.h). "" = none set.
  std::string config;
  // The run's secret (optional key; RLSCOPE_SECRET, which rlscope_ray.init
  // makes per run and the Ray plugin hands to every profiled worker). An
  // aggregator started with one takes nothing from a connection that has
  // not said hello with it. "" = none.
  std::string secret;
  // Which hello of this collector (optional key; absent = kFirst). kUpdate:
  // its identity, costs or selection changed, on a connection it believes
  // the aggregator knows; an aggregator that does not know the session
  // (it restarted; the connection through a relay stayed up) refuses it and
  // asks for a hello again (Control.hello), since batches it never had would
  // otherwise be skipped. kReplay: the spool's replay follows (after
  // Control.hello, a connection that went down, or a spool file).
  uint8_t kind = 0;
  static constexpr uint8_t kFirst = 0, kUpdate = 1, kReplay = 2;
  // Which CLOCK_MONOTONIC the collector reads (optional key; native/clock.h
  // ClockDomain: the boot and the time namespace). An aggregator that reads
  // the same one places the process's times exactly, without probes. "" =
  // unknown (probes decide).
  std::string clock_domain;
};

// One decoded event; `ts_ns` is on the collector's clock.
struct Event {
  int64_t ts_ns = 0;
  uint64_t value = 0;
  uint32_t name = 0;
  uint32_t domain = 0;
  uint32_t category = 0;
  uint8_t kind = 0;
  uint8_t flags = 0;
  bool operator==(const Event&) const = default;
};

struct ThreadEvents {
  int64_t tid = 0;
  std::vector<Event> events;  // in the order the thread recorded them
  bool operator==(const ThreadEvents&) const = default;
};

struct CategoryName {
  uint32_t domain = 0;
  uint32_t category = 0;
  std::string name;
  bool operator==(const CategoryName&) const = default;
};

// One answered clock probe (see Probe).
struct ProbeSample {
  int64_t t1 = 0, t2 = 0, t3 = 0, t4 = 0;  // t1, t4 collector clock; t2, t3 aggregator clock
  bool operator==(const ProbeSample&) const = default;
};

// A change of the collector's arming (Batch::arming): from `ts_ns` (collector
// clock) the process records (armed) or does not.
struct ArmEdge {
  int64_t ts_ns = 0;
  bool armed = false;
  bool operator==(const ArmEdge&) const = default;
};

// The process's resident memory at `ts_ns` (collector clock), sampled on
// its flush thread (Batch::memory).
struct MemorySample {
  int64_t ts_ns = 0;
  int64_t rss_bytes = 0;
  bool operator==(const MemorySample&) const = default;
};

struct Batch {
  uint64_t session = 0;
  uint64_t seq = 0;              // 0, 1, 2, ... per session
  int64_t watermark_ns = 0;      // every event stamped before this is in a batch <= seq
  uint64_t dropped = 0;          // events dropped by this collector so far (total)
  uint64_t ack = 0;              // flush token answered by this batch (Control.flush), 0 = none
  int64_t profiler_cpu_ns = -1;  // CPU time of the collector's flush thread so far (optional; -1 absent)
  // The CPU sampler's recorded samples so far and the time its signal
  // handler took in them, measured in place (running totals; optional key
  // `cpu_handler`; -1 absent): the in-place part of a CPU sample's cost.
  int64_t cpu_handler_samples = -1;
  int64_t cpu_handler_ps = 0;
  std::vector<std::pair<uint32_t, std::string>> strings;  // new ids only
  std::vector<std::pair<int64_t, std::string>> thread_names;
  std::vector<CategoryName> categories;
  std::vector<GpuRecord> gpu;       // GPU activity (optional key; times on the collector's clock)
  std::vector<ProbeSample> probes;  // answered clock probes (optional key)
  // Arming under the controller trigger (optional key; a process under
  // another trigger, which arms as its user says, sends none): every edge
  // since the last batch that carried it, oldest first. reports_arming
  // false = the key is absent (the aggregator then claims nothing).
  bool reports_arming = false;
  std::vector<ArmEdge> arming;
  std::vector<MemorySample> memory;  // resident memory samples since the last batch (optional key)
  std::vector<ThreadEvents> threads;
};

struct Bye {
  uint64_t session = 0;
  uint64_t events = 0;   // events recorded by this collector (total)
  uint64_t dropped = 0;  // events dropped by this collector (total)
};

// Sent by a controller: the processes that were asked to be profiled (e.g.
// Ray actors with a runtime_env "rlscope" entry), each a map of identity
// strings (actor_id, class_name, name, node_id, pid). Each message replaces
// the previous list; the aggregator reports those that never connected.
struct Expected {
  uint64_t session = 0;
  std::vector<std::map<std::string, std::string>> processes;
  bool operator==(const Expected&) const = default;
};

inline constexpr char kRoleRefused[] = "refused";  // Control.role

// From the aggregator to one collector (over the same DEALER/ROUTER pair).
// `window`: the controller's capture window for workers (open while a
// selected step runs, and from the end of the step before a selected one);
// `flush`: a flush barrier token; the collector flushes at once and answers
// with a Batch whose `ack` is the token.
// Control.release_ns when the aggregator finished the run: every step it
// will ever write is written.
inline constexpr int64_t kRunOver = INT64_MAX;

struct Control {
  enum class Window : uint8_t { kUnchanged = 0, kOpen = 1, kClosed = 2 };
  Window window = Window::kUnchanged;
  int64_t step = -1;   // the step the window is for, -1 when none
  uint64_t flush = 0;  // flush barrier token, 0 = none
  // A clock probe answered: t1 as the collector sent it, t2/t3 when the
  // aggregator received it and answered (its clock). All 0 = none.
  int64_t probe_t1 = 0, probe_t2 = 0, probe_t3 = 0;
  // The run's config (resolved YAML), whose run keys the collector adopts
  // (config.h AdoptRunKeys); sent to each collector once the run's config is
  // known, and again when it changes. "" = unchanged.
  std::string run_config;
  // "worker": another process is the run's controller (the first to say
  // hello as one); this one, which claimed the role too (a Ray actor created
  // by the controller actor inherits its runtime_env), is a worker from now
  // on. kRoleRefused: its hello lacked the run's secret; nothing it sends
  // is taken. "" = unchanged.
  std::string role;
  // true: this aggregator does not know the sender (it restarted, or the
  // connection is new): say hello again and replay what is spooled.
  bool hello = false;
  // The aggregator has written (or skipped) every step that ends before this
  // time (the collector's clock): spooled messages whose events all precede
  // it need not be replayed. 0 = unchanged.
  int64_t release_ns = 0;  // kRunOver: the run's last step is written; nothing more will be
  // The aggregator has this collector's goodbye, and so everything it sent
  // before: at exit, nothing need be left on disk (collector/link.cc Stop).
  bool bye_ack = false;
  // Send a burst of clock probes now: a step waits for this process's
  // clock (it has no estimate, or one too wide for the step).
  bool probe = false;
  // The aggregator's probe path of its own (native/probe_packet.h): UDP to
  // probe_host (""= the host of the endpoint the collector connected to)
  // port probe_port, each probe carrying probe_key. 0 = none (probes go on
  // this connection). Sent with the reply to a Hello.
  uint64_t probe_port = 0;
  std::string probe_host;
  uint64_t probe_key = 0;
  // This aggregator reads the collector's own CLOCK_MONOTONIC (the Hello's
  // clock_domain is its own): the collector's times are placed exactly, and
  // its probes only say what the probe path would have stated, so it
  // probes at its idle rate (collector.h kIdleProbeFactor). Sent with the
  // reply to every Hello; the collector holds it until it says hello again
  // after a lost connection or a Control `hello` (a replay: the aggregator
  // that answers may be another).
  bool same_clock = false;
  bool operator==(const Control&) const = default;
};

// A four-timestamp (NTP-style) clock probe: the collector sends t1 (its
// clock); the aggregator answers with Control probe_t1..t3; the collector
// stamps t4 on receipt and ships the sample in its next Batch (`probes`).
struct Probe {
  uint64_t session = 0;
  int64_t t1 = 0;
  bool operator==(const Probe&) const = default;
};

using Message = std::variant<Hello, Batch, Bye, Expected, Control, Probe>;

// Streaming batch encoder, used by the collector's flush thread so events go
// from ring buffers to bytes without an intermediate copy.
// Call order: Begin, CpuHandler (optional), Strings, ThreadNames, Categories, Gpu, Probes, Arming, Memory
// (each exactly once, may be empty), BeginThreads(n), then n groups of BeginThread + AddEvent, Finish.
class BatchWriter {
 public:
  void Begin(uint64_t session, uint64_t seq, int64_t watermark_ns, uint64_t dropped, uint64_t ack = 0,
             int64_t profiler_cpu_ns = -1);
  void CpuHandler(int64_t samples, int64_t ps);  // Batch::cpu_handler_samples, cpu_handler_ps
  void Strings(const std::vector<std::pair<uint32_t, std::string>>& strings);
  void ThreadNames(const std::vector<std::pair<int64_t, std::string>>& names);
  void Categories(const std::vector<CategoryName>& categories);
  void Gpu(const std::vector<GpuRecord>& records);
  void Probes(const std::vector<ProbeSample>& probes);
  // `reports` false: no `arming` key (Batch::reports_arming).
  void Arming(bool reports, const std::vector<ArmEdge>& edges);
  void Memory(const std::vector<MemorySample>& samples);  // no key when empty
  void BeginThreads(size_t num_threads);
  void BeginThread(int64_t tid, size_t num_events);
  void AddEvent(const Event& e);
  // Returns the encoded message; the writer may then be reused after Begin.
  const msgpack::sbuffer& Finish();

 private:
  // Writes a body key, counted in body_keys_; returns packer_ for its value.
  msgpack::packer<msgpack::sbuffer>& Key(std::string_view key);

  msgpack::sbuffer buffer_;
  msgpack::packer<msgpack::sbuffer> packer_{buffer_};
  int64_t prev_ts_ = 0;
  // The body map's size is left open by Begin and stored by Finish: the
  // count of keys written since (native/wire_pack.h). body_open_: Finish has
  // not stored it yet.
  size_t body_at_ = 0;
  uint32_t body_keys_ = 0;
  bool body_open_ = false;
};

std::string Encode(const Message& message);

struct DecodeResult {
  bool ok = false;
  std::string error;  // set when !ok: what was wrong, and where in the frame
  Message message;
};
DecodeResult Decode(const char* data, size_t size);

}  // namespace rlscope::wire

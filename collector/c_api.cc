// The C ABI in rlscope_collector.h, over the process's Collector.
#include "collector/rlscope_collector.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "collector/collector.h"
#include "native/names.h"

using rlscope::Collector;
using rlscope::CostSampler;
using rlscope::EventKind;
using rlscope::RangeAttr;
using rlscope::Recording;
using rlscope::ThreadState;

namespace {
// The Python API records into the default domain (id 0), like NVTX's. Returns
// the collector and the calling thread's tracked state (Collector::
// TrackedThread) when the API is on (config cpu.python_api; the step calls
// are always on: they delimit the steps).
bool Enter(Collector** c, ThreadState** ts, bool step_call = false) {
  *c = Collector::Instance();
  if (*c == nullptr || (!step_call && !(*c)->config().cpu.python_api)) return false;
  *ts = (*c)->TrackedThread();
  return *ts != nullptr;
}

// Marks: only while armed, checked before the thread is looked up (a first
// call would register it).
bool EnterArmed(Collector** c, ThreadState** ts) {
  *c = Collector::Instance();
  if (*c == nullptr || !(*c)->config().cpu.python_api || !(*c)->armed()) return false;
  *ts = (*c)->CurrentThread();
  return *ts != nullptr;
}

// The calling thread is in rlscope_scratch_scope (a start-up calibration):
// no idle lane, so that its loops pay the argument reading an armed call
// pays, whether the process is armed or not.
thread_local bool t_scratch = false;
}  // namespace

extern "C" {

int rlscope_collector_init(void) {
  try {
    return Collector::Start() != nullptr ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int rlscope_collector_armed(void) {
  Collector* c = Collector::Instance();
  return c != nullptr && c->armed() ? 1 : 0;
}

int rlscope_collector_running(void) { return Collector::Instance() != nullptr ? 1 : 0; }

void rlscope_range_push(const char* name) {
  Collector* c;
  ThreadState* ts;
  if (Enter(&c, &ts)) {
    CostSampler sampler(c, ts);
    c->RangePush(ts, c->needs_names() ? ts->names.Lookup(name) : 0, 0, 0, 0, rlscope::kFlagNone);
  }
}

uint32_t rlscope_intern(const char* name) {
  Collector* c = Collector::Instance();
  if (c == nullptr || name == nullptr) return 0;
  try {
    return c->Intern(name);
  } catch (...) {
    return 0;
  }
}

void rlscope_range_push_id(uint32_t name_id) {
  Collector* c;
  ThreadState* ts;
  if (Enter(&c, &ts) && !rlscope_push_idle()) {
    CostSampler sampler(c, ts);
    c->RangePush(ts, name_id, 0, 0, 0, rlscope::kFlagViaPyRange);
  }
}

uint64_t rlscope_range_start_id(uint32_t name_id) {
  Collector* c;
  ThreadState* ts;
  if (!Enter(&c, &ts)) return 0;
  CostSampler sampler(c, ts);
  return c->RangeStart(ts, name_id, 0, 0, 0, rlscope::kFlagNone);
}

void rlscope_mark_id(uint32_t name_id) {
  Collector* c;
  ThreadState* ts;
  if (EnterArmed(&c, &ts)) {
    CostSampler sampler(c, ts);
    c->Record(ts, EventKind::kMark, name_id, 0, 0, 0, rlscope::kFlagNone);
  }
}

void rlscope_range_push_payload(uint32_t name_id, uint64_t payload) {
  Collector* c;
  ThreadState* ts;
  if (Enter(&c, &ts) && !rlscope_push_idle()) {
    CostSampler sampler(c, ts);
    c->RangePush(ts, name_id, 0, 0, payload, rlscope::kFlagHasPayload | rlscope::kFlagViaPyRange);
  }
}

void rlscope_mark_payload(uint32_t name_id, uint64_t payload) {
  Collector* c;
  ThreadState* ts;
  if (EnterArmed(&c, &ts)) {
    CostSampler sampler(c, ts);
    c->Record(ts, EventKind::kMark, name_id, 0, 0, payload, rlscope::kFlagHasPayload);
  }
}

void rlscope_range_pop(void) {
  Collector* c;
  ThreadState* ts;
  if (Enter(&c, &ts) && !rlscope_pop_idle()) {
    CostSampler sampler(c, ts);
    c->RangePop(ts, 0);  // flagged as its push (kFlagViaPyRange from the Python entry points)
  }
}

int rlscope_recording_idle(void) {
  return (Collector::Hot() & (rlscope::kHotArmedOrWatching | rlscope::kHotOff)) == 0 && !t_scratch ? 1 : 0;
}

int rlscope_push_idle(void) {
  const uint8_t hot = Collector::Hot();
  if ((hot & (rlscope::kHotArmedOrWatching | rlscope::kHotOff)) != 0 || t_scratch) return 0;
  ThreadState* ts = Recording::Current();
  if (ts == nullptr) return 1;  // an untracked thread: the full call does nothing either
  int depth = 0;
  return Recording::FastPush(
             hot, ts, 0, [](RangeAttr*) { return false; }, &depth)
             ? 1
             : 0;
}

int rlscope_pop_idle(void) {
  if ((Collector::Hot() & (rlscope::kHotArmedOrWatching | rlscope::kHotOff)) != 0 || t_scratch) return 0;
  ThreadState* ts = Recording::Current();
  if (ts == nullptr || ts->depth == 0) return 1;  // nothing open: RangePop does nothing either
  const int depth = ts->depth - 1;
  if (depth >= ThreadState::kTrackedDepth || ts->open[depth] != 0) return 0;  // RangePop decides
  ts->depth = depth;
  return 1;
}

// As the NVTX handlers (nvtx_injection.cc): no cpu.python_api gate.
void rlscope_nvtx_push(uint32_t name_id, uint32_t domain_id, uint32_t category, uint64_t payload, uint8_t flags) {
  if (rlscope_push_idle()) return;
  Collector* c = Collector::Instance();
  ThreadState* ts = c != nullptr ? c->TrackedThread() : nullptr;
  if (ts == nullptr) return;
  CostSampler sampler(c, ts);
  c->RangePush(ts, name_id, domain_id, category, payload, flags);
}

void rlscope_nvtx_pop(uint32_t domain_id, uint8_t flags) {
  if (rlscope_pop_idle()) return;
  Collector* c = Collector::Instance();
  ThreadState* ts = c != nullptr ? c->TrackedThread() : nullptr;
  if (ts == nullptr) return;
  CostSampler sampler(c, ts);
  c->RangePop(ts, domain_id, flags);
}

uint64_t rlscope_nvtx_start(uint32_t name_id, uint32_t domain_id, uint32_t category, uint64_t payload, uint8_t flags) {
  Collector* c = Collector::Instance();
  ThreadState* ts = c != nullptr ? c->TrackedThread() : nullptr;
  if (ts == nullptr) return 0;
  CostSampler sampler(c, ts);
  return c->RangeStart(ts, name_id, domain_id, category, payload, flags);
}

void rlscope_nvtx_end(uint32_t domain_id, uint64_t handle, uint8_t flags) {
  rlscope::EndRangeOnAnyThread(domain_id, handle, flags);
}

void rlscope_nvtx_mark(uint32_t name_id, uint32_t domain_id, uint32_t category, uint64_t payload, uint8_t flags) {
  Collector* c = Collector::Instance();
  if (c == nullptr || !c->armed()) return;
  ThreadState* ts = c->CurrentThread();
  if (ts == nullptr) return;
  CostSampler sampler(c, ts);
  c->Record(ts, EventKind::kMark, name_id, domain_id, category, payload, flags);
}

uint64_t rlscope_range_start(const char* name) {
  Collector* c;
  ThreadState* ts;
  if (!Enter(&c, &ts)) return 0;
  CostSampler sampler(c, ts);
  return c->RangeStart(ts, c->start_needs_names(ts) ? ts->names.Lookup(name) : 0, 0, 0, 0, rlscope::kFlagNone);
}

void rlscope_range_end(uint64_t range_id) {
  Collector* c = Collector::Instance();
  if (c == nullptr || range_id == 0) return;
  // The end of a recorded start is recorded on any thread (see RangeEnd).
  // (The end of a dropped start is counted there too.)
  const uint64_t tracked = Collector::kRecordedRangeBit | Collector::kDroppedRangeBit;
  ThreadState* ts = (range_id & tracked) != 0 ? c->CurrentThread() : c->TrackedThread();
  if (ts == nullptr) return;
  CostSampler sampler(c, ts);
  c->RangeEnd(ts, 0, range_id);
}

void rlscope_mark(const char* name) {
  Collector* c;
  ThreadState* ts;
  if (EnterArmed(&c, &ts)) {
    CostSampler sampler(c, ts);
    c->Record(ts, EventKind::kMark, ts->names.Lookup(name), 0, 0, 0, rlscope::kFlagNone);
  }
}

void rlscope_step_begin(int64_t step) {
  Collector* c;
  ThreadState* ts;
  if (Enter(&c, &ts, /*step_call=*/true)) {
    CostSampler sampler(c, ts);
    c->RangePush(ts, ts->names.Lookup(rlscope::names::kStep), 0, 0, static_cast<uint64_t>(step),
                 rlscope::kFlagHasPayload);
  }
}

int rlscope_claim_controller(void) {
  Collector* c = Collector::Instance();
  return c != nullptr && c->ClaimController() ? 1 : 0;
}

void rlscope_set_next_step(int64_t step) {
  if (Collector* c = Collector::Instance()) c->SetNextStep(step);
}

void rlscope_step_end(void) {
  Collector* c;
  ThreadState* ts;
  if (Enter(&c, &ts, /*step_call=*/true)) {
    CostSampler sampler(c, ts);
    c->RangePop(ts, 0);
  }
}

void rlscope_capture_start(void) {
  if (Collector* c = Collector::Instance()) c->SetCaptureActive(true);
}

void rlscope_capture_stop(void) {
  if (Collector* c = Collector::Instance()) c->SetCaptureActive(false);
}

int rlscope_flush(int timeout_ms) {
  Collector* c = Collector::Instance();
  return c != nullptr && c->Flush(timeout_ms) ? 1 : 0;
}

void rlscope_collector_shutdown(void) {
  if (Collector* c = Collector::Instance()) c->Shutdown();
}

void rlscope_set_cost(const char* key, double ns) {
  Collector* c = Collector::Instance();
  if (c == nullptr || key == nullptr || !(ns >= 0 && ns < 1e9)) return;
  try {
    c->SetCost(key, ns);
  } catch (...) {
  }
}

void rlscope_own_thread(const char* name) {
  Collector* c = Collector::Instance();
  if (c == nullptr) return;
  if (name != nullptr && *name != '\0') {
    char kept[16] = {};  // the kernel keeps 15 bytes
    std::strncpy(kept, name, sizeof(kept) - 1);
    pthread_setname_np(pthread_self(), kept);
  }
  try {
    c->AddOwnThread(static_cast<int64_t>(syscall(SYS_gettid)));
  } catch (...) {
  }
}

double rlscope_cost(const char* key) {
  Collector* c = Collector::Instance();
  if (c == nullptr || key == nullptr) return -1;
  try {
    return c->Cost(key);
  } catch (...) {
    return -1;
  }
}

int rlscope_calibrate(void) {
  Collector* c = Collector::Instance();
  if (c == nullptr) return 0;
  try {
    c->Calibrate();
    return 1;
  } catch (...) {
    return 0;
  }
}

int rlscope_scratch_scope(int on) {
  Collector* c = Collector::Instance();
  if (c == nullptr) return 0;
  try {
    if (!c->ScratchScope(on != 0)) return 0;
    t_scratch = on != 0;
    return 1;
  } catch (...) {
    return 0;
  }
}

void rlscope_set_label(const char* key, const char* value) {
  Collector* c = Collector::Instance();
  if (c == nullptr || key == nullptr || value == nullptr) return;
  try {
    c->SetLabel(key, value);
  } catch (...) {
  }
}

void rlscope_report_expected(const char* const* records, uint64_t n) {
  Collector* c = Collector::Instance();
  if (c == nullptr || (records == nullptr && n > 0)) return;
  try {
    std::vector<std::map<std::string, std::string>> processes;
    for (uint64_t i = 0; i < n; ++i) {
      std::map<std::string, std::string> entry;
      std::string record = records[i] != nullptr ? records[i] : "";
      size_t start = 0;
      while (start < record.size()) {
        size_t end = record.find('\n', start);
        if (end == std::string::npos) end = record.size();
        const std::string line = record.substr(start, end - start);
        const size_t eq = line.find('=');
        if (eq != std::string::npos) entry[line.substr(0, eq)] = line.substr(eq + 1);
        start = end + 1;
      }
      processes.push_back(std::move(entry));
    }
    c->ReportExpected(std::move(processes));
  } catch (...) {
  }
}

void rlscope_set_py_module_reader(rlscope_py_module_reader_t reader, const char* what) {
  rlscope::CpuSampler::SetPythonReader(reader, what);
}

void rlscope_set_py_gil(const void* begin, uint64_t size) { rlscope::ThreadStates::SetGil(begin, size); }

int64_t rlscope_test_clock_ns(void) {
  Collector* c = Collector::Instance();
  return c != nullptr ? c->TestClockNs() : -1;
}

void rlscope_collector_stats(rlscope_stats_t* out) {
  if (out == nullptr) return;
  *out = rlscope_stats_t{};
  if (Collector* c = Collector::Instance()) c->Stats(out);
}

void rlscope_sampler_stats(rlscope_sampler_stats_t* out) {
  if (out == nullptr) return;
  *out = rlscope_sampler_stats_t{};
  if (Collector* c = Collector::Instance()) c->SamplerStats(out);
}

}  // extern "C"

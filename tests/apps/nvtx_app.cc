// A test program instrumented only with the official NVTX3 headers (C API and
// nvtx3.hpp), as a user's program would be. It knows nothing of rlscope: run
// it under the collector (NVTX_INJECTION64_PATH) and compare the merged trace
// with the JSON report it writes of what it did and what it measured.
//
//   nvtx_app --steps N --report FILE [--step-ms MS]
//
// Each step (an NVTX range named "step", the controller convention) holds:
// push/pop "outer" > "inner", a nvtx3 scoped range "cpp_scoped" in domain
// "app_domain" with a registered string, a mark "checkpoint" with payload, a
// start/end range "handoff" started here and ended on a helper thread, and a
// helper thread named "helper" (nvtxNameOsThreadA) running push/pop "helper_work".
// For each range the report brackets its begin and its end between the
// program's own CLOCK_MONOTONIC readings just before and just after the NVTX
// call (begin_ns..begin_hi_ns, end_lo_ns..end_ns): the recorded times lie
// inside, however long a preemption between a reading and the call.
#include <nvtx3/nvtx3.hpp>

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct AppDomain {
  static constexpr char const* name{"app_domain"};
};

// CLOCK_MONOTONIC ns (steady_clock on Linux), the collector's clock.
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Measured {
  std::string name;
  std::string thread;
  int64_t step;
  int64_t begin_ns, begin_hi_ns, end_lo_ns, end_ns;
};

void Spin(double ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(ms * 1000));
  while (std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  double step_ms = 20;
  std::string report;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--step-ms") && i + 1 < argc)
      step_ms = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--report") && i + 1 < argc)
      report = argv[++i];
  }
  const int main_tid = static_cast<int>(syscall(SYS_gettid));
  nvtxNameOsThreadA(main_tid, "app-main");
  std::vector<Measured> measured;
  static nvtx3::registered_string_in<AppDomain> scoped_name{"cpp_scoped"};

  for (int step = 1; step <= steps; ++step) {
    Measured st{"step", "app-main", step, NowNs(), 0, 0, 0};
    nvtxRangePushA("step");
    st.begin_hi_ns = NowNs();
    {
      Measured outer{"outer", "app-main", step, NowNs(), 0, 0, 0};
      nvtxRangePushA("outer");
      outer.begin_hi_ns = NowNs();
      Measured inner{"inner", "app-main", step, NowNs(), 0, 0, 0};
      nvtxRangePushA("inner");
      inner.begin_hi_ns = NowNs();
      Spin(step_ms * 0.2);
      inner.end_lo_ns = NowNs();
      nvtxRangePop();
      inner.end_ns = NowNs();
      Spin(step_ms * 0.1);
      outer.end_lo_ns = NowNs();
      nvtxRangePop();
      outer.end_ns = NowNs();
      measured.push_back(outer);
      measured.push_back(inner);
    }
    {
      Measured scoped{"cpp_scoped", "app-main", step, NowNs(), 0, 0, 0};
      {
        nvtx3::scoped_range_in<AppDomain> r{scoped_name};
        scoped.begin_hi_ns = NowNs();
        Spin(step_ms * 0.1);
        scoped.end_lo_ns = NowNs();
      }
      scoped.end_ns = NowNs();
      measured.push_back(scoped);
    }
    nvtxEventAttributes_t mark{};
    mark.version = NVTX_VERSION;
    mark.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    mark.messageType = NVTX_MESSAGE_TYPE_ASCII;
    mark.message.ascii = "checkpoint";
    mark.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    mark.payload.llValue = step * 100;
    nvtxMarkEx(&mark);

    Measured handoff{"handoff", "app-main", step, NowNs(), 0, 0, 0};
    nvtxRangeId_t handoff_id = nvtxRangeStartA("handoff");
    handoff.begin_hi_ns = NowNs();
    std::thread helper([&] {
      nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), "helper");
      Measured work{"helper_work", "helper", step, NowNs(), 0, 0, 0};
      nvtxRangePushA("helper_work");
      work.begin_hi_ns = NowNs();
      Spin(step_ms * 0.2);
      work.end_lo_ns = NowNs();
      nvtxRangePop();
      work.end_ns = NowNs();
      measured.push_back(work);
      handoff.end_lo_ns = NowNs();
      nvtxRangeEnd(handoff_id);
      handoff.end_ns = NowNs();
    });
    helper.join();
    measured.push_back(handoff);
    Spin(step_ms * 0.3);
    st.end_lo_ns = NowNs();
    nvtxRangePop();  // step
    st.end_ns = NowNs();
    measured.push_back(st);
    Spin(step_ms * 0.1);  // a gap between steps
  }

  if (!report.empty()) {
    std::ofstream out(report);
    out << "{\"pid\": " << getpid() << ", \"main_tid\": " << main_tid << ", \"ranges\": [";
    for (size_t i = 0; i < measured.size(); ++i) {
      const Measured& m = measured[i];
      out << (i ? ",\n" : "\n") << "{\"name\": \"" << m.name << "\", \"thread\": \"" << m.thread
          << "\", \"step\": " << m.step << ", \"begin_ns\": " << m.begin_ns << ", \"begin_hi_ns\": " << m.begin_hi_ns
          << ", \"end_lo_ns\": " << m.end_lo_ns << ", \"end_ns\": " << m.end_ns << "}";
    }
    out << "]}\n";
  }
  return 0;
}

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

struct Measured {
  std::string name;
  std::string thread;
  int64_t step;
  double us;
};

double Us(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

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
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--step-ms") && i + 1 < argc) step_ms = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--report") && i + 1 < argc) report = argv[++i];
  }
  using clock = std::chrono::steady_clock;
  const int main_tid = static_cast<int>(syscall(SYS_gettid));
  nvtxNameOsThreadA(main_tid, "app-main");
  std::vector<Measured> measured;
  static nvtx3::registered_string_in<AppDomain> scoped_name{"cpp_scoped"};

  for (int step = 1; step <= steps; ++step) {
    const auto s0 = clock::now();
    nvtxRangePushA("step");
    {
      const auto o0 = clock::now();
      nvtxRangePushA("outer");
      const auto i0 = clock::now();
      nvtxRangePushA("inner");
      Spin(step_ms * 0.2);
      nvtxRangePop();
      const auto i1 = clock::now();
      Spin(step_ms * 0.1);
      nvtxRangePop();
      const auto o1 = clock::now();
      measured.push_back({"outer", "app-main", step, Us(o0, o1)});
      measured.push_back({"inner", "app-main", step, Us(i0, i1)});
    }
    {
      const auto c0 = clock::now();
      {
        nvtx3::scoped_range_in<AppDomain> r{scoped_name};
        Spin(step_ms * 0.1);
      }
      measured.push_back({"cpp_scoped", "app-main", step, Us(c0, clock::now())});
    }
    nvtxEventAttributes_t mark{};
    mark.version = NVTX_VERSION;
    mark.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    mark.messageType = NVTX_MESSAGE_TYPE_ASCII;
    mark.message.ascii = "checkpoint";
    mark.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    mark.payload.llValue = step * 100;
    nvtxMarkEx(&mark);

    const auto h0 = clock::now();
    nvtxRangeId_t handoff = nvtxRangeStartA("handoff");
    clock::time_point h1;
    std::thread helper([&] {
      nvtxNameOsThreadA(static_cast<uint32_t>(syscall(SYS_gettid)), "helper");
      const auto w0 = clock::now();
      nvtxRangePushA("helper_work");
      Spin(step_ms * 0.2);
      nvtxRangePop();
      measured.push_back({"helper_work", "helper", step, Us(w0, clock::now())});
      nvtxRangeEnd(handoff);
      h1 = clock::now();
    });
    helper.join();
    measured.push_back({"handoff", "app-main", step, Us(h0, h1)});
    Spin(step_ms * 0.3);
    nvtxRangePop();  // step
    measured.push_back({"step", "app-main", step, Us(s0, clock::now())});
    Spin(step_ms * 0.1);  // a gap between steps
  }

  if (!report.empty()) {
    std::ofstream out(report);
    out << "{\"pid\": " << getpid() << ", \"main_tid\": " << main_tid << ", \"ranges\": [";
    for (size_t i = 0; i < measured.size(); ++i) {
      out << (i ? ",\n" : "\n") << "{\"name\": \"" << measured[i].name << "\", \"thread\": \""
          << measured[i].thread << "\", \"step\": " << measured[i].step << ", \"us\": " << measured[i].us << "}";
    }
    out << "]}\n";
  }
  return 0;
}

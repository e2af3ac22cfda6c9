// CUDA injection entry point and the cudaProfilerApi capture trigger
// (cupti_trigger.h). libcupti is reached only through dlopen/dlsym; the CUPTI
// headers supply types and constants.
#include "collector/cupti_trigger.h"

#include <mutex>

#if RLSCOPE_HAVE_CUPTI
#include <cupti_driver_cbid.h>
#include <cupti_result.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collector/collector.h"
#include "collector/gpu_activity.h"

namespace rlscope {
namespace {

// Once per process, from InitializeInjection: the cudaProfilerApi trigger
// when the config asks for it, GPU activity tracing when any gpu.* kind is
// on. Both share one libcupti. Never throws.
void StartCupti() noexcept {
  Collector* c = nullptr;
  try {
    c = Collector::Start();
    if (c == nullptr) return;
    const bool want_trigger = c->trigger() == Trigger::kCudaProfilerApi;
    // An unselected rank never records: it takes no CUPTI subscription either.
    const bool want_gpu = c->selected() && GpuTracingWanted(c->config());
    if (!want_trigger && !want_gpu) return;
    CuptiApi api;
    std::string load_why;
    const bool loaded = LoadCuptiLibrary(&api, &load_why);
    std::string trigger_why, gpu_why;
    if (want_trigger) {
      trigger_why = load_why;
      if (loaded && InstallCudaProfilerTrigger(api, c, &trigger_why)) trigger_why.clear();
    }
    if (want_gpu) {
      if (!loaded) {
        gpu_why = load_why;
        c->SetLabel("gpu_tracing", "unavailable: " + gpu_why);
      } else if (StartGpuTracing(c, api, &gpu_why)) {  // sets the label either way
        gpu_why.clear();
      }
    }
    // One line in all: both failures usually share their cause (no driver).
    std::string line;
    if (!trigger_why.empty()) {
      line = "the capture_range cudaProfilerApi trigger is unavailable: " + trigger_why +
             "; the capture stays closed in this process";
    }
    if (!gpu_why.empty()) {
      if (!line.empty()) line += "; ";
      line += "GPU tracing is unavailable (recording CPU only)";
      if (gpu_why != trigger_why) line += ": " + gpu_why;
    }
    if (!line.empty()) std::fprintf(stderr, "rlscope: %s\n", line.c_str());
  } catch (...) {
    std::fprintf(stderr, "rlscope: CUPTI setup failed: internal error; recording CPU only\n");
  }
}

}  // namespace

TriggerAction CudaProfilerTriggerAction(uint32_t domain, uint32_t cbid, int callback_site, int driver_result) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return TriggerAction::kNone;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart && callback_site == CUPTI_API_EXIT &&
      driver_result == CUDA_SUCCESS) {
    return TriggerAction::kOpen;
  }
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStop && callback_site == CUPTI_API_ENTER) {
    return TriggerAction::kClose;
  }
  return TriggerAction::kNone;
}

void CUPTIAPI CudaProfilerTriggerCallback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                          const void* cbdata) {
  if (userdata == nullptr || cbdata == nullptr) return;
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* d = static_cast<const CUpti_CallbackData*>(cbdata);
  int result = CUDA_SUCCESS;
  if (d->callbackSite == CUPTI_API_EXIT && d->functionReturnValue != nullptr) {
    result = *static_cast<const CUresult*>(d->functionReturnValue);
  }
  switch (CudaProfilerTriggerAction(domain, cbid, d->callbackSite, result)) {
    case TriggerAction::kOpen: static_cast<Collector*>(userdata)->SetCaptureActive(true); break;
    case TriggerAction::kClose: static_cast<Collector*>(userdata)->SetCaptureActive(false); break;
    case TriggerAction::kNone: break;
  }
}

bool InstallCudaProfilerTrigger(const CuptiApi& api, void* userdata, std::string* why) {
  CUpti_SubscriberHandle sub = nullptr;
  CUptiResult r = api.subscribe(&sub, &CudaProfilerTriggerCallback, userdata);
  if (r != CUPTI_SUCCESS) {
    *why = "cuptiSubscribe failed: " + CuptiResultText(api, r);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      *why += "; another CUPTI tool (nsys, ncu, torch.profiler, a debugger) is subscribed";
    }
    return false;
  }
  for (CUpti_CallbackId cbid : {CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop}) {
    r = api.enable_callback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    if (r != CUPTI_SUCCESS) {
      *why = "cuptiEnableCallback failed: " + CuptiResultText(api, r);
      api.unsubscribe(sub);
      return false;
    }
  }
  return true;
}

}  // namespace rlscope
#endif  // RLSCOPE_HAVE_CUPTI

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  try {
#if RLSCOPE_HAVE_CUPTI
    static std::once_flag once;
    std::call_once(once, [] { rlscope::StartCupti(); });
#endif
  } catch (...) {
    // std::call_once itself may throw std::system_error; never let it out.
  }
  return 1;
}

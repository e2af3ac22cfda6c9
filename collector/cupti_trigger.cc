// CUDA injection entry point and the cudaProfilerApi capture trigger
// (cupti_trigger.h). libcupti is reached only through dlopen/dlsym; the CUPTI
// headers supply types and constants.
#include "collector/cupti_trigger.h"

#include <mutex>

#if RLSCOPE_HAVE_CUPTI
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collector/collector.h"

namespace rlscope {
namespace {

std::string ResultText(const CuptiApi& api, CUptiResult r) {
  const char* s = nullptr;
  if (api.get_result_string == nullptr || api.get_result_string(r, &s) != CUPTI_SUCCESS ||
      s == nullptr) {
    s = "unknown CUPTI error";
  }
  return std::string(s) + " (" + std::to_string(static_cast<int>(r)) + ")";
}

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

// Loads libcupti from the first candidate that opens and has all four
// functions. The library stays loaded for the life of the process: the
// subscription points into it.
bool LoadCupti(CuptiApi* api, std::string* why) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("RLSCOPE_CUPTI_LIBRARY"); env != nullptr && *env != 0) {
    candidates.emplace_back(env);
  }
  for (const char* c : {"libcupti.so", "libcupti.so.13", "libcupti.so.12",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                        "/usr/local/cuda/lib64/libcupti.so"}) {
    candidates.emplace_back(c);
  }
  std::string first_error;
  for (const std::string& path : candidates) {
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      if (first_error.empty()) {
        const char* e = dlerror();
        first_error = e != nullptr ? e : path + ": cannot open";
      }
      continue;
    }
    CuptiApi a;
    if (Resolve(lib, "cuptiSubscribe", &a.subscribe) &&
        Resolve(lib, "cuptiEnableCallback", &a.enable_callback) &&
        Resolve(lib, "cuptiUnsubscribe", &a.unsubscribe) &&
        Resolve(lib, "cuptiGetResultString", &a.get_result_string)) {
      *api = a;
      return true;
    }
    if (first_error.empty()) first_error = path + " lacks the CUPTI callback API";
    dlclose(lib);
  }
  *why = "libcupti not found (" + first_error +
         "); set RLSCOPE_CUPTI_LIBRARY to the path of libcupti.so";
  return false;
}

// Once per process, from InitializeInjection. Never throws.
void StartCudaProfilerTrigger() noexcept {
  try {
    Collector* c = Collector::Start();
    if (c == nullptr || c->config().capture_range != "cudaProfilerApi") return;
    CuptiApi api;
    std::string why;
    if (LoadCupti(&api, &why) && InstallCudaProfilerTrigger(api, c, &why)) return;
    std::fprintf(stderr,
                 "rlscope: the capture_range cudaProfilerApi trigger is unavailable: %s; "
                 "the capture stays closed in this process\n",
                 why.c_str());
  } catch (...) {
    std::fprintf(stderr,
                 "rlscope: the capture_range cudaProfilerApi trigger is unavailable: internal "
                 "error; the capture stays closed in this process\n");
  }
}

}  // namespace

TriggerAction CudaProfilerTriggerAction(uint32_t domain, uint32_t cbid, int callback_site,
                                        int driver_result) {
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

void CUPTIAPI CudaProfilerTriggerCallback(void* userdata, CUpti_CallbackDomain domain,
                                          CUpti_CallbackId cbid, const void* cbdata) {
  if (userdata == nullptr || cbdata == nullptr) return;
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* d = static_cast<const CUpti_CallbackData*>(cbdata);
  int result = CUDA_SUCCESS;
  if (d->callbackSite == CUPTI_API_EXIT && d->functionReturnValue != nullptr) {
    result = *static_cast<const CUresult*>(d->functionReturnValue);
  }
  switch (CudaProfilerTriggerAction(domain, cbid, d->callbackSite, result)) {
    case TriggerAction::kOpen:
      static_cast<Collector*>(userdata)->SetCaptureActive(true);
      break;
    case TriggerAction::kClose:
      static_cast<Collector*>(userdata)->SetCaptureActive(false);
      break;
    case TriggerAction::kNone:
      break;
  }
}

bool InstallCudaProfilerTrigger(const CuptiApi& api, void* userdata, std::string* why) {
  CUpti_SubscriberHandle sub = nullptr;
  CUptiResult r = api.subscribe(&sub, &CudaProfilerTriggerCallback, userdata);
  if (r != CUPTI_SUCCESS) {
    *why = "cuptiSubscribe failed: " + ResultText(api, r);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      *why += "; another CUPTI tool (nsys, ncu, torch.profiler, a debugger) is subscribed";
    }
    return false;
  }
  for (CUpti_CallbackId cbid :
       {CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop}) {
    r = api.enable_callback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
    if (r != CUPTI_SUCCESS) {
      *why = "cuptiEnableCallback failed: " + ResultText(api, r);
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
    std::call_once(once, [] { rlscope::StartCudaProfilerTrigger(); });
#endif
  } catch (...) {
    // std::call_once itself may throw std::system_error; never let it out.
  }
  return 1;
}

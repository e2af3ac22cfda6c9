// libcupti's loader (cupti_api.h).
#include "collector/cupti_api.h"

#if RLSCOPE_HAVE_CUPTI
#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace rlscope {
namespace {

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

std::string CuptiResultText(const CuptiApi& api, CUptiResult r) {
  const char* s = nullptr;
  if (api.get_result_string == nullptr || api.get_result_string(r, &s) != CUPTI_SUCCESS || s == nullptr) {
    s = "unknown CUPTI error";
  }
  return std::string(s) + " (" + std::to_string(static_cast<int>(r)) + ")";
}

// Loads libcupti from the first candidate that opens and has the four
// callback-API functions; the activity functions are resolved when present.
// The library stays loaded for the life of the process: the subscription and
// the activity callbacks point into it.
bool LoadCuptiLibrary(CuptiApi* api, std::string* why) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("RLSCOPE_CUPTI_LIBRARY"); env != nullptr && *env != 0) {
    candidates.emplace_back(env);
  }
  for (const char* c : {"libcupti.so", "libcupti.so.13", "libcupti.so.12",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so"}) {
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
    if (Resolve(lib, "cuptiSubscribe", &a.subscribe) && Resolve(lib, "cuptiEnableCallback", &a.enable_callback) &&
        Resolve(lib, "cuptiUnsubscribe", &a.unsubscribe) &&
        Resolve(lib, "cuptiGetResultString", &a.get_result_string)) {
      // Optional: StartGpuTracing names any that is missing.
      Resolve(lib, "cuptiActivityRegisterTimestampCallback", &a.activity_register_timestamp_callback);
      Resolve(lib, "cuptiActivityRegisterCallbacks", &a.activity_register_callbacks);
      Resolve(lib, "cuptiActivityEnable", &a.activity_enable);
      Resolve(lib, "cuptiActivityDisable", &a.activity_disable);
      Resolve(lib, "cuptiActivityFlushAll", &a.activity_flush_all);
      Resolve(lib, "cuptiActivityGetNextRecord", &a.activity_get_next_record);
      Resolve(lib, "cuptiActivityGetNumDroppedRecords", &a.activity_get_num_dropped_records);
      Resolve(lib, "cuptiSetThreadIdType", &a.set_thread_id_type);
      Resolve(lib, "cuptiGetCallbackName", &a.get_callback_name);
      *api = a;
      return true;
    }
    if (first_error.empty()) first_error = path + " lacks the CUPTI callback API";
    dlclose(lib);
  }
  *why = "libcupti not found (" + first_error + "); set RLSCOPE_CUPTI_LIBRARY to the path of libcupti.so";
  return false;
}

}  // namespace rlscope
#endif  // RLSCOPE_HAVE_CUPTI

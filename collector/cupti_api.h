// libcupti, reached only through dlopen/dlsym (never linked, so the
// collector does not depend on it): the table of the functions the
// cudaProfilerApi trigger (cupti_trigger.h) and GPU activity tracing
// (gpu_activity.h) call, and its loader. The CUPTI headers supply types and
// constants. Only with RLSCOPE_HAVE_CUPTI.
#pragma once

#if RLSCOPE_HAVE_CUPTI
#include <cupti_activity.h>  // CUPTI's header (angle brackets: not this project's)
#include <cupti_callbacks.h>

#include <string>

namespace rlscope {

// The libcupti functions the trigger and GPU activity tracing
// (gpu_activity.h) use, resolved with dlsym (or faked by tests). The first
// four are non-null in a loaded table; the activity functions are resolved
// when the library has them and are null otherwise (StartGpuTracing then
// reports which one is missing).
struct CuptiApi {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiGetResultString) get_result_string = nullptr;
  // Activity API.
  decltype(&cuptiActivityRegisterTimestampCallback) activity_register_timestamp_callback = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) activity_register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) activity_enable = nullptr;
  decltype(&cuptiActivityDisable) activity_disable = nullptr;
  decltype(&cuptiActivityFlushAll) activity_flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) activity_get_next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) activity_get_num_dropped_records = nullptr;
  decltype(&cuptiSetThreadIdType) set_thread_id_type = nullptr;
  decltype(&cuptiGetCallbackName) get_callback_name = nullptr;
};

// Loads libcupti (dlopen, never linked): $RLSCOPE_CUPTI_LIBRARY, then the
// usual names and toolkit paths; the first that opens and has the callback
// API wins, and stays loaded for the life of the process. On failure returns
// false with `*why` saying what was tried.
bool LoadCuptiLibrary(CuptiApi* api, std::string* why);

// "<CUPTI's error string> (<code>)", through api.get_result_string when set.
std::string CuptiResultText(const CuptiApi& api, CUptiResult r);

}  // namespace rlscope
#endif  // RLSCOPE_HAVE_CUPTI

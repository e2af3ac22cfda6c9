// CUDA injection and the `capture_range: cudaProfilerApi` trigger.
//
// When CUDA_INJECTION64_PATH names librlscope_collector.so, the CUDA driver
// calls InitializeInjection once, during cuInit. If this process's collector
// runs with capture_range cudaProfilerApi, it dlopens libcupti (never linked,
// so the collector does not depend on it) and subscribes to the driver's
// cuProfilerStart/cuProfilerStop callbacks, which cudaProfilerStart/Stop and
// torch.cuda.profiler.start/stop forward to: the capture opens when
// cuProfilerStart returns and closes when cuProfilerStop is entered. When any
// gpu.* kind is enabled it also starts GPU activity tracing on the same
// libcupti (gpu_activity.h), which sets the label gpu_tracing.
//
// Without the CUPTI headers at build time (RLSCOPE_HAVE_CUPTI unset) only
// InitializeInjection exists, and it does nothing.
#pragma once

#include <cstdint>
#include <string>

#if RLSCOPE_HAVE_CUPTI
// Angle brackets: <cupti_activity.h> is CUPTI's header, not collector/cupti_activity.h.
#include <cupti_callbacks.h>

#include "collector/cupti_api.h"
#endif

// The CUDA_INJECTION64_PATH entry point. Idempotent, never throws, always
// returns 1 (the driver treats 0 as an injection failure). Calls no CUDA
// runtime or driver function, as the driver requires at this point. Any
// reason the trigger or GPU tracing cannot work is printed in one line to
// stderr; the process goes on (capture closed, CPU only).
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void);

#if RLSCOPE_HAVE_CUPTI
namespace rlscope {

enum class TriggerAction { kNone, kOpen, kClose };

// What one CUPTI callback means for the capture. Pure. cuProfilerStart
// (driver domain) opens it at CUPTI_API_EXIT when `driver_result` (the call's
// CUresult; ignored at entry) is CUDA_SUCCESS; cuProfilerStop closes it at
// CUPTI_API_ENTER, so nothing after the stop call began is recorded. Anything
// else is kNone, including the runtime domain's cudaProfilerStart/Stop: they
// forward to the driver calls, which are the only ones subscribed.
TriggerAction CudaProfilerTriggerAction(uint32_t domain, uint32_t cbid, int callback_site, int driver_result);

// The subscribed callback. `userdata` is the Collector*; `cbdata` a
// CUpti_CallbackData for the driver and runtime domains. Runs synchronously on
// the thread calling into the driver: two relaxed stores, no locks.
void CUPTIAPI CudaProfilerTriggerCallback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                          const void* cbdata);

// Subscribes CudaProfilerTriggerCallback with `userdata` and enables the two
// driver callbacks. On failure undoes the subscription and returns false with
// `*why` naming the failed call and CUPTI's error.
bool InstallCudaProfilerTrigger(const CuptiApi& api, void* userdata, std::string* why);

}  // namespace rlscope
#endif  // RLSCOPE_HAVE_CUPTI

// The CUPTI activity record structs of the toolkit this collector is built
// against (gpu_activity.cc reads them; gpu_tracing.cc starts tracing only
// where they are known). Included only where RLSCOPE_HAVE_CUPTI.
#pragma once

#include <cupti_activity.h>
#include <cupti_version.h>

// The record structs of this toolkit. New CUPTI versions append fields and
// bump the struct's number; the offsets read below are pinned by the
// static_asserts, so a header whose layout moved fails to compile here rather
// than misreading records. Unknown versions build the stub at the bottom
// (StartGpuTracing reports "unsupported CUPTI_API_VERSION").
#if CUPTI_API_VERSION >= 130001 && CUPTI_API_VERSION < 130100
#define RLSCOPE_CUPTI_ACTIVITY_SUPPORTED 1
namespace rlscope::cupti_structs {
using Kernel = CUpti_ActivityKernel10;
using Memcpy = CUpti_ActivityMemcpy6;
using Memset = CUpti_ActivityMemset4;
using Api = CUpti_ActivityAPI;
using Sync = CUpti_ActivitySynchronization2;
using Overhead = CUpti_ActivityOverhead3;
using Memory = CUpti_ActivityMemory4;
}  // namespace rlscope::cupti_structs
#else
#define RLSCOPE_CUPTI_ACTIVITY_SUPPORTED 0
#endif

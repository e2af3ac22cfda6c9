// A step's trace, format-free: walks a StepProfile into a TraceSink
// (trace_sink.h). What a step's trace shows is decided here once; the JSON
// and Perfetto writers only encode it.
//
// Tracks: one process per collector, labelled "host / name (role, rank R) /
// pid P", controller first then by rank; one thread track per recording
// thread; push/pop ranges as slices; start/end ranges as async ranges (by
// range id, since they may end on another thread); marks as instants; GPU
// kernels, copies and sets on a track per (device, stream), API calls on
// their thread, a flow from each launch to what it launched; per sampled
// thread a track of CPU-category runs and one of off-CPU reasons.
#pragma once

#include <cstdint>
#include <map>

#include "aggregator/step_profile.h"
#include "aggregator/trace_sink.h"

namespace rlscope {

// `trace_pids`: each process's pid in the trace, by session (unique when
// two hosts share a pid).
void StepTraceEvents(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids, TraceSink* sink);

// Track ids of their own, far above real thread ids: a GPU stream's, and a
// sampled thread's CPU and off-CPU tracks (beside the thread).
int64_t StreamTrackId(uint32_t device, uint32_t stream);
int64_t SampleTrackId(int64_t tid);
int64_t OffCpuTrackId(int64_t tid);

}  // namespace rlscope

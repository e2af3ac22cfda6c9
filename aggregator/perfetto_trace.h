// Perfetto's native trace format: a step's trace (step_trace.h) as
// protobuf TracePackets of TrackEvents (perfetto.dev: "Converting
// arbitrary timestamped data to Perfetto"), which ui.perfetto.dev and
// trace_processor load without the JSON importer's limits.
//
// Encoding (hand-written protobuf, no library): one packet sequence per
// process (trusted_packet_sequence_id 1, 2, ... in step order), its first
// packet clearing incremental state and setting the sequence's defaults: an
// incremental clock (id 64, snapshotted against BOOTTIME at the sequence's
// first time: every later packet's timestamp is the delta from the one
// before on its sequence, so packets of a sequence are in time order).
// Track descriptors: the process (ProcessDescriptor pid and label), each
// thread (ThreadDescriptor), and tracks of their own for GPU streams,
// sampled CPU and async ranges (named, under the process's track, one
// lane per overlapping start/end range). Event names, categories and
// argument names are interned per sequence, each in the first packet that
// uses it. A slice is a SLICE_BEGIN/SLICE_END pair (its args on the
// begin; the raw times before correction as "raw_shift_ns", begin raw
// minus corrected, and "raw_end_shift_ns"); slices on one track nest (a
// slice that would end past its parent ends with it); flows are flow_ids
// on the launch's begin and terminating_flow_ids on the launched; counters
// are COUNTER events (double_counter_value) on counter tracks named under
// the process.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "aggregator/step_profile.h"

namespace rlscope {

// The step as a .pftrace file's bytes.
std::string StepTracePerfetto(const StepProfile& step, const std::map<uint64_t, int64_t>& trace_pids);

}  // namespace rlscope

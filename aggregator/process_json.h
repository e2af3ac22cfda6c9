// What summary.json and run.json both say about a process: its identity,
// its clock against the aggregator's, and expected processes that never
// connected (docs/summary_format.md). No I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/json_writer.h"
#include "aggregator/step_profile.h"

namespace rlscope {

// A session as every output writes it: 16 hex digits (run.json reads it back).
std::string HexSession(uint64_t session);
// Its identity keys (session, label, host, pid, rank, role, name, labels);
// `selected`: profiled under the run's config (the aggregator's decision).
void WriteIdentity(JsonWriter& w, const ProcessView& p, bool selected);
// "clock": its clock against the aggregator's (clock_fit.h).
void WriteClock(JsonWriter& w, const ProcessView& p);
// An array of expected processes, each an object of its identity strings.
void WriteExpected(JsonWriter& w, const std::vector<ExpectedProcess>& list);

}  // namespace rlscope

// rlscope_ray._native, one file per concept (native_module.cc composes
// them): each adds its functions to the module.
#pragma once

#include <pybind11/pybind11.h>

namespace rlscope_py {

// The collector's C ABI (collector/rlscope_collector.h), one function per
// call, no policy; the CPU sampler's Python frame reader registered
// (collector_bindings.cc).
void AddCollectorBindings(pybind11::module_& m);
// Config checks and the one merge of config layers (native/config.h), and
// the endpoint rule (config_bindings.cc).
void AddConfigBindings(pybind11::module_& m);
// The breakdown engine's interval sweeps (aggregator/breakdown.h), for
// rlscope_ray.analysis (analysis_bindings.cc).
void AddAnalysisBindings(pybind11::module_& m);

}  // namespace rlscope_py

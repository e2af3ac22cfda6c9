// rlscope_ray._native: the private module under the rlscope_ray package,
// one file per concept (bindings.h): the collector's C ABI
// (collector_bindings.cc), config checks and merges (config_bindings.cc),
// interval sweeps (analysis_bindings.cc), the per-call range and mark in raw
// CPython (fast_api.cc), the `nvtx` package's entry points (nvtx_fast.cc),
// and the names shared with C++ (native/names.h).
#include <pybind11/pybind11.h>

#include "native/names.h"
#include "python/bindings/bindings.h"
#include "python/bindings/fast_api.h"

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
  m.doc() = "rlscope-ray collector bindings (private; use the rlscope_ray package)";
  // range and mark: raw CPython, the per-call path (fast_api.cc).
  if (!rlscope_py::AddFastApi(m.ptr())) throw py::error_already_set();
  // The `nvtx` package's calls, recorded as its NVTX events (nvtx_fast.cc).
  if (!rlscope_py::AddNvtxFast(m.ptr())) throw py::error_already_set();
  // Names that cross languages (native/names.h): rlscope_ray._native.names.STEP, ...
  py::module_ names = m.def_submodule("names", "Names shared with the C++ side (native/names.h).");
  for (const auto& [key, value] : rlscope::names::kAll) names.attr(key) = value;
  rlscope_py::AddCollectorBindings(m);
  rlscope_py::AddConfigBindings(m);
  rlscope_py::AddAnalysisBindings(m);
}

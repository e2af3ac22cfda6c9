// rlscope_ray._native's interval sweeps: the breakdown engine's pure
// functions (aggregator/breakdown.h), the same code that writes summary.json's
// breakdown, for rlscope_ray.analysis. They need no collector.
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "aggregator/attribution.h"
#include "aggregator/breakdown.h"
#include "python/bindings/bindings.h"

namespace py = pybind11;

namespace rlscope_py {

namespace {

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

std::vector<rlscope::Interval> ToIntervals(const Pairs& v) {
  std::vector<rlscope::Interval> out;
  out.reserve(v.size());
  for (const auto& [b, e] : v) out.push_back({b, e});
  return out;
}

Pairs ToPairs(const std::vector<rlscope::Interval>& v) {
  Pairs out;
  out.reserve(v.size());
  for (const rlscope::Interval& i : v) out.emplace_back(i.begin, i.end);
  return out;
}

}  // namespace

void AddAnalysisBindings(py::module_& m) {
  // The rule that puts a CPU sample in a category (AttributionRules::Classify),
  // for scoring another profiler's samples as ours are (bench/pyspy_rule.py).
  m.def(
      "classify_cpu_sample",
      [](const std::string& object, const std::string& module, const std::string& callers,
         const std::map<std::string, std::vector<std::string>>& attribution) {
        rlscope::Config::Attribution patterns;  // a list given replaces its default, as in a config
        for (const auto& [key, list] : attribution) {
          if (key == "python")
            patterns.python = list;
          else if (key == "backend")
            patterns.backend = list;
          else if (key == "cuda_api")
            patterns.cuda_api = list;
          else if (key == "simulator")
            patterns.simulator = list;
          else
            throw py::value_error("unknown attribution list '" + key + "'");
        }
        return std::string(
            rlscope::CpuCategoryName(rlscope::AttributionRules(patterns).Classify(object, module, callers)));
      },
      py::arg("object"), py::arg("module"), py::arg("callers") = "",
      py::arg("attribution") = std::map<std::string, std::vector<std::string>>{},
      "The category of a CPU sample in shared object `object`, called from `callers` ('\\n'-joined, "
      "outwards), with the thread's Python frame in `module`: python, backend, cuda_api, simulator, other "
      "or profiler; `attribution`: the config's lists (attribution.python, ...).");
  // The breakdown engine (aggregator/breakdown.h): pure functions on
  // (begin, end) pairs, ns, end exclusive. The GIL is released: a sweep over
  // a big trace may take a while.
  m.def(
      "union_clipped",
      [](const Pairs& v, int64_t lo, int64_t hi) { return ToPairs(rlscope::UnionClipped(ToIntervals(v), lo, hi)); },
      py::arg("intervals"), py::arg("begin"), py::arg("end"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "subtract",
      [](const Pairs& a, const Pairs& b) { return ToPairs(rlscope::Subtract(ToIntervals(a), ToIntervals(b))); },
      py::arg("a"), py::arg("b"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "resource_overlap",
      [](const Pairs& cpu, const Pairs& gpu, int64_t lo, int64_t hi) {
        const rlscope::Overlap o = rlscope::ResourceOverlap(ToIntervals(cpu), ToIntervals(gpu), lo, hi);
        return std::make_tuple(o.cpu_only, o.gpu_only, o.cpu_gpu, o.idle);
      },
      py::arg("cpu"), py::arg("gpu"), py::arg("begin"), py::arg("end"), py::call_guard<py::gil_scoped_release>(),
      "(cpu_only, gpu_only, cpu_gpu, idle) ns of [begin, end).");
  m.def(
      "naive_utilization",
      [](const Pairs& gpu, int64_t lo, int64_t hi, int64_t sample_ns) {
        return rlscope::NaiveUtilization(ToIntervals(gpu), lo, hi, sample_ns);
      },
      py::arg("gpu"), py::arg("begin"), py::arg("end"), py::arg("sample_ns") = rlscope::kNaiveSampleNs,
      py::call_guard<py::gil_scoped_release>());
  m.attr("NAIVE_SAMPLE_NS") = rlscope::kNaiveSampleNs;
}

}  // namespace rlscope_py

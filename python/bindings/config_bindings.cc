// rlscope_ray._native's config functions: the native parser checks every
// text (errors name source:line:col and the key), merges config layers (the
// one merge there is: native/config.h MergeConfigLayers), and resolves the
// endpoint by the one rule, so Python keeps no precedence rules of its own.
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "native/config.h"
#include "native/spool_file.h"
#include "python/bindings/bindings.h"

namespace py = pybind11;

namespace rlscope_py {

void AddConfigBindings(py::module_& m) {
  m.def(
      "check_config",
      [](const std::string& text, const std::string& source) {
        const rlscope::ConfigResult r = rlscope::ParseConfig(text, source);
        return py::make_tuple(r.ok() ? rlscope::ConfigToYaml(r.config) : std::string(), r.errors);
      },
      py::arg("text"), py::arg("source"),
      "Validate a YAML/JSON config: (resolved_yaml, errors); errors name source:line:col and key.");
  m.def(
      "resolve_endpoint",
      [](const std::vector<std::string>& explicit_values, const std::string& config_aggregator) {
        rlscope::Config c;
        c.aggregator = config_aggregator.empty() ? "auto" : config_aggregator;
        return rlscope::ResolveEndpoint(explicit_values, c);
      },
      py::arg("explicit_values"), py::arg("config_aggregator"),
      "The aggregator endpoint by the one rule (native/config.h ResolveEndpoint); \"\" = none.");
  m.def(
      "merge_config",
      [](const std::vector<std::tuple<std::string, std::string, bool>>& layers) {
        std::vector<rlscope::ConfigLayer> in;
        for (const auto& [text, source, located] : layers) in.push_back({text, source, located});
        const rlscope::ConfigResult r = rlscope::MergeConfigLayers(in);
        return py::make_tuple(rlscope::ConfigToJson(r.config, &r.keys), r.errors);
      },
      py::arg("layers"),
      "Merge config layers [(text, source, located)], each over those before: (JSON of the keys they set, "
      "errors). located False: a generated text, its errors without line and column.");
  m.def(
      "default_output_formats", [] { return rlscope::Config().output.formats; },
      "output.formats when no config sets it (native/config.h).");
  m.def("run_key", &rlscope::RunKey, py::arg("secret"),
        "The run's key: a digest of its secret (run.json resume.run_key; \"\" without one).");
  m.def("spool_dir", &rlscope::SpoolDirFor, py::arg("run_key"),
        "Where a run's processes leave on this node's disk what they could not deliver at exit "
        "(native/spool_file.h).");
}

}  // namespace rlscope_py

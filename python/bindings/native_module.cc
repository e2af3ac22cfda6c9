// rlscope_ray._native: one function per C ABI call, no policy (that lives in
// python/rlscope_ray). Strings are passed as UTF-8; every call is a no-op when
// no collector runs in this process.
#include <pybind11/pybind11.h>

#include "collector/rlscope_collector.h"

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
  m.doc() = "rlscope-ray collector bindings (private; use the rlscope_ray package)";
  m.def("init", &rlscope_collector_init, "Start the collector from the environment; 1 if running.");
  m.def("armed", &rlscope_collector_armed);
  m.def("range_push", [](const char* name) { rlscope_range_push(name); }, py::arg("name"));
  m.def("range_pop", &rlscope_range_pop);
  m.def("range_start", [](const char* name) { return rlscope_range_start(name); }, py::arg("name"));
  m.def("range_end", &rlscope_range_end, py::arg("range_id"));
  m.def("mark", [](const char* name) { rlscope_mark(name); }, py::arg("name"));
  m.def("step_begin", &rlscope_step_begin, py::arg("step"));
  m.def("step_end", &rlscope_step_end);
  m.def("capture_start", &rlscope_capture_start);
  m.def("capture_stop", &rlscope_capture_stop);
  m.def("flush", &rlscope_flush, py::arg("timeout_ms") = 2000,
        py::call_guard<py::gil_scoped_release>());
  m.def("shutdown", &rlscope_collector_shutdown, py::call_guard<py::gil_scoped_release>());
  m.def("stats", [] {
    rlscope_stats_t s;
    rlscope_collector_stats(&s);
    py::dict d;
    d["events"] = s.events;
    d["dropped"] = s.dropped;
    d["batches_sent"] = s.batches_sent;
    d["batches_dropped"] = s.batches_dropped;
    d["threads"] = s.threads;
    return d;
  });
}

// rlscope_ray._native's collector calls: one function per C ABI call
// (collector/rlscope_collector.h), no policy (that lives in
// python/rlscope_ray). Strings are passed as UTF-8; every call is a no-op
// when no collector runs in this process.
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "collector/rlscope_collector.h"
#include "python/bindings/bindings.h"
#include "python/bindings/py_frame.h"

namespace py = pybind11;

namespace rlscope_py {

namespace {

py::dict Stats() {
  rlscope_stats_t s;
  rlscope_collector_stats(&s);
  py::dict d;
  d["events"] = s.events;
  d["dropped"] = s.dropped;
  d["batches_sent"] = s.batches_sent;
  d["batches_dropped"] = s.batches_dropped;
  d["threads"] = s.threads;
  rlscope_sampler_stats_t c;
  rlscope_sampler_stats(&c);
  d["cpu_samples"] = c.samples;
  d["cpu_samples_dropped"] = c.dropped;
  d["cpu_signals"] = c.signals;
  d["cpu_timers"] = c.timers;
  d["cpu_signal"] = c.signal;
  d["cpu_frames_unread"] = c.frames_unread;
  d["cpu_kernel_reads"] = c.kernel_reads;
  d["cpu_guard_faults"] = c.guard_faults;
  d["cpu_handler_ns"] = c.handler_ns;
  d["cpu_threads_unsampled"] = c.threads_unsampled;
  d["cpu_walks_fp"] = c.walks_fp;
  d["cpu_walks_scan"] = c.walks_scan;
  d["cpu_walks_leaf"] = c.walks_leaf;
  d["cpu_unwalked"] = c.unwalked;
  d["off_cpu_looks"] = c.off_cpu_looks;
  d["off_cpu_dropped"] = c.off_cpu_dropped;
  d["cpu_walk_faults"] = c.walk_faults;
  d["cpu_handlers_interrupted"] = c.handlers_interrupted;
  return d;
}

void ReportExpected(const std::vector<std::map<std::string, std::string>>& processes) {
  std::vector<std::string> records;
  for (const auto& p : processes) {
    std::string r;
    for (const auto& [k, v] : p) r += k + "=" + v + "\n";
    records.push_back(std::move(r));
  }
  std::vector<const char*> ptrs;
  for (const auto& r : records) ptrs.push_back(r.c_str());
  rlscope_report_expected(ptrs.data(), ptrs.size());
}

// The CPU sampler reads the module of a sampled thread's Python frame
// through this interpreter's own frame layout (py_frame.c); from import on,
// until stop_python_frames (rlscope_ray registers it with atexit: before
// thread states are freed).
void AddPythonFrames(py::module_& m) {
  const char* reader_name = "";
  rlscope_py_module_reader_t reader = RlscopePyModuleReader(&reader_name);
  rlscope_set_py_module_reader(reader, reader_name);
  m.attr("PYTHON_FRAMES") = reader_name;
  // Off-CPU reasons tell a wait for the GIL from other waits by its address.
  const void* gil = nullptr;
  size_t gil_size = 0;
  if (RlscopePyGil(&gil, &gil_size)) rlscope_set_py_gil(gil, gil_size);
  m.def(
      "stop_python_frames", [] { rlscope_set_py_module_reader(nullptr, nullptr); },
      "The CPU sampler stops reading Python frames (interpreter exit).");
}

}  // namespace

void AddCollectorBindings(py::module_& m) {
  m.def("init", &rlscope_collector_init, "Start the collector from the environment; 1 if running.");
  m.def("armed", &rlscope_collector_armed);
  m.def(
      "running", [] { return rlscope_collector_running() != 0; }, "True when a collector runs in this process.");
  m.def(
      "range_push", [](const char* name) { rlscope_range_push(name); }, py::arg("name"));
  m.def("range_pop", &rlscope_range_pop);
  m.def(
      "intern", [](const char* name) { return rlscope_intern(name); }, py::arg("name"),
      "The name's id in this process's collector (0 when none runs).");
  m.def("range_push_id", &rlscope_range_push_id, py::arg("name_id"));
  m.def("range_start_id", &rlscope_range_start_id, py::arg("name_id"));
  m.def("mark_id", &rlscope_mark_id, py::arg("name_id"));
  m.def("range_push_payload", &rlscope_range_push_payload, py::arg("name_id"), py::arg("payload"));
  m.def("mark_payload", &rlscope_mark_payload, py::arg("name_id"), py::arg("payload"));
  m.def(
      "range_start", [](const char* name) { return rlscope_range_start(name); }, py::arg("name"));
  m.def("range_end", &rlscope_range_end, py::arg("range_id"));
  m.def("step_begin", &rlscope_step_begin, py::arg("step"));
  m.def("step_end", &rlscope_step_end);
  m.def("claim_controller", &rlscope_claim_controller);
  m.def("set_next_step", &rlscope_set_next_step, py::arg("step"));
  m.def("capture_start", &rlscope_capture_start);
  m.def("capture_stop", &rlscope_capture_stop);
  m.def("flush", &rlscope_flush, py::arg("timeout_ms") = 2000, py::call_guard<py::gil_scoped_release>());
  m.def("shutdown", &rlscope_collector_shutdown, py::call_guard<py::gil_scoped_release>());
  m.def(
      "set_label", [](const std::string& k, const std::string& v) { rlscope_set_label(k.c_str(), v.c_str()); },
      py::arg("key"), py::arg("value"));
  m.def("report_expected", &ReportExpected, py::arg("processes"));
  m.def(
      "set_cost", [](const std::string& k, double ns) { rlscope_set_cost(k.c_str(), ns); }, py::arg("key"),
      py::arg("ns"), "Set one calibrated cost, ns per event (overhead correction).");
  m.def(
      "own_thread", [](const std::string& name) { rlscope_own_thread(name.c_str()); }, py::arg("name") = "",
      "The calling thread works for the collector: its sampled CPU time is the profiler's; `name` names it.");
  m.def(
      "cost", [](const std::string& k) { return rlscope_cost(k.c_str()); }, py::arg("key"),
      "A calibrated cost, ns per event; -1 when unknown.");
  m.def("calibrate", &rlscope_calibrate, "Re-measure the collector's own per-event costs; 1 if running.");
  m.def("scratch_scope", &rlscope_scratch_scope, py::arg("on"),
        "1: this thread records into a scratch ring nothing ships, until 0; 1 when the scope changed.");
  m.def("test_clock_ns", &rlscope_test_clock_ns,
        "Test only: ns the RLSCOPE_TEST_COSTS clock advanced so far; -1 without test costs.");
  m.def("stats", &Stats);
  AddPythonFrames(m);
}

}  // namespace rlscope_py

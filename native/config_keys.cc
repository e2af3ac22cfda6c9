#include "native/config_keys.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

namespace rlscope {
namespace config_keys {

std::string Scalar(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : std::string(); }

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {

KeySpec Run(KeySpec spec) {
  spec.run = true;
  return spec;
}

template <typename T>
using Field = std::function<T&(Config&)>;

std::string JsonStrings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + JsonString(v[i]);
  return out + "]";
}

std::string JsonDouble(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

KeySpec Bool(const char* path, const char* help, Field<bool> f) {
  return {path, help,
          [f](const YAML::Node& n, Config& c) -> std::string {
            bool v;
            if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
              return "expected true or false";
            }
            f(c) = v;
            return "";
          },
          [f](const Config& c) { return YAML::Node(f(const_cast<Config&>(c))); },
          [f](const Config& c) { return std::string(f(const_cast<Config&>(c)) ? "true" : "false"); }};
}

KeySpec Int(const char* path, const char* help, int64_t min, int64_t max, Field<int64_t> f) {
  return {path, help,
          [f, min, max](const YAML::Node& n, Config& c) -> std::string {
            int64_t v;
            if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
              return "expected an integer, got '" + Scalar(n) + "'";
            }
            if (v < min || v > max) {
              return std::to_string(v) + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]";
            }
            f(c) = v;
            return "";
          },
          [f](const Config& c) { return YAML::Node(f(const_cast<Config&>(c))); },
          [f](const Config& c) { return std::to_string(f(const_cast<Config&>(c))); }};
}

KeySpec Double(const char* path, const char* help, double min, double max, Field<double> f) {
  return {path, help,
          [f, min, max](const YAML::Node& n, Config& c) -> std::string {
            double v;
            if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !(v == v)) {
              return "expected a number, got '" + Scalar(n) + "'";
            }
            if (v < min || v > max) {
              return Scalar(n) + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]";
            }
            f(c) = v;
            return "";
          },
          [f](const Config& c) { return YAML::Node(f(const_cast<Config&>(c))); },
          [f](const Config& c) { return JsonDouble(f(const_cast<Config&>(c))); }};
}

KeySpec Enum(const char* path, const char* help, std::vector<std::string> allowed, bool allow_nvtx_prefix,
             Field<std::string> f) {
  return {path, help,
          [f, allowed, allow_nvtx_prefix](const YAML::Node& n, Config& c) -> std::string {
            const std::string v = Scalar(n);
            const bool ok = std::find(allowed.begin(), allowed.end(), v) != allowed.end() ||
                            (allow_nvtx_prefix && v.rfind("nvtx:", 0) == 0 && v.size() > 5);
            if (!n.IsScalar() || !ok) {
              std::string list;
              for (const auto& a : allowed) list += (list.empty() ? "" : " | ") + a;
              if (allow_nvtx_prefix) list += " | nvtx:<range name>";
              return "'" + v + "' is not one of: " + list;
            }
            f(c) = v;
            return "";
          },
          [f](const Config& c) { return YAML::Node(f(const_cast<Config&>(c))); },
          [f](const Config& c) { return JsonString(f(const_cast<Config&>(c))); }};
}

KeySpec String(const char* path, const char* help, Field<std::string> f) {
  return {path, help,
          [f](const YAML::Node& n, Config& c) -> std::string {
            if (!n.IsScalar() || n.Scalar().empty()) return "expected a non-empty string";
            f(c) = n.Scalar();
            return "";
          },
          [f](const Config& c) { return YAML::Node(f(const_cast<Config&>(c))); },
          [f](const Config& c) { return JsonString(f(const_cast<Config&>(c))); }};
}

// Parses one item of a selection: an integer, or "a-b", or "a,b-c".
std::string ParseSelectionItem(const std::string& s, std::set<int64_t>* out) {
  std::stringstream parts(s);
  std::string part;
  while (std::getline(parts, part, ',')) {
    part.erase(std::remove_if(part.begin(), part.end(), ::isspace), part.end());
    if (part.empty()) return "empty item in '" + s + "'";
    const size_t dash = part.find('-', 1);
    try {
      size_t used = 0;
      if (dash == std::string::npos) {
        const int64_t v = std::stoll(part, &used);
        if (used != part.size()) return "'" + part + "' is not an integer";
        if (v < 0) return std::to_string(v) + " is negative (values are >= 0)";
        out->insert(v);
      } else {
        const std::string a = part.substr(0, dash), b = part.substr(dash + 1);
        const int64_t lo = std::stoll(a, &used);
        if (used != a.size()) return "'" + part + "' is not a range like 2-5";
        const int64_t hi = std::stoll(b, &used);
        if (used != b.size()) return "'" + part + "' is not a range like 2-5";
        if (lo < 0) return "range \"" + part + "\" starts below 0";
        if (lo > hi) {
          return "range \"" + part + "\" is empty (start " + std::to_string(lo) + " > end " + std::to_string(hi) + ")";
        }
        if (hi - lo > 1000000) return "range \"" + part + "\" is too large (over 1000000 values)";
        for (int64_t v = lo; v <= hi; ++v) out->insert(v);
      }
    } catch (const std::exception&) {
      return "'" + part + "' is not an integer or a range like 2-5";
    }
  }
  return "";
}

KeySpec Selection(const char* path, const char* help, Field<IntSelection> f) {
  return {path, help,
          [f](const YAML::Node& n, Config& c) -> std::string {
            IntSelection sel;
            std::set<int64_t> values;
            if (n.IsScalar()) {
              if (n.Scalar() == "all") {
                f(c) = sel;
                return "";
              }
              if (auto err = ParseSelectionItem(n.Scalar(), &values); !err.empty()) return err;
            } else if (n.IsSequence()) {
              for (const auto& item : n) {
                if (!item.IsScalar()) return "list items must be integers or ranges like 2-5";
                if (auto err = ParseSelectionItem(item.Scalar(), &values); !err.empty()) {
                  return err;
                }
              }
              if (values.empty()) return "an empty list selects nothing; use 'all' or list values";
            } else {
              return "expected 'all', a list like [0, 1], or a range like \"2-5\"";
            }
            sel.all = false;
            sel.values.assign(values.begin(), values.end());
            f(c) = sel;
            return "";
          },
          [f](const Config& c) {
            const IntSelection& s = f(const_cast<Config&>(c));
            if (s.all) return YAML::Node("all");
            YAML::Node list(YAML::NodeType::Sequence);
            for (int64_t v : s.values) list.push_back(v);
            list.SetStyle(YAML::EmitterStyle::Flow);
            return list;
          },
          [f](const Config& c) {
            const IntSelection& s = f(const_cast<Config&>(c));
            if (s.all) return std::string("\"all\"");
            std::string out = "[";
            for (size_t i = 0; i < s.values.size(); ++i) out += (i ? "," : "") + std::to_string(s.values[i]);
            return out + "]";
          }};
}

// A list of names: sub-task names, or (with `item_error`) attribution
// patterns, each checked by `check_item` ("" valid, else why not).
KeySpec StringList(const char* path, const char* help, Field<std::vector<std::string>> f,
                   const char* list_error = "expected a list of names like [gen, update_actor]",
                   const char* item_error = "list items must be names",
                   std::function<std::string(const std::string&)> check_item = nullptr) {
  return {path, help,
          [f, list_error, item_error, check_item](const YAML::Node& n, Config& c) -> std::string {
            std::vector<std::string> v;
            if (!n.IsSequence()) return list_error;
            for (const auto& item : n) {
              if (!item.IsScalar() || item.Scalar().empty()) return item_error;
              if (check_item) {
                if (std::string why = check_item(item.Scalar()); !why.empty()) return why;
              }
              v.push_back(item.Scalar());
            }
            f(c) = v;
            return "";
          },
          [f](const Config& c) {
            YAML::Node list(YAML::NodeType::Sequence);
            for (const auto& s : f(const_cast<Config&>(c))) list.push_back(s);
            list.SetStyle(YAML::EmitterStyle::Flow);
            return list;
          },
          [f](const Config& c) { return JsonStrings(f(const_cast<Config&>(c))); }};
}

// A list of attribution patterns (config.h Attribution): globs or names.
KeySpec PatternList(const char* path, const char* help, Field<std::vector<std::string>> f) {
  return StringList(path, help, f, "expected a list of patterns like [\"libtorch*\", jax] (an empty list: none)",
                    "list items must be shared-object or module names or globs, like mujoco or \"gymnasium.*\"",
                    [](const std::string& pattern) -> std::string {
                      int brackets = 0;
                      for (char ch : pattern) brackets += ch == '[' ? 1 : ch == ']' ? -1 : 0;
                      return brackets != 0 ? "'" + pattern + "' has an unbalanced [ ] in its glob" : "";
                    });
}

// `children`: all, none, or a list of command-line globs (config.h).
KeySpec Children(const char* path, const char* help, Field<std::vector<std::string>> f) {
  return {path, help,
          [f](const YAML::Node& n, Config& c) -> std::string {
            if (n.IsScalar() && (n.Scalar() == "all" || n.Scalar() == "none")) {
              f(c) = n.Scalar() == "all" ? std::vector<std::string>{"*"} : std::vector<std::string>{};
              return "";
            }
            const char* what =
                "expected all, none, or a list of command-line patterns like [\"*vllm*\", engine_core.py]";
            if (!n.IsSequence()) return what;
            std::vector<std::string> v;
            for (const auto& item : n) {
              if (!item.IsScalar() || item.Scalar().empty()) return what;
              v.push_back(item.Scalar());
            }
            f(c) = v;
            return "";
          },
          [f](const Config& c) {
            const auto& v = f(const_cast<Config&>(c));
            if (v == std::vector<std::string>{"*"}) return YAML::Node("all");
            if (v.empty()) return YAML::Node("none");
            YAML::Node list(YAML::NodeType::Sequence);
            for (const auto& s : v) list.push_back(s);
            list.SetStyle(YAML::EmitterStyle::Flow);
            return list;
          },
          [f](const Config& c) {
            const auto& v = f(const_cast<Config&>(c));
            if (v == std::vector<std::string>{"*"}) return std::string("\"all\"");
            return v.empty() ? std::string("\"none\"") : JsonStrings(v);
          }};
}

// What is captured, from whom, and how samples are attributed.
std::vector<KeySpec> CaptureKeySpecs() {
  return {
      String("aggregator", "ZeroMQ endpoint of the aggregator, or 'auto' (the one rlscope_ray.init started)",
             [](Config& c) -> std::string& { return c.aggregator; }),
      String("output_dir", "run directory the aggregator writes step profiles into",
             [](Config& c) -> std::string& { return c.output_dir; }),
      StringList(
          "output.formats",
          "the files of each written step: json (trace.json, Chrome JSON), pftrace (trace.pftrace, Perfetto's "
          "protobuf), db (the run database run.duckdb, for rlscope-ray query and stats; it reads trace.json)",
          [](Config& c) -> std::vector<std::string>& { return c.output.formats; },
          "expected a list like [json, pftrace, db]", "list items must be format names",
          [](const std::string& v) -> std::string {
            for (const char* f : {names::kFormatJson, names::kFormatPftrace, names::kFormatDb}) {
              if (v == f) return "";
            }
            return "'" + v + "' is not one of: json | pftrace | db";
          }),
      Run(Selection("ranks", "ranks to profile: all, or a list like [0, 1]",
                    [](Config& c) -> IntSelection& { return c.ranks; })),
      Run(Selection("steps", "training steps to write: all, a list like [2, 3, 5], or a range like \"2-5\"",
                    [](Config& c) -> IntSelection& { return c.steps; })),
      Run(StringList("subtasks", "only these sub-task ranges (e.g. [gen, update_actor]); empty = everything",
                     [](Config& c) -> std::vector<std::string>& { return c.subtasks; })),
      Run(Bool("discrete", "one capture (and file) per sub-task occurrence",
               [](Config& c) -> bool& { return c.discrete; })),
      Run(Bool("controller", "profile the driver/controller process too",
               [](Config& c) -> bool& { return c.controller; })),
      Enum("capture_range", "what opens and closes a capture", {"controller", "cudaProfilerApi", "api"}, true,
           [](Config& c) -> std::string& { return c.capture_range; }),
      Children("children",
               "processes a profiled process starts (subprocess, multiprocessing, a rollout engine's): all, none, "
               "or command-line patterns like [\"*vllm*\"]; Ray's own helper processes are never profiled",
               [](Config& c) -> std::vector<std::string>& { return c.children; }),
      Bool("cpu.nvtx", "record NVTX ranges and marks (false: NVTX calls stay no-ops)",
           [](Config& c) -> bool& { return c.cpu.nvtx; }),
      Bool("cpu.python_api", "record rlscope_ray.range/mark (steps are always recorded)",
           [](Config& c) -> bool& { return c.cpu.python_api; }),
      Run(Int("cpu.sampling_hz",
              "CPU samples per second of each profiled thread's CPU time, in capture windows, for cross-stack "
              "attribution (Python, ML backend, CUDA API, simulator, other native); 0: off",
              0, 100000, [](Config& c) -> int64_t& { return c.cpu.sampling_hz; })),
      Run(Enum("cpu.threads",
               "which threads CPU sampling covers: all (every thread of the process, those that record no event "
               "too) or recording (threads that recorded an event)",
               {"all", "recording"}, false, [](Config& c) -> std::string& { return c.cpu.threads; })),
      Run(Int("cpu.off_cpu_hz",
              "looks per second at why each recording thread is off CPU (GIL, lock, poll, I/O, sleep, run queue), "
              "in capture windows, at most one per flush; 0: off",
              0, 1000, [](Config& c) -> int64_t& { return c.cpu.off_cpu_hz; })),
      Run(PatternList("attribution.python", "shared objects and Python modules that are the Python interpreter",
                      [](Config& c) -> std::vector<std::string>& { return c.attribution.python; })),
      Run(PatternList("attribution.backend",
                      "shared objects and Python modules that are the ML backend (libtorch and friends)",
                      [](Config& c) -> std::vector<std::string>& { return c.attribution.backend; })),
      Run(PatternList("attribution.cuda_api", "shared objects that are the CUDA runtime and driver API",
                      [](Config& c) -> std::vector<std::string>& { return c.attribution.cuda_api; })),
      Run(PatternList(
          "attribution.simulator",
          "shared objects and Python modules that are the simulator / environment (e.g. [mujoco, \"gymnasium.*\"])",
          [](Config& c) -> std::vector<std::string>& { return c.attribution.simulator; })),
  };
}

// The GPU, buffers, flushing, clocks and the overhead correction.
std::vector<KeySpec> MechanismKeySpecs() {
  return {
      Bool("gpu.kernels",
           "CUPTI kernels (CONCURRENT_KERNEL); any gpu.* on traces the GPU when CUDA loads the collector",
           [](Config& c) -> bool& { return c.gpu.kernels; }),
      Bool("gpu.memcpy", "CUPTI memory copies", [](Config& c) -> bool& { return c.gpu.memcpy; }),
      Bool("gpu.memset", "CUPTI memsets", [](Config& c) -> bool& { return c.gpu.memset; }),
      Bool("gpu.runtime_api", "CUDA runtime API calls", [](Config& c) -> bool& { return c.gpu.runtime_api; }),
      Bool("gpu.driver_api", "CUDA driver API calls", [](Config& c) -> bool& { return c.gpu.driver_api; }),
      Bool("gpu.sync", "CUDA synchronization records", [](Config& c) -> bool& { return c.gpu.sync; }),
      Bool("gpu.memory", "CUDA memory allocations and releases (CUPTI MEMORY2): GPU memory allocated per step",
           [](Config& c) -> bool& { return c.gpu.memory; }),
      Int("buffers.per_thread_kb", "ring buffer per recording thread; full = overflow by chunks within buffers.max_mb",
          4, 1 << 20, [](Config& c) -> int64_t& { return c.buffers.per_thread_kb; }),
      Int("buffers.max_mb", "cap on one process's rings and their overflow; past it, counted drops", 1, 1 << 16,
          [](Config& c) -> int64_t& { return c.buffers.max_mb; }),
      Int("buffers.spool_mb",
          "batches kept in memory until their step is written (replayed to a restarted aggregator) or "
          "until the aggregator can be reached",
          1, 1 << 16, [](Config& c) -> int64_t& { return c.buffers.spool_mb; }),
      Int("buffers.spool_file_mb", "then in a temporary file up to this size (0: none); beyond, the oldest are dropped",
          0, 1 << 20, [](Config& c) -> int64_t& { return c.buffers.spool_file_mb; }),
      Int("flush.interval_ms",
          "how often a busy collector ships buffered events; an idle one waits up to 1 s (a heartbeat)", 1, 60000,
          [](Config& c) -> int64_t& { return c.flush.interval_ms; }),
      Int("flush.exit_timeout_ms", "longest a process waits at exit to deliver its last events", 0, 600000,
          [](Config& c) -> int64_t& { return c.flush.exit_timeout_ms; }),
      Int("flush.step_grace_ms", "how long the aggregator waits for late processes before writing a step", 0, 3600000,
          [](Config& c) -> int64_t& { return c.flush.step_grace_ms; }),
      Int("flush.window_slack_ms",
          "how long a worker stays armed after a selected step ends (events in flight are kept)", 0, 60000,
          [](Config& c) -> int64_t& { return c.flush.window_slack_ms; }),
      Int("clock.probe_interval_ms",
          "how often collectors probe the aggregator's clock while they record events (10x apart otherwise; 0: never)",
          0, 3600000, [](Config& c) -> int64_t& { return c.clock.probe_interval_ms; }),
      Int("clock.probes_per_burst", "probes per burst; the one with the shortest round trip counts", 1, 64,
          [](Config& c) -> int64_t& { return c.clock.probes_per_burst; }),
      Bool("clock.udp_probes",
           "probe on the aggregator's UDP port of its own (kernel timestamps: a bound of microseconds), falling "
           "back to the connection; false: on the connection only",
           [](Config& c) -> bool& { return c.clock.udp_probes; }),
      Int("clock.max_bound_us",
          "a step waits for a process whose clock error bound is above this and above max_bound_fraction of the "
          "step (probing it), and is marked clock_unaligned when the grace runs out first",
          0, 60000000, [](Config& c) -> int64_t& { return c.clock.max_bound_us; }),
      Double("clock.max_bound_fraction", "the largest clock error bound a step allows, as a fraction of the step", 0, 1,
             [](Config& c) -> double& { return c.clock.max_bound_fraction; }),
      Run(Bool("correction.enabled",
               "subtract the profiler's own overhead (calibrated per event kind) from each thread's timeline",
               [](Config& c) -> bool& { return c.correction.enabled; })),
      Run(Double("correction.scale",
                 "multiplies the calibrated per-event costs; `rlscope-ray calibrate` measures it on your workload", 0.0,
                 100.0, [](Config& c) -> double& { return c.correction.scale; })),
      Run(Int("correction.sample_every",
              "time one recording call in N on each thread, in place, and correct each step with "
              "the costs measured in it (0: start-up calibration only)",
              0, 1000000, [](Config& c) -> int64_t& { return c.correction.sample_every; })),
  };
}

// Always on (docs/always_on.md) and its live metrics.
std::vector<KeySpec> AlwaysOnKeySpecs() {
  return {
      Run(Bool("always_on.enabled",
               "record every step and write its figures (figures.jsonl, the run database); steps chosen in `steps` "
               "and steps that go wrong (the triggers below) are written in full",
               [](Config& c) -> bool& { return c.always_on.enabled; })),
      Run(Int("always_on.sampling_hz",
              "CPU samples per second of each thread's CPU time in the steps `steps` does not choose "
              "(cpu.sampling_hz in those it does); 0: off",
              0, 100000, [](Config& c) -> int64_t& { return c.always_on.sampling_hz; })),
      Run(Double("always_on.slower_than",
                 "write a step in full when its corrected time is above this many times the median of the recent "
                 "steps (and above it by min_slower_ms); 0: off",
                 0.0, 1000.0, [](Config& c) -> double& { return c.always_on.slower_than; })),
      Run(Int("always_on.min_slower_ms", "... and by at least this many milliseconds", 0, 86400000,
              [](Config& c) -> int64_t& { return c.always_on.min_slower_ms; })),
      Run(Int("always_on.memory_jump_mb",
              "write a step in full when a process's resident or GPU memory grew this much within it; 0: off", 0,
              1 << 30, [](Config& c) -> int64_t& { return c.always_on.memory_jump_mb; })),
      Run(Int("always_on.warmup_steps", "the run's first recorded steps, which never trigger nor serve as baseline", 0,
              1000000, [](Config& c) -> int64_t& { return c.always_on.warmup_steps; })),
      Run(Int("always_on.recent_steps", "how many steps before a step its baseline (their median) takes", 1, 100000,
              [](Config& c) -> int64_t& { return c.always_on.recent_steps; })),
      Int("metrics.port",
          "serve the latest steps' figures as Prometheus metrics on this port, from the process beside the "
          "aggregator; 0: off",
          0, 65535, [](Config& c) -> int64_t& { return c.metrics.port; }),
      String("metrics.host", "the address the metrics port listens on",
             [](Config& c) -> std::string& { return c.metrics.host; }),
  };
}

}  // namespace

const std::vector<KeySpec>& KeySpecs() {
  static const std::vector<KeySpec> specs = [] {
    std::vector<KeySpec> all = CaptureKeySpecs();
    for (KeySpec& k : MechanismKeySpecs()) all.push_back(std::move(k));
    for (KeySpec& k : AlwaysOnKeySpecs()) all.push_back(std::move(k));
    return all;
  }();
  return specs;
}

}  // namespace config_keys
}  // namespace rlscope

#include "aggregator/run_json.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <exception>

#include "aggregator/json_writer.h"
#include "aggregator/process_json.h"
#include "native/names.h"

namespace rlscope {
namespace {

// One of run.json's processes: identity, counts, release point, clock, threads.
void WriteRunProcess(JsonWriter& w, const ProcessInfo& pi) {
  const ProcessView& p = *pi.process;
  w.Newline().BeginObject();
  WriteIdentity(w, p, pi.selected);
  w.Key("events_received").Uint(p.events_received());
  w.Key("dropped").Uint(p.dropped());
  w.Key("unmatched").Uint(p.unmatched());
  w.Key("released_ns").Int(pi.released_ns);
  w.Key("via_relay").Bool(pi.via_relay);
  w.Key("interrupted_cost_samples").Uint(p.interrupted_samples());
  w.Key("cpu_samples_received").Uint(p.cpu_samples_received());
  w.Key("said_bye").Bool(p.said_bye());
  w.Key("events_recorded");  // from its goodbye; null without one
  if (p.said_bye()) {
    w.Uint(p.events_recorded());
  } else {
    w.Null();
  }
  w.Key("lost").Bool(p.lost());
  w.Key("truncated_strings").Uint(p.truncated_strings());
  WriteClock(w, p);
  if (pi.armed_steps) w.Key("armed_steps").String(*pi.armed_steps);
  w.Key("threads").BeginObject();
  for (const auto& [tid, name] : p.thread_names()) w.Key(std::to_string(tid)).String(name);
  w.EndObject();
  w.EndObject();
}

}  // namespace

std::string RunJson(const RunInfo& run) {
  std::string out;
  JsonWriter w(&out);
  w.BeginObject();
  w.Key("format").String(names::kRunFormat);
  w.Key("run_id").String(run.run_id);
  w.Key("output_formats").BeginArray();
  for (const std::string& f : run.output_formats) w.String(f);
  w.EndArray();
  w.Key("final").Bool(run.final);
  w.Key("config_yaml").String(run.config_yaml);
  w.Key("config_source").String(run.config_source);
  w.Key("config_notes").BeginArray();
  for (const std::string& note : run.config_notes) w.String(note);
  w.EndArray();
  w.Key("processes").BeginArray();
  for (const ProcessInfo& pi : run.processes) WriteRunProcess(w, pi);
  w.EndArray();
  w.Key("steps_written").BeginArray();
  for (int64_t s : run.steps_written) w.Int(s);
  w.EndArray();
  w.Key("steps_triggered").BeginArray();
  for (int64_t s : run.steps_triggered) w.Int(s);
  w.EndArray();
  w.Key("steps_figures_only").Uint(run.steps_figures_only);
  w.Key("expected");
  WriteExpected(w, run.expected);
  w.Key("not_profiled");
  WriteExpected(w, run.not_profiled);
  w.Key("steps_seen").Uint(run.steps_seen);
  w.Key("late_events").Uint(run.late_events);
  w.Key("decode_errors").Uint(run.decode_errors);
  w.Key("last_decode_error").String(run.last_decode_error);
  w.Key("refused_frames").Uint(run.refused_frames);
  w.Key("refused_hellos").Uint(run.refused_hellos);
  w.Key("last_refused").String(run.last_refused);
  w.Key("duplicate_frames").Uint(run.duplicate_frames);
  w.Key("probe_requests").Uint(run.probe_requests);
  w.Key("steps_clock_unaligned").Uint(run.steps_clock_unaligned);
  // Steps a later clock estimate proves were placed off by more than their
  // stated bound (clocks.h): each with the process and by how much.
  w.Key("clock_revisions_total").Uint(run.clock_revisions_total);
  w.Key("clock_revisions").BeginArray();
  for (const ClockRevision& r : run.clock_revisions) {
    w.BeginObject();
    w.Key("step").Int(r.step);
    w.Key("process").String(r.process);
    w.Key("off_by_ns").Int(r.off_by_ns);
    w.Key("stated_bound_ns").Int(r.stated_bound_ns);
    w.EndObject();
  }
  w.EndArray();
  w.Key("recovered").BeginObject();
  w.Key("files").Uint(run.recovered.files);
  w.Key("processes").Uint(run.recovered.processes);
  w.Key("events").Uint(run.recovered.events);
  w.Key("unreadable_files").Uint(run.recovered.unreadable_files);
  w.Key("last_error").String(run.recovered.last_error);
  w.EndObject();
  w.Key("resume").BeginObject();
  w.Key("last_step").Int(run.last_step);
  w.Key("controller_session").String(HexSession(run.controller_session));  // as processes[].session
  w.Key("controller_ns").Int(run.controller_resume_ns);
  w.Key("resumes").Int(run.resumes);
  w.Key("run_key").String(run.run_key);
  w.EndObject();
  w.EndObject();
  out.push_back('\n');
  return out;
}

std::optional<ResumePoint> ReadResumePoint(const std::string& out_dir, std::string* error, bool even_final) {
  const std::string path = out_dir + "/" + kRunJsonFile;
  if (access(path.c_str(), F_OK) != 0) return std::nullopt;
  try {
    const YAML::Node run = YAML::LoadFile(path);  // JSON is YAML
    if (run["final"].as<bool>(true) && !even_final) return std::nullopt;
    ResumePoint p;
    p.run_id = run["run_id"].as<std::string>("");
    for (const auto& n : run["steps_written"]) p.steps_written.push_back(n.as<int64_t>());
    for (const auto& n : run["steps_triggered"]) p.steps_triggered.push_back(n.as<int64_t>());
    p.steps_figures_only = run["steps_figures_only"].as<uint64_t>(0);
    p.steps_seen = run["steps_seen"].as<uint64_t>(0);
    for (const auto& proc : run["processes"]) {
      const uint64_t session = std::stoull(proc["session"].as<std::string>(), nullptr, 16);
      if (proc["selected"].as<bool>(false) && !proc["said_bye"].as<bool>(false) && !proc["lost"].as<bool>(false)) {
        p.awaited.push_back(session);
      }
      if (const int64_t released = proc["released_ns"].as<int64_t>(0); released != 0) p.released[session] = released;
    }
    if (const YAML::Node r = run["recovered"]) {
      p.recovered.files = r["files"].as<uint64_t>(0);
      p.recovered.processes = r["processes"].as<uint64_t>(0);
      p.recovered.events = r["events"].as<uint64_t>(0);
      p.recovered.unreadable_files = r["unreadable_files"].as<uint64_t>(0);
      p.recovered.last_error = r["last_error"].as<std::string>("");
    }
    if (const YAML::Node r = run["resume"]) {
      p.last_step = r["last_step"].as<int64_t>(-1);
      p.controller_session = std::stoull(r["controller_session"].as<std::string>("0"), nullptr, 16);
      p.controller_ns = r["controller_ns"].as<int64_t>(0);
      p.resumes = r["resumes"].as<int>(0);
      p.run_key = r["run_key"].as<std::string>("");
    }
    return p;
  } catch (const std::exception& e) {
    *error = e.what();
    return std::nullopt;
  }
}

}  // namespace rlscope

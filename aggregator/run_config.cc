#include "aggregator/run_config.h"

#include <utility>

namespace rlscope {

RunConfig::RunConfig(AggregatorContext* context, Config own, std::string config_file, KeySet config_keys)
    : context_(context),
      config_(std::move(own)),
      config_file_(std::move(config_file)),
      config_keys_(std::move(config_keys)),
      source_(RunKeysIn(config_keys_).empty() ? "defaults" : "aggregator") {}

void RunConfig::Adopt(const wire::Hello& controller, const Config& theirs, const KeySet& theirs_run) {
  // Where both set a run key and disagree: one line, the controller's wins.
  std::string diff;
  for (const std::string& d : RunKeyDifferences(config_, theirs, &theirs_run)) {
    if (config_keys_.count(d.substr(0, d.find(':'))) != 0) diff += (diff.empty() ? "" : "; ") + d;
  }
  if (!diff.empty()) {
    context_->notes.Log("the controller's config (pid " + std::to_string(controller.identity.pid) +
                        ") disagrees with --config " + config_file_ + " (" + diff + "): using the controller's");
  }
  bool aggregator_too = false;  // a run key only the aggregator's --config set
  for (const std::string& k : RunKeysIn(config_keys_)) aggregator_too |= theirs_run.count(k) == 0;
  AdoptRunKeys(theirs, &config_, &theirs_run);
  source_ = aggregator_too ? "controller and aggregator" : "controller";
}

void RunConfig::Decide(const wire::Hello& controller) {
  const ConfigResult theirs = ParseConfig(controller.config, "the controller's config");
  if (!theirs.ok()) {  // a collector's own output: never expected
    context_->notes.Log("the controller's config cannot be read (" + theirs.errors[0] + "): using " +
                        (config_file_.empty() ? "the defaults" : "--config " + config_file_));
  } else if (const KeySet theirs_run = RunKeysIn(theirs.keys); !theirs_run.empty()) {
    Adopt(controller, theirs.config, theirs_run);
  }
  // Every line the daemon's log has not taken yet goes to run.json too,
  // this decision's among them (kept as it was: a line recorded already,
  // such as the resume note, is then listed twice).
  context_->notes.RecordPending();
  yaml_ = ConfigToYaml(config_);
  wire::Control all;
  all.run_config = yaml_;
  context_->Send(0, all);
}

bool RunConfig::Selected(const ProcessTimeline& p) const {
  if (yaml_.empty()) return p.hello().selected;
  return SelectsProcess(config_, p.is_controller(), p.identity().rank);  // a second claimant is a worker
}

}  // namespace rlscope

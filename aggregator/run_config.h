// The run's config (native/config.h "One config per run"), decided once.
//
// Until the controller's first hello it is this aggregator's own (--config,
// else the defaults); at that hello it becomes that with the run keys the
// controller's own config set over it, and every collector is told
// (Control.run_config, repeated on every window and flush barrier for one
// that missed it). Owns where the run keys came from (run.json
// config_source) and which processes are profiled.
#pragma once

#include <string>

#include "aggregator/context.h"
#include "aggregator/timeline.h"
#include "native/config.h"
#include "native/wire.h"

namespace rlscope {

class RunConfig {
 public:
  // `own`: the aggregator's config; `config_file` names its file ("" none)
  // and `config_keys` the keys the file set.
  RunConfig(AggregatorContext* context, Config own, std::string config_file, KeySet config_keys);

  // The run's config as it stands.
  const Config& config() const { return config_; }
  // Who set its run keys: "defaults", "aggregator", "controller" or
  // "controller and aggregator" (a default is nobody's choice).
  const std::string& source() const { return source_; }
  // As sent to collectors; "" until decided.
  const std::string& yaml() const { return yaml_; }
  // The controller's first hello decides it; every collector is told. A
  // line for the log where the two configs disagree on a run key the
  // aggregator's file set (the controller's wins), or where the
  // controller's cannot be read.
  void Decide(const wire::Hello& controller);
  // Whether a process is profiled: by the run's config once it is decided
  // (a second claimant of the controller role is a worker), by the
  // process's own word (Hello.selected) before.
  bool Selected(const ProcessTimeline& p) const;

 private:
  // The controller's run keys over this aggregator's (`theirs_run`: the
  // keys its config set).
  void Adopt(const wire::Hello& controller, const Config& theirs, const KeySet& theirs_run);

  AggregatorContext* context_;
  Config config_;
  const std::string config_file_;  // --config FILE, "" when none was given
  const KeySet config_keys_;       // the keys --config set
  std::string source_;
  std::string yaml_;
};

}  // namespace rlscope

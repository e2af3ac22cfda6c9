// The configuration's keys (config.h): each key's path, help, and how it is
// read, written and told as JSON; the tables of them, by what they are for.
// Internal to native/: config.cc walks, merges and writes configs with them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "native/config.h"

namespace rlscope {
namespace config_keys {

// One configuration key: its dotted path, help text, and how to read and
// write it. Defaults live in the Config struct initialisers.
struct KeySpec {
  const char* path;
  const char* help;
  // Returns "" when `node` is valid (and stores it), else the error text.
  std::function<std::string(const YAML::Node& node, Config& c)> parse;
  std::function<YAML::Node(const Config& c)> dump;
  // The value as JSON, typed (ConfigToJson; the dump's scalars are text).
  std::function<std::string(const Config& c)> json;
  // A run key: decided once per run (config.h AdoptRunKeys), not per process.
  bool run = false;
};

// Every key, in the order help and the YAML dump list them.
const std::vector<KeySpec>& KeySpecs();

// A node's scalar text ("" for a map or a list).
std::string Scalar(const YAML::Node& n);
// `s` as a JSON string, quoted and escaped.
std::string JsonString(const std::string& s);

}  // namespace config_keys
}  // namespace rlscope

#include "native/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "native/config_keys.h"

namespace rlscope {
namespace {

using config_keys::JsonString;
using config_keys::KeySpec;
using config_keys::KeySpecs;
using config_keys::Scalar;

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string Where(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null()) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// A key an earlier version had, and what to write instead; nullptr for others.
const char* RenamedKey(const std::string& path) {
  if (path == "clock.warn_bound_us") {
    return "no longer a key: use clock.max_bound_us (a step now waits for a clock bound above it, and above "
           "clock.max_bound_fraction of the step, instead of only warning)";
  }
  return nullptr;
}

void WalkMap(const YAML::Node& map, const std::string& prefix, const std::string& source, Config& config,
             std::vector<std::string>* errors, KeySet* keys) {
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    const std::string path = prefix + key;
    const KeySpec* spec = nullptr;
    bool is_section = false;
    for (const auto& s : KeySpecs()) {
      if (path == s.path) spec = &s;
      if (std::string(s.path).rfind(path + ".", 0) == 0) is_section = true;
    }
    if (spec != nullptr) {
      if (std::string err = spec->parse(kv.second, config); !err.empty()) {
        errors->push_back(Where(source, kv.second.Mark()) + ": " + path + ": " + err);
      } else {
        keys->insert(path);
      }
    } else if (is_section) {
      if (!kv.second.IsMap()) {
        errors->push_back(Where(source, kv.second.Mark()) + ": " + path + ": expected a section (a map of keys)");
      } else {
        WalkMap(kv.second, path + ".", source, config, errors, keys);
      }
    } else if (const char* renamed = RenamedKey(path)) {
      errors->push_back(Where(source, kv.first.Mark()) + ": " + path + ": " + renamed);
    } else {
      std::string best;
      size_t best_d = 3;
      for (const auto& s : KeySpecs()) {
        const size_t d = EditDistance(path, s.path);
        if (d < best_d) best_d = d, best = s.path;
      }
      errors->push_back(Where(source, kv.first.Mark()) + ": " + path + ": unknown key" +
                        (best.empty() ? "" : " (did you mean '" + best + "'?)"));
    }
  }
}

}  // namespace

bool IntSelection::Contains(int64_t v) const { return all || std::binary_search(values.begin(), values.end(), v); }

std::string IntSelection::ToString() const {
  if (all) return "all";
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

ConfigResult ParseConfig(const std::string& text, const std::string& source) {
  ConfigResult result;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    result.errors.push_back(Where(source, e.mark) + ": not valid YAML: " + e.msg);
    return result;
  }
  if (root.IsNull()) return result;  // empty document: defaults
  if (!root.IsMap()) {
    result.errors.push_back(Where(source, root.Mark()) + ": expected a map of keys like 'steps: [2, 3]'");
    return result;
  }
  try {
    WalkMap(root, "", source, result.config, &result.errors, &result.keys);
  } catch (const YAML::Exception& e) {
    result.errors.push_back(Where(source, e.mark) + ": " + e.msg);
  }
  return result;
}

ConfigResult LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    ConfigResult r;
    r.errors.push_back(path + ": cannot read the config file");
    return r;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path);
}

ConfigResult LoadConfigFromEnvValue(const std::string& value) {
  if (value.empty()) return ConfigResult{};
  std::error_code ec;
  const bool inline_text = value.find('\n') != std::string::npos || value[0] == '{' ||
                           (value.find(':') != std::string::npos && !std::filesystem::exists(value, ec));
  if (inline_text) return ParseConfig(value, names::kEnvConfig);
  return LoadConfigFile(value);
}

std::string ConfigToYaml(const Config& config, const KeySet* only) {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& s : KeySpecs()) {
    const std::string path = s.path;
    if (only != nullptr && only->count(path) == 0) continue;
    const size_t dot = path.find('.');
    if (dot == std::string::npos) {
      root[path] = s.dump(config);
    } else {
      root[path.substr(0, dot)][path.substr(dot + 1)] = s.dump(config);
    }
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string ConfigKeyHelp() {
  std::string out;
  const Config defaults;
  for (const auto& s : KeySpecs()) {
    YAML::Emitter e;
    e << YAML::Flow << s.dump(defaults);
    out += std::string(s.path) + ": " + e.c_str() + "  # " + s.help + "\n";
  }
  return out;
}

void AdoptRunKeys(const Config& run, Config* into, const KeySet* only) {
  for (const auto& s : KeySpecs()) {
    if (s.run && (only == nullptr || only->count(s.path) != 0)) s.parse(s.dump(run), *into);  // a dump parses
  }
}

namespace {

// `error` as ParseConfig wrote it ("source:line:col: ..."), without the
// line and column: they mean nothing in a text the user did not write.
std::string Unlocated(const std::string& error, const std::string& source) {
  if (error.rfind(source + ":", 0) != 0) return error;
  size_t p = source.size() + 1;
  auto digits = [&] {
    const size_t start = p;
    while (p < error.size() && std::isdigit(static_cast<unsigned char>(error[p]))) ++p;
    return p > start;
  };
  if (!digits() || p >= error.size() || error[p] != ':') return error;
  ++p;
  if (!digits() || error.compare(p, 2, ": ") != 0) return error;
  return source + error.substr(p);
}

}  // namespace

ConfigResult MergeConfigLayers(const std::vector<ConfigLayer>& layers) {
  ConfigResult out;
  for (const ConfigLayer& layer : layers) {
    ConfigResult r = ParseConfig(layer.text, layer.source);
    for (const std::string& e : r.errors) out.errors.push_back(layer.located ? e : Unlocated(e, layer.source));
    if (!r.ok()) continue;
    for (const auto& s : KeySpecs()) {
      if (r.keys.count(s.path) != 0) s.parse(s.dump(r.config), out.config);  // a dump parses
    }
    out.keys.insert(r.keys.begin(), r.keys.end());
  }
  return out;
}

std::string ConfigToJson(const Config& config, const KeySet* only) {
  // Top-level keys and sections in the order of their first key (the key
  // table's order); a section's members in order within it.
  struct Member {
    std::string name;
    std::vector<std::string> entries;  // "\"key\":value"
    bool section;
  };
  std::vector<Member> members;
  for (const auto& s : KeySpecs()) {
    const std::string path = s.path;
    if (only != nullptr && only->count(path) == 0) continue;
    const size_t dot = path.find('.');
    const bool section = dot != std::string::npos;
    const std::string name = section ? path.substr(0, dot) : path;
    const std::string entry = JsonString(section ? path.substr(dot + 1) : path) + ":" + s.json(config);
    auto it = std::find_if(members.begin(), members.end(), [&](const Member& m) { return section && m.name == name; });
    if (it == members.end()) {
      members.push_back({name, {entry}, section});
    } else {
      it->entries.push_back(entry);
    }
  }
  std::string out = "{";
  for (size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    out += i ? "," : "";
    if (!m.section) {
      out += m.entries[0];
      continue;
    }
    out += JsonString(m.name) + ":{";
    for (size_t j = 0; j < m.entries.size(); ++j) out += (j ? "," : "") + m.entries[j];
    out += "}";
  }
  return out + "}";
}

KeySet RunKeysIn(const KeySet& keys) {
  KeySet out;
  for (const auto& s : KeySpecs()) {
    if (s.run && keys.count(s.path) != 0) out.insert(s.path);
  }
  return out;
}

std::vector<std::string> RunKeyDifferences(const Config& ours, const Config& theirs, const KeySet* only) {
  auto flow = [](const YAML::Node& n) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    return std::string(e.c_str());
  };
  std::vector<std::string> out;
  for (const auto& s : KeySpecs()) {
    if (!s.run || (only != nullptr && only->count(s.path) == 0)) continue;
    const std::string a = flow(s.dump(ours)), b = flow(s.dump(theirs));
    if (a != b) out.push_back(std::string(s.path) + ": " + a + " vs " + b);
  }
  return out;
}

bool SelectsProcess(const Config& config, bool is_controller, int64_t rank) {
  // The controller owns the steps: `ranks` selects workers only.
  return is_controller ? config.controller : config.ranks.Contains(rank < 0 ? 0 : rank);
}

std::string ResolveEndpoint(const std::vector<std::string>& explicit_values, const Config& config) {
  for (const std::string& v : explicit_values) {
    if (!v.empty() && v != "auto") return v;  // "auto": whatever comes next
  }
  return config.aggregator == "auto" ? std::string() : config.aggregator;
}

}  // namespace rlscope

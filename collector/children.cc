#include "collector/children.h"

#include <fnmatch.h>

#include <fstream>

namespace rlscope {

namespace {

std::string BaseName(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool Glob(const std::string& pattern, const std::string& text) {
  return fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

}  // namespace

std::vector<std::string> ReadCommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

std::string JoinCommandLine(const std::vector<std::string>& args, size_t max_chars) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ' ';
    out += a;
    if (out.size() > max_chars) return out.substr(0, max_chars) + "...";
  }
  return out;
}

bool IsRayHelper(const std::vector<std::string>& args) {
  // Paths inside Ray's package (its daemons, agents and worker entry points)
  // and the titles Ray's workers give themselves.
  static const char* const kRayPaths[] = {"/ray/_private/", "/ray/dashboard/", "/ray/autoscaler/", "/ray/util/client/",
                                          "/ray/core/src/"};
  static const char* const kRayNames[] = {"raylet", "gcs_server", "default_worker.py", "setup_worker.py"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i == 0 && a.rfind("ray::", 0) == 0) return true;
    for (const char* p : kRayPaths) {
      if (a.find(p) != std::string::npos) return true;
    }
    const std::string base = BaseName(a);
    for (const char* n : kRayNames) {
      if (base == n) return true;
    }
    if (i > 0 && args[i - 1] == "-m" && (a == "ray" || a.rfind("ray.", 0) == 0)) return true;
  }
  return false;
}

bool ChildSelected(const std::vector<std::string>& patterns, const std::vector<std::string>& args) {
  const std::string joined = JoinCommandLine(args, std::string::npos);
  for (const auto& p : patterns) {
    if (p == "*" || Glob(p, joined)) return true;
    for (const auto& a : args) {
      if (Glob(p, a) || Glob(p, BaseName(a))) return true;
    }
  }
  return false;
}

}  // namespace rlscope

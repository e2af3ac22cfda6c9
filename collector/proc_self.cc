#include "collector/proc_self.h"

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace rlscope {

std::vector<int64_t> ListThreads() {
  std::vector<int64_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(std::strtoll(e->d_name, nullptr, 10));
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

std::string ReadThreadName(int64_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string line;
  std::getline(in, line);
  return line;
}

bool ThreadBlocksSignal(int64_t tid, int sig) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigBlk:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return sig >= 1 && sig <= 64 && ((mask >> (sig - 1)) & 1) != 0;
  }
  return false;
}

}  // namespace rlscope

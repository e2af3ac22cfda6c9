#include "native/spool_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "native/names.h"

namespace rlscope {

namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// mkdir -p with mode 0700; false with `error`.
bool MakeDirs(const std::string& dir, std::string* error) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      *error = "cannot create " + part + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

std::string RunKey(const std::string& secret) {
  if (secret.empty()) return "";
  // FNV-1a 64 over a domain prefix and the secret.
  uint64_t h = 14695981039346656037ull;
  for (char c : std::string("rlscope-run-key\n") + secret) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string SpoolRoot() {
  const char* env = std::getenv(names::kEnvSpoolDir);
  if (env != nullptr && *env != '\0') return env;
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  return base + "/rlscope-spool-" + std::to_string(getuid());
}

std::string SpoolDirFor(const std::string& run_key) {
  return SpoolRoot() + "/" + (run_key.empty() ? std::string("no-secret") : run_key);
}

SpoolWriteResult WriteSpoolFile(const std::string& dir, const std::string& name,
                                const std::vector<std::string>& messages) {
  SpoolWriteResult result;
  if (!MakeDirs(dir, &result.error)) return result;
  const std::string path = dir + "/" + name + kSpoolSuffix, tmp = path + ".tmp";
  off_t total = static_cast<off_t>(std::strlen(kSpoolMagic));
  for (const std::string& m : messages) total += 4 + static_cast<off_t>(m.size());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    result.error = "cannot create " + tmp + ": " + std::strerror(errno);
    return result;
  }
  bool ok = true;
  // Reserve every byte first: a full disk fails here, before any is written.
  if (const int rc = posix_fallocate(fd, 0, total); rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    result.error = "cannot reserve " + std::to_string(total) + " bytes for " + tmp + ": " + std::strerror(rc);
    ok = false;
  }
  if (ok) ok = WriteAll(fd, kSpoolMagic, std::strlen(kSpoolMagic));
  for (size_t i = 0; ok && i < messages.size(); ++i) {
    const uint32_t n = static_cast<uint32_t>(messages[i].size());
    const unsigned char len[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                  static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
    ok = WriteAll(fd, reinterpret_cast<const char*>(len), 4) && WriteAll(fd, messages[i].data(), n);
  }
  if (!ok && result.error.empty()) result.error = "cannot write " + tmp + ": " + std::strerror(errno);
  if (close(fd) != 0 && ok) {
    ok = false;
    result.error = "cannot write " + tmp + ": " + std::strerror(errno);
  }
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    result.error = "cannot rename " + tmp + ": " + std::strerror(errno);
  }
  if (!ok) {
    unlink(tmp.c_str());
    return result;
  }
  result.ok = true;
  result.messages = messages.size();
  result.path = path;
  return result;
}

bool ReadSpoolFile(const std::string& path, std::vector<std::string>* messages, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t magic = std::strlen(kSpoolMagic);
  if (data.compare(0, magic, kSpoolMagic) != 0) {
    *error = path + " is not an rlscope spool file (no '" + std::string(kSpoolMagic, magic - 1) + "' line)";
    return false;
  }
  messages->clear();
  size_t pos = magic;
  while (pos < data.size()) {
    if (data.size() - pos < 4) break;
    const auto* p = reinterpret_cast<const unsigned char*>(data.data() + pos);
    const size_t n = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<size_t>(p[3]) << 24);
    if (data.size() - pos - 4 < n) break;
    messages->emplace_back(data, pos + 4, n);
    pos += 4 + n;
  }
  if (pos != data.size()) {
    *error = path + " is cut short at byte " + std::to_string(pos) + " of " + std::to_string(data.size());
    return false;
  }
  return true;
}

std::vector<std::string> ListSpoolFiles(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (EndsWith(name, kSpoolSuffix)) files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace rlscope

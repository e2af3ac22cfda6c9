// What /proc says of this process's threads, for the flush thread (never a
// host thread: each call reads /proc).
#pragma once

#include <dirent.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rlscope {

// The kernel ids of the process's threads now, ascending (empty if /proc
// cannot be read).
std::vector<int64_t> ListThreads();
// ListThreads through the directory kept open (rewound at each listing):
// the flush thread's, which lists the process's threads at each flush in
// steps chosen up front and once a second in the others, always on.
// Closes on destruction.
class ThreadLister {
 public:
  ThreadLister() = default;
  ThreadLister(const ThreadLister&) = delete;
  ThreadLister& operator=(const ThreadLister&) = delete;
  ~ThreadLister();
  std::vector<int64_t> List();

 private:
  DIR* dir_ = nullptr;
};
// Thread `tid`'s name (/proc/self/task/<tid>/comm), "" when gone.
std::string ReadThreadName(int64_t tid);
// Whether thread `tid` blocks signal `sig` now (its status's SigBlk): a
// CPU timer's signal would stay pending there. False when unknown.
bool ThreadBlocksSignal(int64_t tid, int sig);

// One /proc file read again and again through a descriptor kept open (an
// open and a close are most of a small /proc read's cost): each Read is a
// pread at offset 0, which makes the kernel write the file afresh. A
// thread's file read after the thread exited says so (an empty read) even
// if its id came back as another thread's (the descriptor is the old
// thread's), and is opened again at the next read. Move-only; closes on
// destruction. The flush thread's only: a forked child (which has no flush
// thread) holds copies of the descriptors until it execs (O_CLOEXEC).
class KeptProcFile {
 public:
  KeptProcFile() = default;
  explicit KeptProcFile(std::string path) : path_(std::move(path)) {}
  KeptProcFile(KeptProcFile&& other) noexcept;
  KeptProcFile& operator=(KeptProcFile&& other) noexcept;
  KeptProcFile(const KeptProcFile&) = delete;
  KeptProcFile& operator=(const KeptProcFile&) = delete;
  ~KeptProcFile();
  // The file's text now, at most 511 bytes ("" when it cannot be read:
  // the thread is gone, or the file cannot be opened).
  std::string Read();
  // Its descriptor closed now (opened again at the next Read).
  void Close();
  bool is_open() const { return fd_ >= 0; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace rlscope

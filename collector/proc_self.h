// What /proc says of this process's threads, for the flush thread (never a
// host thread: each call opens files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlscope {

// The kernel ids of the process's threads now, ascending (empty if /proc
// cannot be read).
std::vector<int64_t> ListThreads();
// Thread `tid`'s name (/proc/self/task/<tid>/comm), "" when gone.
std::string ReadThreadName(int64_t tid);
// Whether thread `tid` blocks signal `sig` now (its status's SigBlk): a
// CPU timer's signal would stay pending there. False when unknown.
bool ThreadBlocksSignal(int64_t tid, int sig);

}  // namespace rlscope

// rlscope_ray._native's raw CPython half (fast_api.cc): range and mark.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace rlscope_py {

// Adds `range` (a type) and `mark`, `_set_hooks`, `_forget_names` to the
// module. False with a Python exception set on failure.
bool AddFastApi(PyObject* module);

// The collector's id of `name` (a str; interned once per process, then a
// dict lookup), 0 when no collector runs or it cannot be encoded. Never
// leaves an exception set. Under the GIL.
uint32_t NameId(PyObject* name);

// Adds the `nvtx` package's entry points (nvtx_fast.cc): nvtx_push,
// nvtx_pop, nvtx_start, nvtx_end, nvtx_mark and the flags they take.
bool AddNvtxFast(PyObject* module);

}  // namespace rlscope_py

// rlscope_ray._native's raw CPython half (fast_api.cc): range and mark.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace rlscope_py {

// Adds `range` (a type) and `mark`, `_set_hooks`, `_forget_names` to the
// module. False with a Python exception set on failure.
bool AddFastApi(PyObject* module);

}  // namespace rlscope_py

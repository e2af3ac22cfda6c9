// rlscope_ray._native's entry points for the `nvtx` package's calls
// (rlscope_ray/nvtx_fast.py puts them under the package's own functions
// while a collector records). Contract:
//   - Each records exactly what the NVTX handler records for the same call
//     made through the package (name, domain, category, integer payload;
//     the colour is not recorded there either), with the caller's flag
//     (kFlagViaNvtxFast, kFlagViaNvtxAnnotate): ids are the collector's
//     interned strings, as DomainCreateA and DomainRegisterStringA give them.
//   - Arguments it does not take as they are (a message or domain that is
//     no str, a category that is no int, a payload that is no int or float,
//     an int payload out of int64) return NotImplemented with nothing
//     recorded: the caller then goes the package's own way, which records
//     it or raises what the package raises.
//   - While the process records nothing (disarmed, not watching), a push or
//     a pop keeps its thread's depth and nothing else, a start returns 0 and
//     a mark does nothing, before any argument is read
//     (rlscope_push_idle): what the package's call does with no tool
//     attached, so steps not selected cost the C call's dispatch alone.
//   - No exception is left set on the recording path; the GIL is held.
#include <climits>
#include <cstdint>

#include "collector/rlscope_collector.h"
#include "native/event.h"
#include "python/bindings/fast_api.h"

namespace {

// What the package would put in the event's attributes, as ids.
struct Attrs {
  uint32_t name = 0, domain = 0, category = 0;
  uint64_t payload = 0;
  uint8_t flags = 0;
};

// A str (interned) or None (0); false for anything else.
bool IdOf(PyObject* o, uint32_t* id) {
  if (o == Py_None) {
    *id = 0;
    return true;
  }
  if (!PyUnicode_Check(o)) return false;
  *id = rlscope_py::NameId(o);
  return true;
}

// The flags argument: kFlagViaNvtxFast or kFlagViaNvtxAnnotate.
bool FlagsOf(PyObject* o, uint8_t* flags) {
  const long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  if (v != rlscope::kFlagViaNvtxFast && v != rlscope::kFlagViaNvtxAnnotate) return false;
  *flags = static_cast<uint8_t>(v);
  return true;
}

// (message, domain, category, payload, flags) as the package takes them.
bool ReadAttrs(PyObject* const* args, Attrs* a) {
  if (!IdOf(args[0], &a->name) || !IdOf(args[1], &a->domain) || !FlagsOf(args[4], &a->flags)) return false;
  if (args[2] != Py_None) {
    if (!PyLong_CheckExact(args[2])) return false;  // a str category: the package names it (get_category_id)
    const unsigned long c = PyLong_AsUnsignedLong(args[2]);
    if ((c == static_cast<unsigned long>(-1) && PyErr_Occurred()) || c > UINT32_MAX) {
      PyErr_Clear();
      return false;
    }
    a->category = static_cast<uint32_t>(c);
  }
  PyObject* p = args[3];
  if (p == Py_None || PyFloat_CheckExact(p)) return true;  // a double payload is not recorded (nvtx_injection.cc)
  if (!PyLong_CheckExact(p)) return false;                 // bool, arrays, bytes...: the package's way
  const long long v = PyLong_AsLongLong(p);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  a->payload = static_cast<uint64_t>(v);
  a->flags |= rlscope::kFlagHasPayload | rlscope::kFlagPayloadSigned;  // the package's INT64
  return true;
}

PyObject* NotTaken() { Py_RETURN_NOTIMPLEMENTED; }

// nvtx_push(message, domain, category, payload, flags) -> None | NotImplemented
PyObject* Push(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (rlscope_push_idle()) Py_RETURN_NONE;
  Attrs a;
  if (n != 5 || !ReadAttrs(args, &a)) return NotTaken();
  rlscope_nvtx_push(a.name, a.domain, a.category, a.payload, a.flags);
  Py_RETURN_NONE;
}

// nvtx_pop(domain, flags) -> None | NotImplemented
PyObject* Pop(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (rlscope_pop_idle()) Py_RETURN_NONE;
  uint32_t domain = 0;
  uint8_t flags = 0;
  if (n != 2 || !IdOf(args[0], &domain) || !FlagsOf(args[1], &flags)) return NotTaken();
  rlscope_nvtx_pop(domain, flags);
  Py_RETURN_NONE;
}

// nvtx_start(message, domain, category, payload, flags) -> handle | NotImplemented
PyObject* Start(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (rlscope_recording_idle()) return PyLong_FromLong(0);
  Attrs a;
  if (n != 5 || !ReadAttrs(args, &a)) return NotTaken();
  return PyLong_FromUnsignedLongLong(rlscope_nvtx_start(a.name, a.domain, a.category, a.payload, a.flags));
}

// nvtx_end(range, flags) -> None | NotImplemented. `range` is what the
// package's start_range returns, (id, its domain's handle), or what
// rlscope's gives in the same shape (handle, the package's domain handle):
// ends are matched by id alone, so the end is recorded in the default domain.
PyObject* End(PyObject*, PyObject* const* args, Py_ssize_t n) {
  uint8_t flags = 0;
  if (n != 2 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != 2 || !FlagsOf(args[1], &flags)) {
    return NotTaken();
  }
  PyObject* h = PyTuple_GET_ITEM(args[0], 0);
  if (!PyLong_CheckExact(h)) return NotTaken();
  const unsigned long long handle = PyLong_AsUnsignedLongLong(h);
  if (handle == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    return NotTaken();
  }
  rlscope_nvtx_end(0, handle, flags);
  Py_RETURN_NONE;
}

// nvtx_mark(message, domain, category, payload, flags) -> None | NotImplemented
PyObject* Mark(PyObject*, PyObject* const* args, Py_ssize_t n) {
  if (rlscope_recording_idle()) Py_RETURN_NONE;
  Attrs a;
  if (n != 5 || !ReadAttrs(args, &a)) return NotTaken();
  rlscope_nvtx_mark(a.name, a.domain, a.category, a.payload, a.flags);
  Py_RETURN_NONE;
}

#define RLSCOPE_FASTCALL(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f))
PyMethodDef kFunctions[] = {
    {"nvtx_push", RLSCOPE_FASTCALL(Push), METH_FASTCALL, "nvtx_push(message, domain, category, payload, flags)"},
    {"nvtx_pop", RLSCOPE_FASTCALL(Pop), METH_FASTCALL, "nvtx_pop(domain, flags)"},
    {"nvtx_start", RLSCOPE_FASTCALL(Start), METH_FASTCALL, "nvtx_start(message, domain, category, payload, flags)"},
    {"nvtx_end", RLSCOPE_FASTCALL(End), METH_FASTCALL, "nvtx_end(range, flags)"},
    {"nvtx_mark", RLSCOPE_FASTCALL(Mark), METH_FASTCALL, "nvtx_mark(message, domain, category, payload, flags)"},
    {nullptr, nullptr, 0, nullptr},
};
#undef RLSCOPE_FASTCALL

}  // namespace

namespace rlscope_py {

bool AddNvtxFast(PyObject* module) {
  if (PyModule_AddFunctions(module, kFunctions) != 0) return false;
  return PyModule_AddIntConstant(module, "FLAG_VIA_NVTX_FAST", rlscope::kFlagViaNvtxFast) == 0 &&
         PyModule_AddIntConstant(module, "FLAG_VIA_NVTX_ANNOTATE", rlscope::kFlagViaNvtxAnnotate) == 0;
}

}  // namespace rlscope_py

/* The module of the calling thread's current Python frame, for the CPU
 * sampler's signal handler (collector/cpu_sampler.h; the contract is
 * rlscope_set_py_module_reader in collector/rlscope_collector.h).
 *
 * Built against the running CPython's own internal headers, so the frame
 * layout read here is this interpreter's (3.11 to 3.13; other versions
 * register no reader and the sampler says so). A signal can land anywhere,
 * even while the interpreter is half way through pushing a frame, so no
 * pointer is trusted: each one is checked with `readable` (the process's
 * readable memory, as the collector last read it) before it is read, and each
 * object by its type before its fields are. What fails a check gives 0 (no
 * module): the sample still counts, as Python, never a fault. No lock, no
 * allocation, no system call; no Python API but the thread-state lookup,
 * which reads a thread-specific key. The module is the frame's function's
 * __module__: module-level code has none on 3.11 (its function is made
 * without one), so a sample there counts by its shared object alone. */
#define Py_BUILD_CORE 1
#include <Python.h>

#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#include "internal/pycore_frame.h"
#define RLSCOPE_PY_FRAMES 1
#endif

#include "python/bindings/py_frame.h"

#ifdef RLSCOPE_PY_FRAMES
static size_t CurrentModule(int (*readable)(const void* p, size_t n), char* out, size_t cap) {
  if (cap == 0) return 0;
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (ts == NULL || !readable(ts, sizeof(PyThreadState))) return 0;
#if PY_VERSION_HEX >= 0x030D0000
  _PyInterpreterFrame* f = ts->current_frame;
#else
  _PyCFrame* cf = ts->cframe;
  if (cf == NULL || !readable(cf, sizeof(_PyCFrame))) return 0;
  _PyInterpreterFrame* f = cf->current_frame;
#endif
  /* The innermost frame with a function: entry frames of calls from C
   * (3.12 on) have none; a few at most. */
  for (int depth = 0; f != NULL && depth < 4; ++depth) {
    if (!readable(f, sizeof(_PyInterpreterFrame))) return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) {
      f = f->previous;
      continue;
    }
    PyObject* func = f->f_funcobj;
#else
    PyObject* func = (PyObject*)f->f_func;
#endif
    if (func == NULL || !readable(func, sizeof(PyFunctionObject)) || Py_TYPE(func) != &PyFunction_Type) return 0;
    PyObject* module = ((PyFunctionObject*)func)->func_module;
    if (module == NULL || !readable(module, sizeof(PyASCIIObject)) || Py_TYPE(module) != &PyUnicode_Type) return 0;
    PyASCIIObject* a = (PyASCIIObject*)module;
    if (!a->state.compact || !a->state.ascii) return 0; /* a non-ASCII module name: not read */
    size_t n = (size_t)a->length;
    if (n >= cap) n = cap - 1;
    const char* data = (const char*)(a + 1);
    if (!readable(data, n)) return 0;
    memcpy(out, data, n);
    return n;
  }
  return 0;
}

static char reader_name[64];

rlscope_py_module_reader_t RlscopePyModuleReader(const char** what) {
  PyOS_snprintf(reader_name, sizeof(reader_name), "CPython %d.%d", PY_MAJOR_VERSION, PY_MINOR_VERSION);
  *what = reader_name;
  return &CurrentModule;
}
#else
rlscope_py_module_reader_t RlscopePyModuleReader(const char** what) {
  *what = "";
  return NULL;
}
#endif

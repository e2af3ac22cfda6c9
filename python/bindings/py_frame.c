/* The module of the calling thread's current Python frame, for the CPU
 * sampler's signal handler (collector/cpu_sampler.h; the contract is
 * rlscope_set_py_module_reader in collector/rlscope_collector.h).
 *
 * Built against the running CPython's own internal headers, so the frame
 * layout read here is this interpreter's (3.11 to 3.13; other versions
 * register no reader and the sampler says so). A signal can land anywhere,
 * even while the interpreter is half way through pushing or popping a frame
 * (a frame in a data-stack chunk unmapped a moment ago, an uninitialised
 * pointer), so nothing is dereferenced in place: every struct is copied out
 * with `read`, the collector's fault-proof copy, and each object is checked
 * by its type before its fields are used. A read that fails, or a check,
 * gives 0 (no module): the sample still counts, as Python, never a fault.
 * No lock, no allocation, no system call of its own; no Python API but the
 * thread-state lookup, which reads a thread-specific key. The module is the
 * frame's function's __module__: module-level code has none on 3.11 (its
 * function is made without one), so a sample there counts by its shared
 * object alone. */
#define Py_BUILD_CORE 1
#include <Python.h>

#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#include "internal/pycore_frame.h"
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_interp.h"
#else
#include "internal/pycore_runtime.h"
#endif
#define RLSCOPE_PY_FRAMES 1
#endif

#include "python/bindings/py_frame.h"

#ifdef RLSCOPE_PY_FRAMES
/* Copies the object at `p` into `out` (of `size` bytes) when `read` can and
 * it has the type `type`. */
static int ReadObject(rlscope_safe_read_t read, const void* p, void* out, size_t size, PyTypeObject* type) {
  return p != NULL && read(out, p, size) && Py_TYPE((PyObject*)out) == type;
}

static size_t CurrentModule(rlscope_safe_read_t read, char* out, size_t cap) {
  if (cap == 0) return 0;
  PyThreadState* ts = PyGILState_GetThisThreadState();
  if (ts == NULL) return 0;
  _PyInterpreterFrame* f = NULL;
#if PY_VERSION_HEX >= 0x030D0000
  if (!read(&f, &ts->current_frame, sizeof(f))) return 0;
#else
  _PyCFrame* cf = NULL;
  if (!read(&cf, &ts->cframe, sizeof(cf)) || cf == NULL || !read(&f, &cf->current_frame, sizeof(f))) return 0;
#endif
  /* The innermost frame with a function: entry frames of calls from C
   * (3.12 on) have none; a few at most. */
  for (int depth = 0; f != NULL && depth < 4; ++depth) {
    _PyInterpreterFrame frame;
    if (!read(&frame, f, sizeof(frame))) return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (frame.owner == FRAME_OWNED_BY_CSTACK) {
      f = frame.previous;
      continue;
    }
    const void* func = frame.f_funcobj;
#else
    const void* func = frame.f_func;
#endif
    PyFunctionObject fn;
    if (!ReadObject(read, func, &fn, sizeof(fn), &PyFunction_Type)) return 0;
    PyASCIIObject name;
    if (!ReadObject(read, fn.func_module, &name, sizeof(name), &PyUnicode_Type)) return 0;
    if (!name.state.compact || !name.state.ascii) return 0; /* a non-ASCII module name: not read */
    size_t n = (size_t)name.length;
    if (n >= cap) n = cap - 1;
    /* A compact ASCII string's characters follow its header. */
    if (!read(out, (const char*)fn.func_module + sizeof(PyASCIIObject), n)) return 0;
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

int RlscopePyGil(const void** begin, size_t* size) {
#if PY_VERSION_HEX >= 0x030C0000
  const struct _gil_runtime_state* gil = PyInterpreterState_Get()->ceval.gil; /* this interpreter's */
#else
  const struct _gil_runtime_state* gil = &_PyRuntime.ceval.gil;
#endif
  if (gil == NULL) return 0;
  *begin = gil;
  *size = sizeof(*gil);
  return 1;
}

/* See py_frame.h. The GIL is held: read in place. */
const void* RlscopePyCoroutineFrame(void) {
  PyThreadState* ts = PyThreadState_GET();
#if PY_VERSION_HEX >= 0x030D0000
  _PyInterpreterFrame* f = ts->current_frame;
#else
  _PyInterpreterFrame* f = ts->cframe != NULL ? ts->cframe->current_frame : NULL;
#endif
#if PY_VERSION_HEX >= 0x030C0000
  while (f != NULL && f->owner == FRAME_OWNED_BY_CSTACK) f = f->previous;
#endif
  if (f == NULL) return NULL;
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* executable = f->f_executable;
  if (executable == NULL || !PyCode_Check(executable)) return NULL;
  const int flags = ((PyCodeObject*)executable)->co_flags;
#else
  const int flags = f->f_code->co_flags;
#endif
  return (flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) != 0 ? (const void*)f : NULL;
}
#else
rlscope_py_module_reader_t RlscopePyModuleReader(const char** what) {
  *what = "";
  return NULL;
}

int RlscopePyGil(const void** begin, size_t* size) {
  (void)begin;
  (void)size;
  return 0;
}

/* Other versions: through the public API (materialises the frame object). */
const void* RlscopePyCoroutineFrame(void) {
  PyFrameObject* frame = PyEval_GetFrame(); /* borrowed */
  if (frame == NULL) return NULL;
  PyCodeObject* code = PyFrame_GetCode(frame);
  const int flags = code->co_flags;
  Py_DECREF(code);
  return (flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) != 0 ? (const void*)frame : NULL;
}
#endif

/* A probe of the CPU sampler's Python frame reader (python/bindings/py_frame.c)
 * outside a signal handler, for tests/test_py_frame.py: an extension module,
 * built against each CPython the test finds, whose current_module() returns
 * what the reader reads as the module of its caller's frame (reads are plain
 * copies here: the layout is what is under test, not the fault-proof read). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "python/bindings/py_frame.h"

#include <string.h>

static int PlainRead(void* dst, const void* src, size_t n) {
  if (src == NULL) return 0;
  memcpy(dst, src, n);
  return 1;
}

static PyObject* CurrentModule(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  const char* what = "";
  rlscope_py_module_reader_t reader = RlscopePyModuleReader(&what);
  if (reader == NULL) Py_RETURN_NONE;
  char name[128];
  const size_t n = reader(&PlainRead, name, sizeof(name));
  return Py_BuildValue("(s#s)", name, (Py_ssize_t)n, what);
}

static PyMethodDef kMethods[] = {
    {"current_module", CurrentModule, METH_NOARGS, "(module of the caller's frame, reader name)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "py_frame_probe", NULL, -1, kMethods};

PyMODINIT_FUNC PyInit_py_frame_probe(void) { return PyModule_Create(&kModule); }

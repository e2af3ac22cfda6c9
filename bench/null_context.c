/* null_context: the floor of a C-level context manager, the baseline of
 * `rlscope_ray.range` with no collector in bench/python_range_bench.py.
 *
 * `with null_context.range("name"):` runs a C context manager written the
 * usual way, with nothing to record: a type called through vectorcall that
 * takes its objects from a free list, an `__enter__` (METH_NOARGS) that
 * returns the object and an `__exit__` (METH_FASTCALL) that returns None,
 * both method descriptors, so `with` allocates a bound builtin for each.
 * rlscope_ray.range binds its own two without that allocation
 * (python/bindings/fast_api.cc), so it can come in under this floor. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
  PyObject_HEAD PyObject* name;
} NullRange;

static PyTypeObject NullRangeType;

#define FREE_LIST_SIZE 32
static NullRange* free_list[FREE_LIST_SIZE];
static int free_count = 0;

static PyObject* NullRangeVectorcall(PyObject* type, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "null_context.range(name): one str");
    return NULL;
  }
  NullRange* self;
  if (free_count > 0) {
    self = free_list[--free_count];
    PyObject_Init((PyObject*)self, (PyTypeObject*)type);
  } else {
    self = (NullRange*)((PyTypeObject*)type)->tp_alloc((PyTypeObject*)type, 0);
    if (self == NULL) return NULL;
  }
  Py_INCREF(args[0]);
  self->name = args[0];
  return (PyObject*)self;
}

static void NullRangeDealloc(PyObject* o) {
  NullRange* self = (NullRange*)o;
  Py_CLEAR(self->name);
  if (free_count < FREE_LIST_SIZE) {
    free_list[free_count++] = self;
    return;
  }
  Py_TYPE(o)->tp_free(o);
}

static PyObject* NullRangeEnter(PyObject* o, PyObject* unused) {
  (void)unused;
  Py_INCREF(o);
  return o;
}

static PyObject* NullRangeExit(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  (void)o;
  (void)args;
  (void)nargs;
  Py_RETURN_NONE;
}

static PyMethodDef kMethods[] = {
    {"__enter__", NullRangeEnter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))NullRangeExit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "null_context", NULL, -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_null_context(void) {
  NullRangeType.tp_name = "null_context.range";
  NullRangeType.tp_basicsize = sizeof(NullRange);
  NullRangeType.tp_dealloc = NullRangeDealloc;
  NullRangeType.tp_flags = Py_TPFLAGS_DEFAULT;
  NullRangeType.tp_methods = kMethods;
  NullRangeType.tp_vectorcall = NullRangeVectorcall;
  NullRangeType.tp_new = NULL;
  if (PyType_Ready(&NullRangeType) < 0) return NULL;
  PyObject* m = PyModule_Create(&kModule);
  if (m == NULL) return NULL;
  Py_INCREF(&NullRangeType);
  if (PyModule_AddObject(m, "range", (PyObject*)&NullRangeType) < 0) {
    Py_DECREF(&NullRangeType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

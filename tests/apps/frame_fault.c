/* A CPython extension for tests/test_sampler_safety.py: the memory of the
 * running frame goes away under the CPU sampler, so the collector's own frame
 * reader (python/bindings/py_frame.c) meets a real fault, not a test reader.
 *
 *   spin(seconds)            this thread's CPU for `seconds` (its own CPU
 *                            clock), in C: no frame changes (the control)
 *   hold(mapped_s, gone_s)   points the thread state's current frame at a
 *                            copy of its caller's frame on a page of its own
 *                            for `mapped_s` of CPU (the reader reads the copy:
 *                            the caller's module), then makes that page
 *                            unreadable (PROT_NONE) for `gone_s` (every read
 *                            of it faults), then puts the real frame back
 *                            before any bytecode runs, and unmaps the page.
 *
 * Nothing runs Python in between (the GIL is held, the spin allocates
 * nothing): only the signal handler looks at the swapped pointer. PROT_NONE
 * rather than munmap, so that no other thread's mmap can reuse the address
 * while it is swapped in. Built by the test with gcc against the running
 * interpreter's headers (Py_BUILD_CORE, as py_frame.c), CPython 3.11-3.13. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>

#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double ThreadCpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void Spin(double seconds) {
  const double end = ThreadCpu() + seconds;
  while (ThreadCpu() < end) {
    for (int i = 0; i < 10000; ++i) sink += (unsigned long)i;
  }
}

static PyObject* spin(PyObject* self, PyObject* args) {
  double seconds;
  if (!PyArg_ParseTuple(args, "d", &seconds)) return NULL;
  Spin(seconds);
  Py_RETURN_NONE;
}

static PyObject* hold(PyObject* self, PyObject* args) {
  double mapped_s, gone_s;
  if (!PyArg_ParseTuple(args, "dd", &mapped_s, &gone_s)) return NULL;
  PyThreadState* ts = PyThreadState_Get();
#if PY_VERSION_HEX >= 0x030D0000
  _PyInterpreterFrame** slot = &ts->current_frame;
#else
  _PyInterpreterFrame** slot = &ts->cframe->current_frame;
#endif
  _PyInterpreterFrame* real = *slot;
  const long page = sysconf(_SC_PAGESIZE);
  if (real == NULL || (long)sizeof(*real) > page) {
    PyErr_SetString(PyExc_RuntimeError, "no frame to copy");
    return NULL;
  }
  char* copy = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return PyErr_SetFromErrno(PyExc_OSError);
  memcpy(copy, real, sizeof(*real));
  *slot = (_PyInterpreterFrame*)copy;
  Spin(mapped_s);
  mprotect(copy, (size_t)page, PROT_NONE);
  Spin(gone_s);
  *slot = real;
  munmap(copy, (size_t)page);
  Py_RETURN_NONE;
}

static PyMethodDef kMethods[] = {
    {"spin", spin, METH_VARARGS, "this thread's CPU for a while, in C"},
    {"hold", hold, METH_VARARGS, "the current frame on a page of its own, then unreadable"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "rlscope_test_frame_fault", NULL, -1, kMethods};

PyMODINIT_FUNC PyInit_rlscope_test_frame_fault(void) { return PyModule_Create(&kModule); }

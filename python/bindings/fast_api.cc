// The per-call Python API in raw CPython (no pybind11 dispatch on the hot
// path): rlscope_ray.range, a context manager and decorator, and
// rlscope_ray.mark. Contract:
//   - No collector in this process: a range costs one object from a free
//     list, `with` binding __enter__/__exit__ to it (from a free list too, not
//     a bound builtin each) and one "is a collector running" read per enter;
//     nothing else (no interning, no recording call).
//   - A collector: a name is interned once per process (a dict from the str
//     object to its id, cleared in a forked child), then each enter/exit is
//     one C ABI call (rlscope_range_push_id / rlscope_range_pop).
//   - __exit__ pops only what the matching __enter__ on the same thread
//     pushed (a per-thread stack of "pushed" bits, as `with` blocks nest per
//     thread): a collector started inside a range never sees a stray pop,
//     and one object may be entered on several threads at once or again
//     while open (a decorated function, recursive or not).
//   - Entered in a coroutine (the calling frame is an `async def`'s, an
//     async generator's), a range is a start/end range keyed by that frame,
//     not a push: coroutines interleave on one thread across awaits, and
//     each range still ends where its own `with` ends (shown on its own
//     async track). A link payload is not kept there (start/end ranges
//     carry their id, not a payload).
//   - Picklable (cloudpickle ships decorated functions to Ray workers): by
//     name and link payload.
//   - `link=key` and decorating a function call back into Python (hooks set
//     by rlscope_ray at import: link_key, _decorate): rare, not per call.
// Every function runs with the GIL held; the module state below is touched
// only under it.
#include "python/bindings/fast_api.h"

#include <structmember.h>

#include <cstdint>

#include "collector/rlscope_collector.h"
#include "python/bindings/py_frame.h"

namespace {

PyObject* g_ids = nullptr;                       // str -> int: names this process's collector interned
PyObject* g_link_key = nullptr;                  // callable(key) -> int payload (rlscope_ray.link_key)
PyObject* g_decorate = nullptr;                  // callable(range, fn) -> wrapper (rlscope_ray._decorate)
constexpr Py_ssize_t kMaxCachedNames = 1 << 16;  // past this, intern on every call
// _untooled(True): ranges enter as with no collector (make bench, section
// accuracy: a step of the same code without the profiler, in one process).
bool g_untooled = false;

}  // namespace

// The collector's id of `name` (a str), 0 when no collector runs. Never
// leaves an exception set: a name that cannot be encoded is not recorded.
uint32_t rlscope_py::NameId(PyObject* name) {
  if (!rlscope_collector_running()) return 0;
  if (PyObject* v = PyDict_GetItemWithError(g_ids, name)) {  // borrowed
    return static_cast<uint32_t>(PyLong_AsUnsignedLong(v));
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  const char* s = PyUnicode_AsUTF8(name);
  if (s == nullptr) {
    PyErr_Clear();
    return 0;
  }
  const uint32_t id = rlscope_intern(s);
  if (id != 0 && PyDict_GET_SIZE(g_ids) < kMaxCachedNames) {
    if (PyObject* o = PyLong_FromUnsignedLong(id)) {
      if (PyDict_SetItem(g_ids, name, o) != 0) PyErr_Clear();
      Py_DECREF(o);
    } else {
      PyErr_Clear();
    }
  }
  return id;
}

namespace {

using rlscope_py::NameId;

struct RangeObject {
  PyObject_HEAD PyObject* name;  // str
  uint64_t payload;              // link_key(link) when has_payload
  uint32_t id;                   // 0 until entered with a collector running
  int has_payload;
  // Open entries from coroutines: the first in the slot (frame, handle),
  // more at once (one object, concurrent coroutines) in a dict from the
  // frame's address to the handle.
  const void* coro_frame;
  uint64_t coro_handle;
  PyObject* coro_more;
};

// This thread's open ranges (entered, not yet exited): bit d of
// t_pushed says whether the one at depth d was pushed; deeper than 64, what
// the collector's presence says at exit.
// initial-exec: a load, not a __tls_get_addr call, per access (this module is
// dlopen'ed: it takes these bytes of the static TLS surplus glibc keeps, as
// the collector's thread state does).
thread_local uint64_t t_pushed __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint32_t t_depth __attribute__((tls_model("initial-exec"))) = 0;

extern PyTypeObject RangeType;

// Freed ranges kept for reuse (a `with range(...)` per call allocates one):
// the exact type only, at most kFreeListSize, under the GIL like everything here.
constexpr int kFreeListSize = 32;
RangeObject* g_free[kFreeListSize];
int g_free_count = 0;

// A new range of `name` (str) with `link` (nullptr or None: no link).
PyObject* NewRange(PyTypeObject* type, PyObject* name, PyObject* link) {
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "rlscope_ray.range(name): name must be a str, got %.100s", Py_TYPE(name)->tp_name);
    return nullptr;
  }
  uint64_t payload = 0;
  const bool linked = link != nullptr && link != Py_None;
  if (linked) {
    if (g_link_key == nullptr) {
      PyErr_SetString(PyExc_RuntimeError, "rlscope_ray.range(link=...): rlscope_ray is not initialised");
      return nullptr;
    }
    PyObject* key = PyObject_CallOneArg(g_link_key, link);
    if (key == nullptr) return nullptr;
    payload = PyLong_AsUnsignedLongLong(key);
    Py_DECREF(key);
    if (PyErr_Occurred()) return nullptr;
  }
  RangeObject* self;
  if (type == &RangeType && g_free_count > 0) {  // the common case: reuse a freed one
    self = g_free[--g_free_count];
    PyObject_Init(reinterpret_cast<PyObject*>(self), type);
  } else {
    self = reinterpret_cast<RangeObject*>(type->tp_alloc(type, 0));
    if (self == nullptr) return nullptr;
  }
  Py_INCREF(name);
  self->name = name;
  self->payload = payload;
  self->id = 0;
  self->has_payload = linked ? 1 : 0;
  self->coro_frame = nullptr;
  self->coro_handle = 0;
  self->coro_more = nullptr;
  return reinterpret_cast<PyObject*>(self);
}

// range(name, link=None), called as a type: the vectorcall path (no tuple or
// dict built per call).
PyObject* RangeVectorcall(PyObject* type, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  PyObject* name = nargs >= 1 ? args[0] : nullptr;
  PyObject* link = nargs >= 2 ? args[1] : nullptr;
  if (nargs > 2) {
    PyErr_Format(PyExc_TypeError, "rlscope_ray.range() takes at most 2 positional arguments (%zd given)", nargs);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, i);
    PyObject** slot = nullptr;
    if (PyUnicode_CompareWithASCIIString(key, "name") == 0) slot = &name;
    if (PyUnicode_CompareWithASCIIString(key, "link") == 0) slot = &link;
    if (slot == nullptr) {
      PyErr_Format(PyExc_TypeError, "rlscope_ray.range() got an unexpected keyword argument '%U'", key);
      return nullptr;
    }
    if (*slot != nullptr) {
      PyErr_Format(PyExc_TypeError, "rlscope_ray.range() got multiple values for argument '%U'", key);
      return nullptr;
    }
    *slot = args[nargs + i];
  }
  if (name == nullptr) {
    PyErr_SetString(PyExc_TypeError, "rlscope_ray.range() missing required argument 'name'");
    return nullptr;
  }
  return NewRange(reinterpret_cast<PyTypeObject*>(type), name, link);
}

// The same through tp_new (subclasses, range.__new__).
PyObject* RangeNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"name", "link", nullptr};
  PyObject* name = nullptr;
  PyObject* link = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:range", const_cast<char**>(kwlist), &name, &link)) {
    return nullptr;
  }
  return NewRange(type, name, link);
}

void RangeDealloc(PyObject* o) {
  RangeObject* self = reinterpret_cast<RangeObject*>(o);
  Py_CLEAR(self->name);
  Py_CLEAR(self->coro_more);
  if (Py_TYPE(o) == &RangeType && g_free_count < kFreeListSize) {
    g_free[g_free_count++] = self;  // kept for the next range (no allocator round trip)
    return;
  }
  Py_TYPE(o)->tp_free(o);
}

// A coroutine's entry: a start/end range under its frame's key. False (and
// nothing recorded) when it cannot be kept (no memory for the dict).
bool EnterInCoroutine(RangeObject* self, const void* frame) {
  if (self->coro_frame == nullptr) {
    self->coro_frame = frame;
    self->coro_handle = rlscope_range_start_id(self->id);
    return true;
  }
  if (self->coro_more == nullptr && (self->coro_more = PyDict_New()) == nullptr) {
    PyErr_Clear();
    return false;
  }
  PyObject* key = PyLong_FromVoidPtr(const_cast<void*>(frame));
  PyObject* handle = key != nullptr ? PyLong_FromUnsignedLongLong(rlscope_range_start_id(self->id)) : nullptr;
  const bool kept = handle != nullptr && PyDict_SetItem(self->coro_more, key, handle) == 0;
  Py_XDECREF(key);
  Py_XDECREF(handle);
  if (!kept) PyErr_Clear();
  return kept;
}

// The end of a coroutine's entry; false when `frame` has none open here.
bool ExitInCoroutine(RangeObject* self, const void* frame) {
  if (self->coro_frame == frame) {
    self->coro_frame = nullptr;
    rlscope_range_end(self->coro_handle);
    return true;
  }
  if (self->coro_more == nullptr) return false;
  PyObject* key = PyLong_FromVoidPtr(const_cast<void*>(frame));
  PyObject* handle = key != nullptr ? PyDict_GetItemWithError(self->coro_more, key) : nullptr;  // borrowed
  bool found = false;
  if (handle != nullptr) {
    const uint64_t h = PyLong_AsUnsignedLongLong(handle);
    found = PyDict_DelItem(self->coro_more, key) == 0;
    if (found) rlscope_range_end(h);
  }
  Py_XDECREF(key);
  if (PyErr_Occurred()) PyErr_Clear();
  return found;
}

PyObject* RangeEnter(PyObject* o, PyObject* /*unused*/) {
  RangeObject* self = reinterpret_cast<RangeObject*>(o);
  if (self->id == 0 && !g_untooled && rlscope_collector_running()) self->id = NameId(self->name);
  const bool pushed = self->id != 0 && !g_untooled;
  if (pushed) {
    if (const void* frame = RlscopePyCoroutineFrame(); frame != nullptr && EnterInCoroutine(self, frame)) {
      Py_INCREF(o);
      return o;  // not on this thread's stack of pushes
    }
    if (self->has_payload) {
      rlscope_range_push_payload(self->id, self->payload);
    } else {
      rlscope_range_push_id(self->id);
    }
  }
  const uint32_t d = t_depth++;
  if (d < 64) t_pushed = pushed ? t_pushed | (uint64_t{1} << d) : t_pushed & ~(uint64_t{1} << d);
  Py_INCREF(o);
  return o;
}

PyObject* RangeExit(PyObject* o, PyObject* const* /*args*/, Py_ssize_t /*nargs*/) {
  RangeObject* self = reinterpret_cast<RangeObject*>(o);
  if (self->coro_frame != nullptr || self->coro_more != nullptr) {
    if (const void* frame = RlscopePyCoroutineFrame(); frame != nullptr && ExitInCoroutine(self, frame)) {
      Py_RETURN_NONE;
    }
  }
  if (t_depth != 0) {  // else an exit without its enter on this thread: nothing to pop
    const uint32_t d = --t_depth;
    if (d < 64 ? ((t_pushed >> d) & 1) != 0 : !g_untooled && rlscope_collector_running() != 0) rlscope_range_pop();
  }
  Py_RETURN_NONE;  // never swallows the exception
}

// pickle / cloudpickle: rebuilt by name and link payload (_restore_range).
PyObject* g_restore = nullptr;  // the module's _restore_range

PyObject* RangeReduce(PyObject* o, PyObject* /*unused*/) {
  RangeObject* self = reinterpret_cast<RangeObject*>(o);
  if (g_restore == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "rlscope_ray.range cannot be pickled: rlscope_ray._native is not ready");
    return nullptr;
  }
  if (self->has_payload) {
    return Py_BuildValue("O(OK)", g_restore, self->name, static_cast<unsigned long long>(self->payload));
  }
  return Py_BuildValue("O(OO)", g_restore, self->name, Py_None);
}

// @rlscope_ray.range("name") on a function: the wrapper is built in Python
// (functools.wraps), once per decorated function.
PyObject* RangeCall(PyObject* o, PyObject* args, PyObject* kwargs) {
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "a rlscope_ray.range decorates one function: range(name)(fn)");
    return nullptr;
  }
  if (PyTuple_GET_SIZE(args) != 1 || !PyCallable_Check(PyTuple_GET_ITEM(args, 0))) {
    PyErr_SetString(PyExc_TypeError, "a rlscope_ray.range decorates one function: range(name)(fn)");
    return nullptr;
  }
  if (g_decorate == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "rlscope_ray.range as a decorator: rlscope_ray is not initialised");
    return nullptr;
  }
  return PyObject_CallFunctionObjArgs(g_decorate, o, PyTuple_GET_ITEM(args, 0), nullptr);
}

PyObject* RangeRepr(PyObject* o) {
  RangeObject* self = reinterpret_cast<RangeObject*>(o);
  return PyUnicode_FromFormat("rlscope_ray.range(%R%s)", self->name, self->has_payload ? ", link=..." : "");
}

PyMethodDef kRangeMethods[] = {
    {"__reduce__", RangeReduce, METH_NOARGS, "Pickled by name and link payload."},
    {nullptr, nullptr, 0, nullptr},
};

// __enter__ and __exit__. `with` looks both up on the type and binds each to
// the range; a method descriptor would allocate a GC-tracked bound builtin
// per lookup: two per `with`, about 40 of a range's 85 ns with no collector
// (bench/null_context.c is that floor). These descriptors (SpecialType) bind
// a range of the exact type to a BoundSpecial from a free list instead: it
// holds the range (the range holds nothing of it, so no cycle and no GC
// tracking) and is called through vectorcall. A subclass's instance gets the
// standard bound builtin (its __dict__ could close a cycle only the GC frees).
// On the type (`range.__exit__`, as contextlib.ExitStack takes it) each is
// called with the range first.
PyMethodDef kEnterDef = {"__enter__", RangeEnter, METH_NOARGS,
                         "Push the range on the calling thread, or start it in a coroutine (a no-op with no "
                         "collector)."};
PyMethodDef kExitDef = {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(RangeExit)),
                        METH_FASTCALL, "Pop what __enter__ pushed; exceptions propagate."};

struct SpecialObject {  // range.__enter__ / range.__exit__, on the type
  PyObject_HEAD PyMethodDef* def;
};

struct BoundSpecialObject {  // one bound to a range
  PyObject_HEAD vectorcallfunc vectorcall;
  PyMethodDef* def;
  PyObject* range;  // strong
};

extern PyTypeObject SpecialType;
extern PyTypeObject BoundSpecialType;

// def's function on `range` with args (none for __enter__, anything for
// __exit__, which ignores them).
PyObject* CallSpecial(const PyMethodDef* def, PyObject* range, PyObject* const* args, Py_ssize_t nargs) {
  if (def->ml_flags == METH_NOARGS) {
    if (nargs != 0) {
      PyErr_Format(PyExc_TypeError, "rlscope_ray.range.%s() takes no arguments (%zd given)", def->ml_name, nargs);
      return nullptr;
    }
    return def->ml_meth(range, nullptr);
  }
  return reinterpret_cast<PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t)>(
      reinterpret_cast<void (*)()>(def->ml_meth))(range, args, nargs);
}

PyObject* BoundSpecialVectorcall(PyObject* o, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<BoundSpecialObject*>(o);
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) {
    PyErr_Format(PyExc_TypeError, "rlscope_ray.range.%s() takes no keyword arguments", self->def->ml_name);
    return nullptr;
  }
  return CallSpecial(self->def, self->range, args, PyVectorcall_NARGS(nargsf));
}

constexpr int kBoundFreeListSize = 32;
BoundSpecialObject* g_bound_free[kBoundFreeListSize];
int g_bound_free_count = 0;

void BoundSpecialDealloc(PyObject* o) {
  auto* self = reinterpret_cast<BoundSpecialObject*>(o);
  Py_CLEAR(self->range);  // may free the range (to its own free list)
  if (g_bound_free_count < kBoundFreeListSize) {
    g_bound_free[g_bound_free_count++] = self;
    return;
  }
  Py_TYPE(o)->tp_free(o);
}

PyObject* BoundSpecialRepr(PyObject* o) {
  auto* self = reinterpret_cast<BoundSpecialObject*>(o);
  return PyUnicode_FromFormat("<bound method %s of %R>", self->def->ml_name, self->range);
}

PyObject* SpecialGet(PyObject* o, PyObject* obj, PyObject* /*type*/) {
  auto* self = reinterpret_cast<SpecialObject*>(o);
  if (obj == nullptr || obj == Py_None) {  // on the type: unbound
    Py_INCREF(o);
    return o;
  }
  if (Py_TYPE(obj) != &RangeType) {
    if (PyObject_TypeCheck(obj, &RangeType)) return PyCFunction_NewEx(self->def, obj, nullptr);  // a subclass's
    PyErr_Format(PyExc_TypeError, "rlscope_ray.range.%s binds to a rlscope_ray.range, not %.100s", self->def->ml_name,
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  BoundSpecialObject* bound;
  if (g_bound_free_count > 0) {
    bound = g_bound_free[--g_bound_free_count];
    PyObject_Init(reinterpret_cast<PyObject*>(bound), &BoundSpecialType);
  } else {
    bound = reinterpret_cast<BoundSpecialObject*>(BoundSpecialType.tp_alloc(&BoundSpecialType, 0));
    if (bound == nullptr) return nullptr;
  }
  bound->vectorcall = BoundSpecialVectorcall;
  bound->def = self->def;
  Py_INCREF(obj);
  bound->range = obj;
  return reinterpret_cast<PyObject*>(bound);
}

// range.__exit__(r, exc_type, exc, tb): the first argument is the range.
PyObject* SpecialCall(PyObject* o, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<SpecialObject*>(o);
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  if ((kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) || n < 1 ||
      !PyObject_TypeCheck(PyTuple_GET_ITEM(args, 0), &RangeType)) {
    PyErr_Format(PyExc_TypeError, "rlscope_ray.range.%s(range, ...): the first argument is a rlscope_ray.range",
                 self->def->ml_name);
    return nullptr;
  }
  return CallSpecial(self->def, PyTuple_GET_ITEM(args, 0), &PyTuple_GET_ITEM(args, 1), n - 1);
}

PyObject* SpecialRepr(PyObject* o) {
  return PyUnicode_FromFormat("<method '%s' of 'rlscope_ray.range' objects>",
                              reinterpret_cast<SpecialObject*>(o)->def->ml_name);
}

PyObject* SpecialDoc(PyObject* o, void* /*closure*/) {
  return PyUnicode_FromString(reinterpret_cast<SpecialObject*>(o)->def->ml_doc);
}

PyObject* SpecialName(PyObject* o, void* /*closure*/) {
  return PyUnicode_FromString(reinterpret_cast<SpecialObject*>(o)->def->ml_name);
}

PyGetSetDef kSpecialGetSet[] = {
    {"__doc__", SpecialDoc, nullptr, nullptr, nullptr},
    {"__name__", SpecialName, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject SpecialType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "rlscope_ray.range_special";
  t.tp_basicsize = sizeof(SpecialObject);
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_repr = SpecialRepr;
  t.tp_call = SpecialCall;
  t.tp_descr_get = SpecialGet;
  t.tp_getset = kSpecialGetSet;
  return t;
}();

PyTypeObject BoundSpecialType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "rlscope_ray.range_bound_special";
  t.tp_basicsize = sizeof(BoundSpecialObject);
  t.tp_dealloc = BoundSpecialDealloc;
  t.tp_repr = BoundSpecialRepr;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_vectorcall_offset = offsetof(BoundSpecialObject, vectorcall);
  t.tp_call = PyVectorcall_Call;
  return t;
}();

SpecialObject g_enter = {PyObject_HEAD_INIT(&SpecialType) & kEnterDef};
SpecialObject g_exit = {PyObject_HEAD_INIT(&SpecialType) & kExitDef};

// Puts __enter__ and __exit__ in the ready range type's dict.
bool AddSpecials() {
  if (PyType_Ready(&SpecialType) != 0 || PyType_Ready(&BoundSpecialType) != 0) return false;
  if (PyDict_SetItemString(RangeType.tp_dict, "__enter__", reinterpret_cast<PyObject*>(&g_enter)) != 0 ||
      PyDict_SetItemString(RangeType.tp_dict, "__exit__", reinterpret_cast<PyObject*>(&g_exit)) != 0) {
    return false;
  }
  PyType_Modified(&RangeType);
  return true;
}

PyMemberDef kRangeMembers[] = {
    {"name", T_OBJECT, offsetof(RangeObject, name), READONLY, "The range's name."},
    {nullptr, 0, 0, 0, nullptr},
};

constexpr const char* kRangeDoc =
    "range(name, link=None)\n--\n\n"
    "A named range on the calling thread: context manager or decorator.\n\n"
    "In a coroutine (``async def``) it may span awaits while other coroutines\n"
    "run on the thread: each is its own start/end range (a link is not kept).\n"
    "With no collector in the process it costs about what `with` itself costs.\n"
    "``link=key`` marks it as work another process waits for: when the\n"
    "controller says ``waited(key)`` in a sub-task once its wait (a queue, a\n"
    "pipe, a collective) is over, the correction shortens that wait by what\n"
    "profiling cost this range's process (README: correction across processes).";

PyTypeObject RangeType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "rlscope_ray.range";
  t.tp_basicsize = sizeof(RangeObject);
  t.tp_dealloc = RangeDealloc;
  t.tp_repr = RangeRepr;
  t.tp_call = RangeCall;
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
  t.tp_doc = kRangeDoc;
  t.tp_methods = kRangeMethods;
  t.tp_members = kRangeMembers;
  t.tp_new = RangeNew;
  t.tp_vectorcall = RangeVectorcall;
  return t;
}();

// mark(name): an instant event on the calling thread, while recording.
PyObject* Mark(PyObject* /*module*/, PyObject* name) {
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "rlscope_ray.mark(name): name must be a str, got %.100s", Py_TYPE(name)->tp_name);
    return nullptr;
  }
  if (const uint32_t id = NameId(name)) rlscope_mark_id(id);
  Py_RETURN_NONE;
}

// _restore_range(name, payload): a range as pickled (payload None: no link).
PyObject* RestoreRange(PyObject* /*module*/, PyObject* args) {
  PyObject* name = nullptr;
  PyObject* payload = nullptr;
  if (!PyArg_ParseTuple(args, "OO:_restore_range", &name, &payload)) return nullptr;
  PyObject* r = NewRange(&RangeType, name, nullptr);
  if (r != nullptr && payload != Py_None) {
    RangeObject* self = reinterpret_cast<RangeObject*>(r);
    self->payload = PyLong_AsUnsignedLongLong(payload);
    if (PyErr_Occurred()) {
      Py_DECREF(r);
      return nullptr;
    }
    self->has_payload = 1;
  }
  return r;
}

// _set_hooks(link_key, decorate): rlscope_ray's Python halves of the above.
PyObject* SetHooks(PyObject* /*module*/, PyObject* args) {
  PyObject* link_key = nullptr;
  PyObject* decorate = nullptr;
  if (!PyArg_ParseTuple(args, "OO:_set_hooks", &link_key, &decorate)) return nullptr;
  Py_INCREF(link_key);
  Py_INCREF(decorate);
  Py_XSETREF(g_link_key, link_key);
  Py_XSETREF(g_decorate, decorate);
  Py_RETURN_NONE;
}

// _forget_names(): a forked child starts with no names (its collector, if
// any, is not the parent's).
PyObject* ForgetNames(PyObject* /*module*/, PyObject* /*unused*/) {
  PyDict_Clear(g_ids);
  Py_RETURN_NONE;
}

PyObject* SetUntooled(PyObject* /*module*/, PyObject* flag) {
  const int on = PyObject_IsTrue(flag);
  if (on < 0) return nullptr;
  g_untooled = on != 0;
  Py_RETURN_NONE;
}

PyMethodDef kFunctions[] = {
    {"mark", Mark, METH_O, "mark(name)\n--\n\nAn instant event on the calling thread (while recording)."},
    {"_set_hooks", SetHooks, METH_VARARGS, "Set the Python halves of range(link=...) and @range (rlscope_ray)."},
    {"_restore_range", RestoreRange, METH_VARARGS, "A range as pickled: _restore_range(name, payload or None)."},
    {"_forget_names", ForgetNames, METH_NOARGS, "Forget interned names (a forked child)."},
    {"_untooled", SetUntooled, METH_O,
     "_untooled(flag): ranges entered from now on act as with no collector (bench only: nvtx_fast.untooled)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

namespace rlscope_py {

bool AddFastApi(PyObject* module) {
  if (g_ids == nullptr && (g_ids = PyDict_New()) == nullptr) return false;
  if (PyType_Ready(&RangeType) != 0 || !AddSpecials()) return false;
  Py_INCREF(&RangeType);
  if (PyModule_AddObject(module, "range", reinterpret_cast<PyObject*>(&RangeType)) != 0) {
    Py_DECREF(&RangeType);
    return false;
  }
  if (PyModule_AddFunctions(module, kFunctions) != 0) return false;
  g_restore = PyObject_GetAttrString(module, "_restore_range");  // kept for the process's life
  return g_restore != nullptr;
}

}  // namespace rlscope_py

// kolo._native's fast path of kolo.torch's in-place allreduce: the whole of
// `allreduce_async_(tensor, name=...)` and of `synchronize(handle)` for the
// common case, in C against the CPython API, with a small C handle type.
//
// Why: a training step calls these once per gradient. In Python, the
// wrapper (its checks, the Handle object with __init__ and __del__, the
// keyword call) cost about 7,600 instructions per operation above the
// binding's own calls (docs/performance-history.md, "The Python layer"). Here the
// same work is done without running bytecode and without a Python-level
// object per operation.
//
// Contract:
// - The extension never includes torch's headers. kolo.torch hands over the
//   Python objects the fast path compares against (setup_torch_allreduce:
//   torch.Tensor, the dtype -> native code table, torch.strided, the global
//   process set) and the Python implementation, and the fast path reads the
//   tensor through its Python attributes (dtype, is_cpu, layout,
//   is_contiguous(), data_ptr(), shape), so one build serves any torch.
// - When a native reader is set (set_tensor_reader: the capsule of
//   kolo.torch._tensor_reader, built against the running torch's headers;
//   tensor_view.h), the fast path asks it first: it reads an instance of
//   exactly torch.Tensor or torch.nn.Parameter in C++; whatever it does not
//   take (another type, a non-contiguous tensor, ...) is then read through
//   the attributes as above. Either way the same tensors take the fast path,
//   with the same view.
// - torch_allreduce_async_ takes exactly kolo.torch.allreduce_async_'s
//   arguments. The fast path runs when: a torch.Tensor (or subclass) that is
//   on the CPU, strided, contiguous, of a dtype in the table; name a non-empty
//   str without NUL; average None; op None or an int that is a native reduce
//   code; prescale/postscale absent or floats; process_set absent, None or
//   the global set. Anything else (including a keyword it does not know, or an
//   attribute read that fails) calls the Python implementation with the same
//   arguments, so behaviour and error messages are the Python ones. A
//   failed submission raises what allreduce_submit raises.
// - It returns a TensorHandle: synchronize() waits (without the GIL),
//   releases the native handle and returns the tensor; again, the same tensor
//   (or the same error). poll() and the handle's .name, .poll(), .wait()
//   behave as kolo._ops.Handle's. A handle created before forget_handles()
//   (kolo.torch.shutdown) is refused with InvalidArgumentError.
// - A TensorHandle dropped while its operation is pending keeps the tensor
//   alive in an orphan list until the operation has finished; the list is
//   reaped at each fast-path submission, and emptied (nothing released:
//   the runtime is gone) by forget_handles(). The list, like everything
//   here, is touched only with the GIL held, and no Python code runs while
//   it is changed (references are dropped after).
// - synchronize(h) of any other object calls kolo._ops' Python synchronize
//   (setup_handles), so one function serves every handle.
//
// Not garbage-collected: a TensorHandle is not tracked by Python's cycle
// collector (that is part of its saving: no collections triggered by
// per-operation objects). A failed handle kept in a reference cycle through
// its own exception's traceback is therefore never freed (a leak on the
// error path only).
#include <kolo/kolo.h>
#include <kolo/runtime.h>

#include <climits>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "native_common.h"
#include "tensor_view.h"

namespace kolo_native {
namespace {

// ---- configuration (set once by kolo._ops and kolo.torch) -------------------

constexpr int kMaxDtypes = 16;
constexpr int kMaxDims = KOLO_TENSOR_VIEW_MAX_DIMS;

struct TorchConfig {
  bool ready = false;
  PyObject* fallback = nullptr;  // collectives.allreduce_async_ (Python)
  PyTypeObject* tensorType = nullptr;
  PyObject* dtypes[kMaxDtypes] = {};
  int codes[kMaxDtypes] = {};
  int ndtypes = 0;
  PyObject* strided = nullptr;
  PyObject* globalSet = nullptr;
  PyObject* pyOrphans = nullptr;    // kolo._ops._orphans (a list)
  PyObject* reapOrphans = nullptr;  // kolo._ops.reap_orphans
  unsigned long long emptyPtr = 0;  // address for empty tensors
};
TorchConfig gTorch;

// The native tensor reader (set_tensor_reader), or none.
struct Reader {
  PyObject* capsule = nullptr;  // owned; keeps the reader's module loaded
  kolo_tensor_read_fn read = nullptr;
};
Reader gReader;

// A tensor attribute read. For an instance of exactly torch.Tensor the
// getter of torch's getset descriptor is called directly (what
// PyObject_GetAttr ends in, without its generic look-up: a getset is a data
// descriptor, so neither the instance dict nor a subclass can come first);
// any other type, or an attribute that is not a getset, takes
// PyObject_GetAttr.
struct Attribute {
  PyObject* name = nullptr;  // interned
  getter get = nullptr;
  void* closure = nullptr;
};
Attribute gDtype, gIsCpu, gLayout, gShape;

PyObject* readAttr(PyObject* t, const Attribute& a) {
  if (a.get != nullptr && Py_TYPE(t) == gTorch.tensorType) return a.get(t, a.closure);
  return PyObject_GetAttr(t, a.name);
}

// Finds torch's getter of a.name on tensorType (none when it is not a
// getset, or missing: then the fast path's read fails and the call goes to
// the Python implementation).
void findGetter(PyTypeObject* tensorType, Attribute* a) {
  a->get = nullptr;
  PyObject* d = PyObject_GetAttr(reinterpret_cast<PyObject*>(tensorType), a->name);
  if (d == nullptr) {
    PyErr_Clear();
    return;
  }
  if (Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
    PyGetSetDef* def = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset;
    a->get = def->get;
    a->closure = def->closure;
  }
  Py_DECREF(d);  // the type keeps it
}

PyObject* gSynchronizeFallback = nullptr;  // kolo._ops' Python synchronize

// Interned attribute and keyword names.
struct Names {
  PyObject *isContiguous, *dataPtr;
  PyObject* keywords[7];  // allreduce_async_'s parameters, in order
};
Names gNames;

const char* const kParams[7] = {"tensor",          "average",          "name",       "op",
                                "prescale_factor", "postscale_factor", "process_set"};

bool internNames() {
  auto in = [](const char* s) { return PyUnicode_InternFromString(s); };
  gDtype.name = in("dtype");
  gIsCpu.name = in("is_cpu");
  gLayout.name = in("layout");
  gNames.isContiguous = in("is_contiguous");
  gNames.dataPtr = in("data_ptr");
  gShape.name = in("shape");
  bool ok = gDtype.name && gIsCpu.name && gLayout.name && gNames.isContiguous &&
            gNames.dataPtr && gShape.name;
  for (int i = 0; i < 7; ++i) ok = (gNames.keywords[i] = in(kParams[i])) && ok;
  return ok;
}

// ---- handles and orphans ----------------------------------------------------

uint64_t gGeneration = 0;  // bumped by forget_handles()

struct Orphan {
  kolo_handle id;
  PyObject* keep;  // owned
};
std::vector<Orphan> gOrphans;

// state: 0 pending, 1 finished (result: the tensor), 2 failed (result: the
// exception).
struct TensorHandle {
  PyObject ob_base;  // PyObject_HEAD
  kolo_handle id;
  PyObject* name;    // str
  PyObject* keep;    // the tensor while pending
  PyObject* result;  // set when state != 0
  int state;
  uint64_t generation;
};

extern PyTypeObject gHandleType;

// Releases the orphans whose operation has finished. The references are
// dropped after the list is changed (a drop may run Python code).
void reapOrphans() noexcept {
  if (gOrphans.empty()) return;
  PyObject* finished[64];
  int n = 0;
  for (size_t i = 0; i < gOrphans.size() && n < 64;) {
    int done = 0;
    const int rc = kolo_poll(gOrphans[i].id, &done);
    if (rc == KOLO_OK && !done) {
      ++i;
      continue;
    }
    if (rc == KOLO_OK) kolo_release(gOrphans[i].id);
    finished[n++] = gOrphans[i].keep;  // failed poll: kolo shut down, nothing pending
    gOrphans[i] = gOrphans.back();
    gOrphans.pop_back();
  }
  for (int i = 0; i < n; ++i) Py_DECREF(finished[i]);
}

void raiseStale(TensorHandle* h) {
  PyErr_Format(invalidArgumentClass(),
               "handle of '%U' was created before kolo was shut down; its "
               "operation no longer exists",
               h->name);
}

// synchronize() of a TensorHandle: waits, releases, returns the tensor.
PyObject* waitHandle(TensorHandle* h) {
  if (h->state == 1) {
    Py_INCREF(h->result);
    return h->result;
  }
  if (h->state == 2) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(h->result)), h->result);
    return nullptr;
  }
  if (h->generation != gGeneration) {
    raiseStale(h);
    return nullptr;
  }
  int rc = KOLO_OK;
  std::string message;
  {
    WithoutGil unlocked;
    rc = kolo_wait_release(h->id);
    if (rc != KOLO_OK) {
      try {
        message = kolo_last_error();
      } catch (const std::bad_alloc&) {
        message = "out of memory reading the error";
      }
    }
  }
  PyObject* keep = h->keep;
  h->keep = nullptr;
  if (rc == KOLO_OK) {
    h->result = keep;  // the reference moves
    h->state = 1;
    Py_INCREF(keep);
    return keep;
  }
  setError(rc, message);
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != nullptr) {
    Py_INCREF(value);
    h->result = value;
    h->state = 2;
  }
  PyErr_Restore(type, value, tb);
  Py_DECREF(keep);
  return nullptr;
}

PyObject* pollHandle(TensorHandle* h) {
  if (h->state) Py_RETURN_TRUE;
  if (h->generation != gGeneration) {
    raiseStale(h);
    return nullptr;
  }
  int done = 0;
  const int rc = kolo_poll(h->id, &done);
  if (rc != KOLO_OK) {
    setError(rc, kolo_last_error());
    return nullptr;
  }
  return PyBool_FromLong(done);
}

// A handle dropped while pending: released if its operation has finished,
// else its tensor goes to the orphan list (the runtime may still use it).
void deallocHandle(PyObject* self) {
  auto* h = reinterpret_cast<TensorHandle*>(self);
  if (h->state == 0 && h->generation == gGeneration) {
    int done = 0;
    if (kolo_poll(h->id, &done) == KOLO_OK) {  // else kolo shut down
      if (done) {
        kolo_release(h->id);
      } else {
        try {
          gOrphans.push_back({h->id, h->keep});
          h->keep = nullptr;
        } catch (const std::bad_alloc&) {  // keep the tensor forever
          h->keep = nullptr;
        }
      }
    }
  }
  Py_XDECREF(h->name);
  Py_XDECREF(h->keep);
  Py_XDECREF(h->result);
  Py_TYPE(self)->tp_free(self);
}

PyObject* handleRepr(PyObject* self) {
  auto* h = reinterpret_cast<TensorHandle*>(self);
  return PyUnicode_FromFormat("<kolo handle '%U'%s>", h->name, h->state ? " done" : "");
}

PyObject* handlePollMethod(PyObject* self, PyObject*) {
  return pollHandle(reinterpret_cast<TensorHandle*>(self));
}

PyObject* handleWaitMethod(PyObject* self, PyObject*) {
  return waitHandle(reinterpret_cast<TensorHandle*>(self));
}

PyObject* handleName(PyObject* self, void*) {
  PyObject* name = reinterpret_cast<TensorHandle*>(self)->name;
  Py_INCREF(name);
  return name;
}

PyMethodDef gHandleMethods[] = {
    {"poll", handlePollMethod, METH_NOARGS,
     "True once the operation has finished (well or not)."},
    {"wait", handleWaitMethod, METH_NOARGS,
     "Waits and returns the tensor (raises the operation's error); as "
     "synchronize(handle)."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef gHandleGetSet[] = {
    {"name", handleName, nullptr, "The operation's name.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject gHandleType = [] {
  PyTypeObject t{};  // PyVarObject_HEAD_INIT(nullptr, 0), without the warning
  Py_SET_REFCNT(&t, 1);
  t.tp_name = "kolo._native.TensorHandle";
  t.tp_basicsize = sizeof(TensorHandle);
  t.tp_dealloc = deallocHandle;
  t.tp_repr = handleRepr;
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_doc =
      "The handle of kolo.torch's in-place allreduce (its fast path); pass it "
      "to synchronize() or poll().";
  t.tp_methods = gHandleMethods;
  t.tp_getset = gHandleGetSet;
  return t;
}();

// ---- the in-place allreduce -------------------------------------------------

// allreduce_async_'s arguments by position (nullptr: not given).
struct Args {
  PyObject* slot[7] = {};
};

// Places positional and keyword arguments; false when the Python
// implementation must see them (unknown keyword, a slot given twice, too
// many): it raises Python's own TypeError then.
bool placeArgs(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, Args* out) {
  if (nargs < 1 || nargs > 7) return false;
  for (Py_ssize_t i = 0; i < nargs; ++i) out->slot[i] = args[i];
  if (kwnames == nullptr) return true;
  const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int i = 1;  // "tensor" by keyword takes the Python path
    while (i < 7 && gNames.keywords[i] != key) ++i;
    if (i == 7 || out->slot[i] != nullptr) return false;  // not interned: Python path too
    out->slot[i] = args[nargs + k];
  }
  return true;
}

bool isNone(PyObject* o) {
  return o == nullptr || o == Py_None;
}

bool readScale(PyObject* o, double* out) {
  if (o == nullptr) return true;  // 1.0
  if (!PyFloat_CheckExact(o)) return false;
  *out = PyFloat_AS_DOUBLE(o);
  return true;
}

// The native reduce code of op (None: Average), or -1 for the Python path.
int readOp(PyObject* o) {
  if (isNone(o)) return KOLO_AVG;
  if (!PyLong_CheckExact(o)) return -1;
  const long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return -1;
  }
  switch (v) {
    case KOLO_SUM:
    case KOLO_AVG:
    case KOLO_MIN:
    case KOLO_MAX:
    case KOLO_PROD: return static_cast<int>(v);
    default: return -1;
  }
}

// What the runtime needs of the tensor (tensor_view.h).
using TensorView = kolo_tensor_view;

// true when attribute `name` of t is `expected` (a read that fails: false).
bool attrIs(PyObject* t, const Attribute& a, PyObject* expected) {
  PyObject* v = readAttr(t, a);
  if (v == nullptr) {
    PyErr_Clear();
    return false;
  }
  Py_DECREF(v);  // the objects compared are kept alive elsewhere
  return v == expected;
}

bool readShape(PyObject* t, TensorView* out) {
  PyObject* shape = readAttr(t, gShape);
  if (shape == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool ok = PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) <= kMaxDims;
  const Py_ssize_t n = ok ? PyTuple_GET_SIZE(shape) : 0;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    PyObject* d = PyTuple_GET_ITEM(shape, i);
    int overflow = 0;
    ok = PyLong_CheckExact(d) &&
         ((out->dims[i] = PyLong_AsLongLongAndOverflow(d, &overflow)), overflow == 0);
  }
  Py_DECREF(shape);
  out->ndim = static_cast<int>(n);
  return ok;
}

// Reads a tensor the fast path takes; false (no error set) for anything else.
bool readTensor(PyObject* t, TensorView* out) {
  if (gReader.read != nullptr && gReader.read(t, out)) {
    if (out->ptr == 0) out->ptr = gTorch.emptyPtr;  // an empty tensor
    return true;
  }
  if (!PyObject_TypeCheck(t, gTorch.tensorType)) return false;
  PyObject* dtype = readAttr(t, gDtype);
  if (dtype == nullptr) {
    PyErr_Clear();
    return false;
  }
  Py_DECREF(dtype);  // torch's dtypes are singletons, kept by the table
  int i = 0;
  while (i < gTorch.ndtypes && gTorch.dtypes[i] != dtype) ++i;
  if (i == gTorch.ndtypes) return false;
  out->dtype = gTorch.codes[i];
  if (!attrIs(t, gIsCpu, Py_True) || !attrIs(t, gLayout, gTorch.strided)) {
    return false;
  }
  PyObject* contiguous = PyObject_CallMethodNoArgs(t, gNames.isContiguous);
  if (contiguous != Py_True) {
    if (contiguous == nullptr) PyErr_Clear();
    Py_XDECREF(contiguous);
    return false;
  }
  Py_DECREF(contiguous);
  PyObject* ptr = PyObject_CallMethodNoArgs(t, gNames.dataPtr);
  if (ptr == nullptr || !PyLong_Check(ptr)) {
    if (ptr == nullptr) PyErr_Clear();
    Py_XDECREF(ptr);
    return false;
  }
  out->ptr = PyLong_AsUnsignedLongLong(ptr);
  Py_DECREF(ptr);
  if (out->ptr == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  if (out->ptr == 0) out->ptr = gTorch.emptyPtr;  // an empty tensor
  return readShape(t, out);
}

// The fast path; nullptr with no error set means "take the Python path".
PyObject* submitFast(const Args& a) {
  PyObject* tensor = a.slot[0];
  PyObject* name = a.slot[2];
  double prescale = 1.0, postscale = 1.0;
  const int op = readOp(a.slot[3]);
  if (!isNone(a.slot[1]) || op < 0 || name == nullptr || !PyUnicode_CheckExact(name) ||
      !readScale(a.slot[4], &prescale) || !readScale(a.slot[5], &postscale) ||
      (!isNone(a.slot[6]) && a.slot[6] != gTorch.globalSet)) {
    return nullptr;
  }
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(name, &size);
  if (text == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (size == 0 || std::char_traits<char>::length(text) != static_cast<size_t>(size)) {
    return nullptr;  // empty, or a NUL inside: the Python path's errors
  }
  TensorView t{};
  if (!readTensor(tensor, &t)) return nullptr;
  void* p = reinterpret_cast<void*>(static_cast<uintptr_t>(t.ptr));
  kolo_handle id = 0;
  const int rc = kolo_allreduce_async(
      text, p, p, t.ndim, t.ndim ? t.dims : nullptr, static_cast<kolo_dtype>(t.dtype),
      static_cast<kolo_op>(op), prescale, postscale, 0, &id);
  if (rc != KOLO_OK) {
    setError(rc, kolo_last_error());
    return nullptr;
  }
  auto* h = PyObject_New(TensorHandle, &gHandleType);
  if (h == nullptr) return nullptr;  // MemoryError; the operation is never released
  Py_INCREF(name);
  Py_INCREF(tensor);
  h->id = id;
  h->name = name;
  h->keep = tensor;
  h->result = nullptr;
  h->state = 0;
  h->generation = gGeneration;
  if (PyList_GET_SIZE(gTorch.pyOrphans) > 0) {
    PyObject* r = PyObject_CallNoArgs(gTorch.reapOrphans);
    if (r == nullptr) {
      Py_DECREF(h);
      return nullptr;
    }
    Py_DECREF(r);
  }
  reapOrphans();
  return reinterpret_cast<PyObject*>(h);
}

PyObject* torchAllreduceInPlace(PyObject*, PyObject* const* args, size_t nargsf,
                                PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Args a;
  if (gTorch.ready && placeArgs(args, nargs, kwnames, &a)) {
    PyObject* h = submitFast(a);
    if (h != nullptr || PyErr_Occurred()) return h;
  }
  if (gTorch.fallback == nullptr) {
    PyErr_SetString(PyExc_RuntimeError,
                    "torch_allreduce_async_: setup_torch_allreduce was not called");
    return nullptr;
  }
  return PyObject_Vectorcall(gTorch.fallback, args, nargsf, kwnames);
}

// ---- module functions -------------------------------------------------------

PyObject* synchronize(PyObject*, PyObject* handle) {
  if (Py_TYPE(handle) == &gHandleType) {
    return waitHandle(reinterpret_cast<TensorHandle*>(handle));
  }
  if (gSynchronizeFallback == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "synchronize: setup_handles was not called");
    return nullptr;
  }
  return PyObject_CallOneArg(gSynchronizeFallback, handle);
}

void replace(PyObject** slot, PyObject* value) {
  Py_XINCREF(value);
  Py_XSETREF(*slot, value);
}

PyObject* setupHandles(PyObject*, PyObject* fallback) {
  if (!PyCallable_Check(fallback)) {
    PyErr_SetString(PyExc_TypeError, "setup_handles: expected a callable");
    return nullptr;
  }
  replace(&gSynchronizeFallback, fallback);
  Py_RETURN_NONE;
}

PyObject* forgetHandles(PyObject*, PyObject*) {
  ++gGeneration;
  std::vector<Orphan> dropped;
  dropped.swap(gOrphans);
  for (const Orphan& o : dropped) Py_DECREF(o.keep);
  Py_RETURN_NONE;
}

// setup_torch_allreduce(fallback, tensor_type, dtypes, strided, global_set,
//                       orphans, reap_orphans, empty_ptr)
PyObject* setupTorch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8 || !PyCallable_Check(args[0]) || !PyType_Check(args[1]) ||
      !PyDict_Check(args[2]) || !PyList_Check(args[5]) || !PyCallable_Check(args[6]) ||
      !PyLong_Check(args[7]) || PyDict_GET_SIZE(args[2]) > kMaxDtypes) {
    PyErr_SetString(PyExc_TypeError,
                    "setup_torch_allreduce(fallback, tensor_type, dtypes (dict of at "
                    "most 16), strided, global_set, orphans (list), reap_orphans, "
                    "empty_ptr)");
    return nullptr;
  }
  const unsigned long long empty = PyLong_AsUnsignedLongLong(args[7]);
  if (empty == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
  auto* tensorType = reinterpret_cast<PyTypeObject*>(args[1]);
  for (Attribute* a : {&gDtype, &gIsCpu, &gLayout, &gShape}) findGetter(tensorType, a);
  TorchConfig c;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(args[2], &pos, &key, &value)) {
    const long code = PyLong_AsLong(value);
    if (code == -1 && PyErr_Occurred()) return nullptr;
    c.dtypes[c.ndtypes] = key;
    c.codes[c.ndtypes++] = static_cast<int>(code);
  }
  for (int i = 0; i < c.ndtypes; ++i) Py_INCREF(c.dtypes[i]);  // kept for good
  for (int i : {0, 1, 3, 4, 5, 6}) Py_INCREF(args[i]);
  c.fallback = args[0];
  c.tensorType = tensorType;
  c.strided = args[3];
  c.globalSet = args[4];
  c.pyOrphans = args[5];
  c.reapOrphans = args[6];
  c.emptyPtr = empty;
  c.ready = true;
  gTorch = c;  // an earlier configuration's references stay (set up once per process)
  Py_RETURN_NONE;
}

// set_tensor_reader(capsule or None)
PyObject* setTensorReader(PyObject*, PyObject* reader) {
  kolo_tensor_read_fn read = nullptr;
  if (reader != Py_None) {
    if (!PyCapsule_IsValid(reader, KOLO_TENSOR_READER_CAPSULE)) {
      PyErr_Format(PyExc_TypeError,
                   "set_tensor_reader: expected None or a capsule named '%s', got %R",
                   KOLO_TENSOR_READER_CAPSULE, reader);
      return nullptr;
    }
    read = reinterpret_cast<kolo_tensor_read_fn>(
        PyCapsule_GetPointer(reader, KOLO_TENSOR_READER_CAPSULE));
  }
  PyObject* old = gReader.capsule;
  gReader.capsule = nullptr;
  if (read != nullptr) {
    Py_INCREF(reader);
    gReader.capsule = reader;
  }
  gReader.read = read;
  Py_XDECREF(old);  // after the change: a drop may run Python code
  Py_RETURN_NONE;
}

PyObject* tensorReaderSet(PyObject*, PyObject*) {
  return PyBool_FromLong(gReader.read != nullptr);
}

const char kAllreduceDoc[] =
    "torch_allreduce_async_(tensor, average=None, name=None, op=None, "
    "prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)\n--\n\n"
    "kolo.torch.allreduce_async_: starts an in-place allreduce of tensor; "
    "synchronize() returns the same tensor holding the result. The common case "
    "runs here; every other goes to kolo.torch's Python implementation.";

PyMethodDef gFunctions[] = {
    {"torch_allreduce_async_",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(torchAllreduceInPlace)),
     METH_FASTCALL | METH_KEYWORDS, kAllreduceDoc},
    {"synchronize", synchronize, METH_O,
     "synchronize(handle): waits for handle and returns its result (raises its "
     "error); any handle of kolo.torch or kolo.numpy."},
    {"setup_handles", setupHandles, METH_O,
     "setup_handles(synchronize): the Python synchronize for handles that are "
     "not TensorHandles (kolo._ops calls it at import)."},
    {"forget_handles", forgetHandles, METH_NOARGS,
     "At shutdown: TensorHandles from before are refused from now on; orphans "
     "are dropped (their operations are gone with the runtime)."},
    {"setup_torch_allreduce",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(setupTorch)),
     METH_FASTCALL,
     "setup_torch_allreduce(fallback, tensor_type, dtypes, strided, global_set, "
     "orphans, reap_orphans, empty_ptr): kolo.torch's objects for "
     "torch_allreduce_async_ (called at kolo.torch's import)."},
    {"set_tensor_reader", setTensorReader, METH_O,
     "set_tensor_reader(capsule or None): the native tensor reader of "
     "kolo.torch._tensor_reader (its `reader`) for torch_allreduce_async_, or "
     "None for torch's Python attributes (kolo.torch decides at import)."},
    {"tensor_reader_set", tensorReaderSet, METH_NOARGS,
     "True when torch_allreduce_async_ reads tensors with a native reader."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool addTensorHandles(PyObject* module) noexcept {
  if (!internNames() || PyType_Ready(&gHandleType) != 0) return false;
  Py_INCREF(&gHandleType);
  if (PyModule_AddObject(module, "TensorHandle",
                         reinterpret_cast<PyObject*>(&gHandleType)) != 0) {
    Py_DECREF(&gHandleType);
    return false;
  }
  return PyModule_AddFunctions(module, gFunctions) == 0;
}

}  // namespace kolo_native

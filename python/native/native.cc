// kolo._native: the Python binding of kolo's C API (include/kolo/kolo.h and
// include/kolo/runtime.h), plus kolo's data readers (data_bindings.cc). It
// never includes a framework's headers: tensors cross as raw data addresses
// (Python ints) or objects with the buffer protocol, plus a shape and a
// dtype code, so one build serves every framework version (docs/python.md).
//
// Errors: every non-zero C return code becomes an exception whose class
// follows the code (KoloError and its subclasses, created here) and whose
// message is kolo_last_error(); `.code` holds the code. Nothing aborts the
// interpreter.
//
// The GIL is released around every call that can block on other ranks
// (wait, the synchronous collectives, init, shutdown, process set
// creation and destruction, wait_release).
//
// Two functions of the hot path, allreduce_submit and wait_release, are
// plain CPython functions rather than pybind11 ones (their section below
// says why and how), and so is kolo.torch's in-place allreduce with its
// handle type (tensor_handles.cc); everything else is pybind11.
#include <kolo/cuda.h>
#include <kolo/kolo.h>
#include <kolo/ps.h>
#include <kolo/runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "native_common.h"

namespace py = pybind11;
using kolo_native::setError;
using kolo_native::WithoutGil;

// data_bindings.cc: ImageFolder, BatchPrefetcher, DistributedSampler, JPEG.
void bindData(py::module_& m);

namespace {

// The exception classes, by error code (filled at import).
struct Errors {
  PyObject* base = nullptr;
  PyObject* mismatch = nullptr;
  PyObject* peerLost = nullptr;
  PyObject* timeout = nullptr;
  PyObject* notInitialized = nullptr;
  PyObject* invalidArgument = nullptr;
};
Errors gErrors;

PyObject* classFor(int code) {
  switch (code) {
    case KOLO_ERR_MISMATCH: return gErrors.mismatch;
    case KOLO_ERR_PEER_LOST: return gErrors.peerLost;
    case KOLO_ERR_TIMEOUT: return gErrors.timeout;
    case KOLO_ERR_NOT_INITIALIZED: return gErrors.notInitialized;
    case KOLO_ERR_INVALID_ARGUMENT: return gErrors.invalidArgument;
    default: return gErrors.base;
  }
}

}  // namespace

namespace kolo_native {

void setError(int code, std::string_view message) noexcept {
  PyObject* cls = classFor(code);
  PyObject* text = PyUnicode_DecodeUTF8(
      message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
  PyObject* exc = text ? PyObject_CallOneArg(cls, text) : nullptr;
  Py_XDECREF(text);
  if (exc == nullptr) return;
  PyObject* value = PyLong_FromLong(code);
  PyObject* name = PyUnicode_FromString(kolo_error_name(code));
  if (value && name && PyObject_SetAttrString(exc, "code", value) == 0 &&
      PyObject_SetAttrString(exc, "code_name", name) == 0) {
    PyErr_SetObject(cls, exc);
  }
  Py_XDECREF(value);
  Py_XDECREF(name);
  Py_DECREF(exc);
}

PyObject* invalidArgumentClass() noexcept {
  return gErrors.invalidArgument;
}

}  // namespace kolo_native

namespace {

[[noreturn]] void raise(int code, const std::string& message) {
  setError(code, message);
  throw py::error_already_set();
}

// Raises for a non-zero code, with the calling thread's kolo_last_error().
void check(int rc) {
  if (rc != KOLO_OK) raise(rc, kolo_last_error());
}

// A data address: a Python int, or an object with the buffer protocol (the
// caller keeps it alive until the operation ends). None is a null pointer.
void* addressOf(const py::handle& obj, bool writable) {
  if (obj.is_none()) return nullptr;
  if (py::isinstance<py::int_>(obj)) {
    return reinterpret_cast<void*>(obj.cast<uintptr_t>());
  }
  if (PyObject_CheckBuffer(obj.ptr())) {
    Py_buffer view;
    const int flags =
        writable ? (PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) : PyBUF_ANY_CONTIGUOUS;
    if (PyObject_GetBuffer(obj.ptr(), &view, flags) != 0) throw py::error_already_set();
    void* p = view.buf;
    PyBuffer_Release(&view);
    return p;
  }
  raise(KOLO_ERR_INVALID_ARGUMENT,
        "expected a data address (int) or a contiguous buffer, got " +
            std::string(py::str(py::type::of(obj))));
}

// Any int as a C enum: the C API checks the value (an int outside the
// enumerators must not go through static_cast).
template <typename E>
E asEnum(int v) {
  static_assert(sizeof(E) == sizeof(int));
  E e;
  std::memcpy(&e, &v, sizeof(e));
  return e;
}

int dims(const std::vector<int64_t>& shape) {
  return static_cast<int>(shape.size());
}

const int64_t* dimsData(const std::vector<int64_t>& shape) {
  return shape.empty() ? nullptr : shape.data();
}

// The layout queries return -1 only before kolo_init (kolo_last_error() is
// not theirs to set).
int layoutValue(int v, const char* name) {
  if (v < 0)
    raise(KOLO_ERR_NOT_INITIALIZED, std::string(name) + " called before kolo_init");
  return v;
}

PyObject* newError(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string full = std::string("kolo._native.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module keeps a reference
  return cls;
}

// ---- the hot path: raw CPython functions ------------------------------------
//
// allreduce_submit and wait_release are what a training step calls once per
// tensor (kolo.torch's allreduce_async_ and synchronize). They do the work
// of allreduce_async and of wait + release with less around it: plain
// CPython calling conventions (METH_FASTCALL, METH_O) instead of pybind11's
// dispatcher, the name read in place from the str (no std::string), the
// shape read from the tuple or list (no std::vector for up to kSmallDims
// dimensions), addresses from ints without a generic caster, and one call
// for wait and release. docs/python.md has the measurements.
//
// Contracts (their docstrings say the same):
// - allreduce_submit(name, send_ptr, recv_ptr, shape, dtype, op[, prescale,
//   postscale, process_set]): allreduce_async's, positional arguments only
//   (a keyword or a count outside 6..9 is TypeError). Never blocks; keeps
//   the GIL. name: a str without NUL; shape: a tuple, list or other
//   sequence of ints (__index__); addresses: ints, None, or objects with the
//   buffer protocol, kept valid by the caller until the operation ends.
//   Returns the handle, an int > 0.
// - wait_release(handle): kolo_wait_release: blocks until the operation is
//   done (without the GIL), releases the handle whatever happened, then
//   raises the operation's error. The handle is unknown afterwards. One
//   thread per handle.
// Both raise the module's exception classes (.code, .code_name, the
// message of kolo_last_error); a bad argument is InvalidArgumentError naming
// the function, the tensor and the argument. Nothing throws across the C
// boundary: a C++ exception becomes the Python error inside the function.

std::string typeName(PyObject* obj) {
  return Py_TYPE(obj)->tp_name;
}

// "fn 'name': what" as an InvalidArgumentError; returns false for the
// argument readers below.
bool invalidArgument(const char* fn, std::string_view name, const std::string& what) {
  std::string message = fn;
  message += " '";
  message += name;
  message += "': ";
  message += what;
  setError(KOLO_ERR_INVALID_ARGUMENT, message);
  return false;
}

// A tensor name: a str without NUL characters, read in place (valid while
// the str lives: the C API copies it before returning).
bool readName(const char* fn, PyObject* obj, std::string_view* out) {
  if (!PyUnicode_Check(obj)) {
    return invalidArgument(fn, "?", "name must be a str, got " + typeName(obj));
  }
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(obj, &size);
  if (text == nullptr) return false;  // not encodable (lone surrogates): its error
  *out = std::string_view(text, static_cast<size_t>(size));
  if (const size_t nul = out->find('\0'); nul != std::string_view::npos) {
    return invalidArgument(fn, std::string(out->substr(0, nul)) + "\\0...",
                           "name contains a NUL character");
  }
  return true;
}

// An int argument of the C API (dtype, op, process set).
bool readInt(const char* fn, std::string_view name, const char* arg, PyObject* obj,
             int* out) {
  int overflow = 0;
  const long v = PyLong_Check(obj) ? PyLong_AsLongAndOverflow(obj, &overflow) : -1;
  if (!PyLong_Check(obj) || overflow != 0 || v < INT_MIN || v > INT_MAX ||
      (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return invalidArgument(
        fn, name,
        std::string(arg) + " must be an int in C int range, got " +
            (PyLong_Check(obj) ? "an int out of range" : typeName(obj)));
  }
  *out = static_cast<int>(v);
  return true;
}

bool readDouble(const char* fn, std::string_view name, const char* arg, PyObject* obj,
                double* out) {
  if (PyFloat_CheckExact(obj)) {
    *out = PyFloat_AS_DOUBLE(obj);
    return true;
  }
  *out = PyFloat_AsDouble(obj);  // ints, and objects with __float__ / __index__
  if (*out == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return invalidArgument(fn, name,
                           std::string(arg) + " must be a float, got " + typeName(obj));
  }
  return true;
}

// A data address: an int (the common case, no caster), else what addressOf
// takes (None, an object with the buffer protocol).
bool readAddress(const char* fn, std::string_view name, const char* arg, PyObject* obj,
                 bool writable, void** out) {
  if (PyLong_Check(obj)) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      return invalidArgument(
          fn, name, std::string(arg) + ": not an address (negative or too large)");
    }
    static_assert(sizeof(unsigned long long) >= sizeof(uintptr_t));
    *out = reinterpret_cast<void*>(static_cast<uintptr_t>(v));
    return true;
  }
  if (obj != Py_None && !PyObject_CheckBuffer(obj)) {
    return invalidArgument(fn, name,
                           std::string(arg) +
                               ": expected a data address (int) or a contiguous buffer, "
                               "got " +
                               typeName(obj));
  }
  try {
    *out = addressOf(py::handle(obj), writable);
    return true;
  } catch (py::error_already_set& e) {
    e.restore();
    return false;
  }
}

// A shape: a tuple (torch.Size is one), a list, or another sequence of ints.
// Up to kSmallDims dimensions live in the object itself.
class ShapeArg {
 public:
  static constexpr Py_ssize_t kSmallDims = 8;

  bool read(const char* fn, std::string_view name, PyObject* obj) {
    PyObject* seq = obj;
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
      seq = PySequence_Fast(obj, "");
      if (seq == nullptr) {
        PyErr_Clear();
        return invalidArgument(fn, name,
                               "shape must be a sequence of ints, got " + typeName(obj));
      }
    }
    const bool ok = readItems(fn, name, seq);
    if (seq != obj) Py_DECREF(seq);
    return ok;
  }

  int ndim() const { return ndim_; }
  const int64_t* data() const { return ndim_ == 0 ? nullptr : dims_; }

 private:
  bool readItems(const char* fn, std::string_view name, PyObject* seq) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > INT_MAX) return invalidArgument(fn, name, "shape has too many dimensions");
    if (n > kSmallDims) {
      big_.resize(static_cast<size_t>(n));
      dims_ = big_.data();
    }
    PyObject** items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; ++i) {
      int overflow = 0;
      const long long v = PyLong_Check(items[i])
                              ? PyLong_AsLongLongAndOverflow(items[i], &overflow)
                              : PyLong_AsLongLong(items[i]);  // __index__ (numpy ints)
      if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return invalidArgument(
            fn, name,
            "shape[" + std::to_string(i) + "] must be an int, got " +
                (overflow ? "an int out of range" : typeName(items[i])));
      }
      dims_[i] = v;
    }
    ndim_ = static_cast<int>(n);
    return true;
  }

  int64_t small_[kSmallDims];
  std::vector<int64_t> big_;
  int64_t* dims_ = small_;
  int ndim_ = 0;
};

// Runs the body of a raw CPython function: a C++ exception becomes the
// Python error (pybind11's error_already_set restores its own).
template <typename Fn>
PyObject* pythonCall(Fn&& body) noexcept {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    setError(KOLO_ERR_INTERNAL, e.what());
  }
  return nullptr;
}

const char kAllreduceSubmitDoc[] =
    "allreduce_submit($module, name, send_ptr, recv_ptr, shape, dtype, op, "
    "prescale=1.0, postscale=1.0, process_set=0, /)\n--\n\n"
    "allreduce_async for the hot path (returns a handle), positional arguments "
    "only: name a str; "
    "send_ptr and recv_ptr ints (or what allreduce_async takes); shape a tuple "
    "(torch.Size), list or other sequence of ints. Same result and errors as "
    "allreduce_async; a bad argument is InvalidArgumentError naming the tensor.";

PyObject* allreduceSubmit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  constexpr const char* fn = "allreduce_submit";
  if (nargs < 6 || nargs > 9) {
    PyErr_Format(
        PyExc_TypeError,
        "allreduce_submit() takes 6 to 9 positional arguments (name, send_ptr, "
        "recv_ptr, shape, dtype, op[, prescale, postscale, process_set]), %zd given",
        nargs);
    return nullptr;
  }
  return pythonCall([&]() -> PyObject* {
    std::string_view name;
    void* send = nullptr;
    void* recv = nullptr;
    ShapeArg shape;
    int dtype = 0, op = 0, processSet = 0;
    double prescale = 1.0, postscale = 1.0;
    if (!readName(fn, args[0], &name) ||
        !readAddress(fn, name, "send_ptr", args[1], false, &send) ||
        !readAddress(fn, name, "recv_ptr", args[2], true, &recv) ||
        !shape.read(fn, name, args[3]) || !readInt(fn, name, "dtype", args[4], &dtype) ||
        !readInt(fn, name, "op", args[5], &op) ||
        (nargs > 6 && !readDouble(fn, name, "prescale", args[6], &prescale)) ||
        (nargs > 7 && !readDouble(fn, name, "postscale", args[7], &postscale)) ||
        (nargs > 8 && !readInt(fn, name, "process_set", args[8], &processSet))) {
      return nullptr;
    }
    kolo_handle h = 0;
    // name.data() ends in NUL: PyUnicode_AsUTF8AndSize's buffer does.
    const int rc = kolo_allreduce_async(
        name.data(), send, recv, shape.ndim(), shape.data(), asEnum<kolo_dtype>(dtype),
        asEnum<kolo_op>(op), prescale, postscale, processSet, &h);
    if (rc != KOLO_OK) {
      setError(rc, kolo_last_error());
      return nullptr;
    }
    return PyLong_FromLongLong(h);
  });
}

const char kWaitReleaseDoc[] =
    "wait_release($module, handle, /)\n--\n\n"
    "wait(handle) then release(handle) in one call (kolo_wait_release): blocks "
    "(without the GIL) until done, releases the handle whether or not the "
    "operation failed, then raises the operation's error, if any. The handle is "
    "unknown afterwards.";

PyObject* waitRelease(PyObject*, PyObject* arg) {
  int overflow = 0;
  const long long h =
      PyLong_Check(arg) ? PyLong_AsLongLongAndOverflow(arg, &overflow) : -1;
  if (!PyLong_Check(arg) || overflow != 0 || (h == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    setError(
        KOLO_ERR_INVALID_ARGUMENT,
        "wait_release: expected a handle (int), got " +
            (PyLong_Check(arg) ? std::string("an int out of range") : typeName(arg)));
    return nullptr;
  }
  return pythonCall([&]() -> PyObject* {
    int rc = KOLO_OK;
    std::string message;
    {
      // One C call (one look-up of the handle); the GIL is dropped for it
      // whether or not the operation has finished (a poll first would cost
      // a second look-up, more than the GIL's round trip).
      WithoutGil unlocked;
      rc = kolo_wait_release(h);
      if (rc != KOLO_OK) message = kolo_last_error();
    }
    if (rc != KOLO_OK) {
      setError(rc, message);
      return nullptr;
    }
    Py_RETURN_NONE;
  });
}

PyMethodDef gHotPath[] = {
    {"allreduce_submit",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(allreduceSubmit)),
     METH_FASTCALL, kAllreduceSubmitDoc},
    {"wait_release", waitRelease, METH_O, kWaitReleaseDoc},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() =
      "kolo's C API for Python (docs/python.md). Tensors cross as data "
      "addresses plus shape and dtype; kolo.numpy and kolo.torch build on it.";

  // ---- exceptions ----
  gErrors.base = newError(m, "KoloError", PyExc_RuntimeError,
                          "A kolo call failed; .code is the kolo_error code, the "
                          "message is kolo_last_error().");
  auto sub = [&](const char* name, PyObject* also, const char* doc) {
    py::tuple bases = also ? py::make_tuple(py::handle(gErrors.base), py::handle(also))
                           : py::make_tuple(py::handle(gErrors.base));
    return newError(m, name, bases.ptr(), doc);
  };
  gErrors.mismatch = sub("MismatchError", nullptr,
                         "Ranks disagree on an operation (shape, dtype, op, root...).");
  gErrors.peerLost =
      sub("PeerLostError", nullptr, "A peer process died, closed its link or shut down.");
  gErrors.timeout = sub("KoloTimeoutError", PyExc_TimeoutError,
                        "A peer stopped answering (KOLO_TIMEOUT), or a stall shutdown.");
  gErrors.notInitialized =
      sub("NotInitializedError", nullptr, "Called before init() or after shutdown().");
  gErrors.invalidArgument =
      sub("InvalidArgumentError", PyExc_ValueError,
          "A bad argument: unknown dtype or op, bad shape, root, splits, name...");

  // ---- codes ----
  m.attr("FLOAT32") = static_cast<int>(KOLO_FLOAT32);
  m.attr("FLOAT64") = static_cast<int>(KOLO_FLOAT64);
  m.attr("FLOAT16") = static_cast<int>(KOLO_FLOAT16);
  m.attr("BFLOAT16") = static_cast<int>(KOLO_BFLOAT16);
  m.attr("INT32") = static_cast<int>(KOLO_INT32);
  m.attr("INT64") = static_cast<int>(KOLO_INT64);
  m.attr("UINT8") = static_cast<int>(KOLO_UINT8);
  m.attr("SUM") = static_cast<int>(KOLO_SUM);
  m.attr("AVG") = static_cast<int>(KOLO_AVG);
  m.attr("MIN") = static_cast<int>(KOLO_MIN);
  m.attr("MAX") = static_cast<int>(KOLO_MAX);
  m.attr("PROD") = static_cast<int>(KOLO_PROD);
  m.attr("ERR_INVALID_ARGUMENT") = static_cast<int>(KOLO_ERR_INVALID_ARGUMENT);
  m.attr("ERR_NOT_INITIALIZED") = static_cast<int>(KOLO_ERR_NOT_INITIALIZED);
  m.attr("ERR_ALREADY_INITIALIZED") = static_cast<int>(KOLO_ERR_ALREADY_INITIALIZED);
  m.attr("ERR_MISMATCH") = static_cast<int>(KOLO_ERR_MISMATCH);
  m.attr("ERR_PEER_LOST") = static_cast<int>(KOLO_ERR_PEER_LOST);
  m.attr("ERR_TIMEOUT") = static_cast<int>(KOLO_ERR_TIMEOUT);
  m.attr("ERR_IO") = static_cast<int>(KOLO_ERR_IO);
  m.attr("ERR_INTERNAL") = static_cast<int>(KOLO_ERR_INTERNAL);
  m.def("error_name", &kolo_error_name, py::arg("code"));
  m.def(
      "dtype_size",
      [](int dtype) -> int {
        switch (dtype) {
          case KOLO_FLOAT32:
          case KOLO_INT32: return 4;
          case KOLO_FLOAT64:
          case KOLO_INT64: return 8;
          case KOLO_FLOAT16:
          case KOLO_BFLOAT16: return 2;
          case KOLO_UINT8: return 1;
        }
        raise(KOLO_ERR_INVALID_ARGUMENT, "unknown dtype value " + std::to_string(dtype));
      },
      py::arg("dtype"), "Bytes per element of a dtype code.");

  // ---- what the build has (kolo/cuda.h; no kolo_init needed) ----
  m.def(
      "cuda_built", [] { return kolo_cuda_built() == 1; },
      "True when libkolo was built with CUDA (KOLO_WITH_CUDA).");
  m.def(
      "nccl_built", [] { return kolo_nccl_built(); },
      "The NCCL version code behind the collectives, 0 when none.");
  m.def(
      "cuda_devices",
      [] {
        int count = 0;
        const char* reason = nullptr;
        check(kolo_cuda_device_count(&count, &reason));
        return py::make_tuple(count, std::string(reason ? reason : ""));
      },
      "(count, reason): the CUDA devices this process can use, and why none.");

  // ---- lifetime and layout ----
  m.def(
      "init",
      [] {
        if (kolo_initialized()) return;  // idempotent, like Horovod's init
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_init();
        }
        check(rc);
      },
      "Joins the job (layout from kolorun, mpirun, srun or torchrun variables) and "
      "starts the runtime. A second call does nothing.");
  m.def(
      "shutdown",
      [] {
        if (!kolo_initialized()) return;
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_finalize();
        }
        check(rc);
      },
      "Stops the runtimes (pending operations fail) and leaves the job. Does nothing "
      "when not initialized.");
  m.def("is_initialized", [] { return kolo_initialized() == 1; });
  m.def("rank", [] { return layoutValue(kolo_rank(), "kolo_rank"); });
  m.def("size", [] { return layoutValue(kolo_size(), "kolo_size"); });
  m.def("local_rank", [] { return layoutValue(kolo_local_rank(), "kolo_local_rank"); });
  m.def("local_size", [] { return layoutValue(kolo_local_size(), "kolo_local_size"); });
  m.def("cross_rank", [] { return layoutValue(kolo_cross_rank(), "kolo_cross_rank"); });
  m.def("cross_size", [] { return layoutValue(kolo_cross_size(), "kolo_cross_size"); });

  m.def(
      "elastic_host_updates",
      [] {
        int64_t updates = 0, additions = 0;
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_elastic_host_updates(&updates, &additions);
        }
        check(rc);
        return py::make_tuple(updates, additions);
      },
      "(updates, additions): how often the elastic launcher's hosts changed, and how "
      "many of those changes added a host; (0, 0) outside an elastic job.");
  m.def(
      "elastic_world",
      [] {
        int64_t generation = 0, updates = 0, additions = 0;
        check(kolo_elastic_world(&generation, &updates, &additions));
        return py::make_tuple(generation, updates, additions);
      },
      "(generation, updates, additions) of this process's elastic world: the launcher's "
      "host-update counters when it formed the world; generation 0 outside an elastic "
      "job.");

  // Parameter servers (include/kolo/ps.h); tensors as data addresses.
  m.def("ps_servers", [] {
    int n = 0;
    check(kolo_ps_servers(&n));
    return n;
  });
  m.def("ps_start", [](py::dict o, std::vector<uintptr_t> params,
                       std::vector<uint64_t> counts) {
    const std::string mode = py::str(o["mode"]), optimizer = py::str(o["optimizer"]);
    kolo_ps_options c{};
    c.mode = mode.c_str();
    c.optimizer = optimizer.c_str();
    auto f = [&](const char* k) { return o[k].cast<float>(); };
    auto i = [&](const char* k) { return o[k].cast<int>(); };
    c.lr = f("lr");
    c.weight_decay = f("weight_decay");
    c.momentum = f("momentum");
    c.dampening = f("dampening");
    c.nesterov = i("nesterov");
    c.beta1 = f("beta1");
    c.beta2 = f("beta2");
    c.eps = f("eps");
    c.alpha = f("alpha");
    c.centered = i("centered");
    c.staleness_bound = i("staleness_bound");
    c.backup_workers = i("backup_workers");
    c.easgd_alpha = f("easgd_alpha");
    c.push_period = i("push_period");
    c.pull_period = i("pull_period");
    c.easgd_period = i("easgd_period");
    c.pushers = o.contains("pushers") ? i("pushers") : 0;
    c.validators = o.contains("validators") ? i("validators") : 0;
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_start(&c, p.size(), p.data(), counts.data());
    }
    check(rc);
  });
  m.def("ps_step",
        [](std::vector<uintptr_t> params, std::vector<uintptr_t> grads, float lr) {
          std::vector<float*> p;
          std::vector<const float*> g;
          for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
          for (uintptr_t a : grads) g.push_back(reinterpret_cast<const float*>(a));
          int rc;
          {
            py::gil_scoped_release nogil;
            rc = kolo_ps_step(p.data(), g.data(), lr);
          }
          check(rc);
        });
  m.def("ps_pull", [](std::vector<uintptr_t> params) {
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_pull(p.data());
    }
    check(rc);
  });
  m.def("ps_exchange", [](std::vector<uintptr_t> params) {
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_exchange(p.data());
    }
    check(rc);
  });
  m.def("ps_request_stop", [] {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_request_stop();
    }
    check(rc);
  });
  m.def("ps_stop_requested", [] {
    int v = 0;
    check(kolo_ps_stop_requested(&v));
    return v != 0;
  });
  m.def("ps_version", [] {
    uint64_t v = 0;
    check(kolo_ps_version(&v));
    return v;
  });
  m.def("ps_validators", [] {
    int v = 0;
    check(kolo_ps_validators(&v));
    return v;
  });
  m.def("ps_training_over", [] {
    int v = 0;
    check(kolo_ps_training_over(&v));
    return v != 0;
  });
  m.def("ps_finish", [] {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_finish();
    }
    check(rc);
  });
  m.def("ps_staleness", [] {
    uint64_t v = 0;
    check(kolo_ps_staleness(&v));
    return v;
  });
  m.def("ps_save", [](const std::string& path) {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_save(path.c_str());
    }
    check(rc);
  });
  m.def("ps_load", [](const std::string& path, std::vector<uintptr_t> params) {
    std::vector<float*> p;
    for (uintptr_t a : params) p.push_back(reinterpret_cast<float*>(a));
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_load(path.c_str(), p.data());
    }
    check(rc);
  });
  m.def("ps_stats", [] {
    std::vector<uint64_t> out(1 << 16);
    size_t n = 0;
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_ps_stats(out.data(), out.size(), &n);
    }
    check(rc);
    out.resize(n);
    return out;
  });

  // ---- asynchronous operations (the runtime) ----
  m.def(
      "allreduce_async",
      [](const std::string& name, py::handle send, py::handle recv,
         std::vector<int64_t> shape, int dtype, int op, double prescale, double postscale,
         int processSet) {
        kolo_handle h = 0;
        check(kolo_allreduce_async(name.c_str(), addressOf(send, false),
                                   addressOf(recv, true), dims(shape), dimsData(shape),
                                   asEnum<kolo_dtype>(dtype), asEnum<kolo_op>(op),
                                   prescale, postscale, processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("recv_ptr"), py::arg("shape"),
      py::arg("dtype"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0, py::arg("process_set") = 0,
      "Submits an allreduce; recv may equal send. Returns a handle.");
  m.def(
      "grouped_allreduce_async",
      [](const std::vector<std::string>& names, const std::vector<py::handle>& sends,
         const std::vector<py::handle>& recvs,
         const std::vector<std::vector<int64_t>>& shapes, int dtype, int op,
         double prescale, double postscale, int processSet) {
        const size_t n = names.size();
        if (sends.size() != n || recvs.size() != n || shapes.size() != n) {
          raise(KOLO_ERR_INVALID_ARGUMENT,
                "grouped_allreduce_async: " + std::to_string(n) + " names, " +
                    std::to_string(sends.size()) + " sends, " +
                    std::to_string(recvs.size()) + " recvs, " +
                    std::to_string(shapes.size()) + " shapes");
        }
        std::vector<const char*> cNames(n);
        std::vector<const void*> cSends(n);
        std::vector<void*> cRecvs(n);
        std::vector<int> ndims(n);
        std::vector<const int64_t*> cShapes(n);
        for (size_t i = 0; i < n; ++i) {
          cNames[i] = names[i].c_str();
          cSends[i] = addressOf(sends[i], false);
          cRecvs[i] = addressOf(recvs[i], true);
          ndims[i] = dims(shapes[i]);
          cShapes[i] = dimsData(shapes[i]);
        }
        std::vector<kolo_handle> handles(n);
        check(kolo_grouped_allreduce_async(
            static_cast<int>(n), cNames.data(), cSends.data(), cRecvs.data(),
            ndims.data(), cShapes.data(), asEnum<kolo_dtype>(dtype), asEnum<kolo_op>(op),
            prescale, postscale, processSet, handles.data()));
        return handles;
      },
      py::arg("names"), py::arg("send_ptrs"), py::arg("recv_ptrs"), py::arg("shapes"),
      py::arg("dtype"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0, py::arg("process_set") = 0,
      "Allreduces that always run together (one fusion bucket). Returns handles.");
  m.def(
      "allgather_async",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         int processSet) {
        kolo_handle h = 0;
        check(kolo_allgather_async(name.c_str(), addressOf(send, false), dims(shape),
                                   dimsData(shape), asEnum<kolo_dtype>(dtype), processSet,
                                   &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("process_set") = 0,
      "Submits an allgather (first dimensions may differ); read the result with "
      "output().");
  m.def(
      "broadcast_async",
      [](const std::string& name, py::handle buf, std::vector<int64_t> shape, int dtype,
         int root, int processSet) {
        kolo_handle h = 0;
        check(kolo_broadcast_async(name.c_str(), addressOf(buf, true), dims(shape),
                                   dimsData(shape), asEnum<kolo_dtype>(dtype), root,
                                   processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("root"), py::arg("process_set") = 0,
      "Submits an in-place broadcast from `root`.");
  m.def(
      "alltoall_async",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         std::optional<std::vector<int64_t>> splits, int processSet) {
        kolo_handle h = 0;
        const int64_t* s = splits ? splits->data() : nullptr;
        const int ns = splits ? static_cast<int>(splits->size()) : 0;
        if (splits && splits->empty()) {
          raise(KOLO_ERR_INVALID_ARGUMENT,
                "alltoall_async '" + name + "': empty splits (give None for equal)");
        }
        check(kolo_alltoall_async(name.c_str(), addressOf(send, false), dims(shape),
                                  dimsData(shape), s, ns, asEnum<kolo_dtype>(dtype),
                                  processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("splits") = py::none(), py::arg("process_set") = 0,
      "Submits an alltoall; splits: rows to each rank (None: equal). Result: output().");
  m.def(
      "reducescatter_async",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         int op, int processSet) {
        kolo_handle h = 0;
        check(kolo_reducescatter_async(name.c_str(), addressOf(send, false), dims(shape),
                                       dimsData(shape), asEnum<kolo_dtype>(dtype),
                                       asEnum<kolo_op>(op), processSet, &h));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("op"), py::arg("process_set") = 0,
      "Submits a reducescatter (first dimension divisible by the set size); result: "
      "output().");
  m.def(
      "barrier_async",
      [](int processSet) {
        kolo_handle h = 0;
        check(kolo_barrier_async(processSet, &h));
        return h;
      },
      py::arg("process_set") = 0);
  m.def(
      "join_async",
      [](int processSet) {
        kolo_handle h = 0;
        check(kolo_join_async(processSet, &h));
        return h;
      },
      py::arg("process_set") = 0,
      "This rank is out of data: it contributes zeros until every rank has joined.");

  // ---- completion ----
  m.def(
      "poll",
      [](kolo_handle h) {
        int done = 0;
        check(kolo_poll(h, &done));
        return done == 1;
      },
      py::arg("handle"), "True once the operation has finished (well or not).");
  m.def(
      "wait",
      [](kolo_handle h) {
        int rc;
        std::string message;
        {
          py::gil_scoped_release nogil;
          rc = kolo_wait(h);
          if (rc != KOLO_OK) message = kolo_last_error();
        }
        if (rc != KOLO_OK) raise(rc, message);
      },
      py::arg("handle"),
      "Blocks (without the GIL) until done; raises the operation's error.");
  m.def(
      "output",
      [](kolo_handle h) {
        const void* data = nullptr;
        size_t bytes = 0;
        int ndim = 0;
        const int64_t* shape = nullptr;
        check(kolo_handle_output(h, &data, &bytes, &ndim, &shape));
        std::vector<int64_t> s(shape, shape + ndim);
        return py::make_tuple(py::bytes(static_cast<const char*>(data), bytes), s);
      },
      py::arg("handle"),
      "(bytes, shape) of an allgather, alltoall or reducescatter result (a copy).");
  m.def(
      "output_shape",
      [](kolo_handle h) {
        const void* data = nullptr;
        size_t bytes = 0;
        int ndim = 0;
        const int64_t* shape = nullptr;
        check(kolo_handle_output(h, &data, &bytes, &ndim, &shape));
        return std::vector<int64_t>(shape, shape + ndim);
      },
      py::arg("handle"), "The shape of output() without copying the data.");
  m.def(
      "output_into",
      [](kolo_handle h, py::handle dest, size_t capacity) {
        const void* data = nullptr;
        size_t bytes = 0;
        int ndim = 0;
        const int64_t* shape = nullptr;
        check(kolo_handle_output(h, &data, &bytes, &ndim, &shape));
        if (bytes > capacity) {
          raise(KOLO_ERR_INVALID_ARGUMENT,
                "output_into: the result has " + std::to_string(bytes) +
                    " bytes, room for " + std::to_string(capacity));
        }
        if (bytes > 0) std::memcpy(addressOf(dest, true), data, bytes);
        return bytes;
      },
      py::arg("handle"), py::arg("dest_ptr"), py::arg("capacity"),
      "Copies output() into memory at dest_ptr (room for `capacity` bytes); returns "
      "the bytes copied.");
  m.def(
      "release", [](kolo_handle h) { check(kolo_release(h)); }, py::arg("handle"),
      "Frees the handle; a pending operation still runs (keep its buffers alive).");

  // ---- the hot path (raw CPython functions, above) ----
  if (PyModule_AddFunctions(m.ptr(), gHotPath) != 0) throw py::error_already_set();
  if (!kolo_native::addTensorHandles(m.ptr())) throw py::error_already_set();

  // ---- process sets ----
  m.def(
      "process_set_create",
      [](const std::vector<int>& ranks) {
        int id = -1, rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_process_set_create(ranks.data(), static_cast<int>(ranks.size()), &id);
        }
        check(rc);
        return id;
      },
      py::arg("ranks"),
      "Collective over the listed ranks only (same list, same order on each). Returns "
      "the id, agreed by the members.");
  m.def(
      "process_set_destroy",
      [](int id) {
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_process_set_destroy(id);
        }
        check(rc);
      },
      py::arg("id"));
  m.def(
      "process_set_rank",
      [](int id) {
        int r = -1;
        check(kolo_process_set_rank(id, &r));
        return r;
      },
      py::arg("id"), "This rank's index in the set; -1 when not a member.");
  m.def(
      "process_set_size",
      [](int id) {
        int s = 0;
        check(kolo_process_set_size(id, &s));
        return s;
      },
      py::arg("id"));

  // ---- tools ----
  m.def(
      "start_timeline",
      [](const std::string& path) { check(kolo_start_timeline(path.c_str())); },
      py::arg("path"));
  m.def("stop_timeline", [] { check(kolo_stop_timeline()); });
  m.def(
      "straggler_report",
      [](int processSet) {
        int size = 0;
        check(kolo_process_set_size(processSet, &size));
        std::vector<kolo_rank_lag> lags(size);
        check(kolo_straggler_report(processSet, lags.data(), size));
        py::list out;
        for (const auto& l : lags) {
          py::dict d;
          d["operations"] = l.operations;
          d["times_last"] = l.times_last;
          d["mean_lag_seconds"] = l.mean_lag_seconds;
          d["max_lag_seconds"] = l.max_lag_seconds;
          out.append(d);
        }
        return out;
      },
      py::arg("process_set") = 0);

  // ---- synchronous collectives (kolo.h, world communicator) ----
  m.def(
      "allreduce",
      [](py::handle send, py::handle recv, size_t count, int dtype, int op) {
        const void* s = addressOf(send, false);
        void* r = addressOf(recv, true);
        int rc;
        {
          py::gil_scoped_release nogil;
          rc =
              kolo_allreduce(s, r, count, asEnum<kolo_dtype>(dtype), asEnum<kolo_op>(op));
        }
        check(rc);
      },
      py::arg("send_ptr"), py::arg("recv_ptr"), py::arg("count"), py::arg("dtype"),
      py::arg("op"));
  m.def(
      "broadcast",
      [](py::handle buf, size_t count, int dtype, int root) {
        void* b = addressOf(buf, true);
        int rc;
        {
          py::gil_scoped_release nogil;
          rc = kolo_broadcast(b, count, asEnum<kolo_dtype>(dtype), root);
        }
        check(rc);
      },
      py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("root"));
  m.def("barrier", [] {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = kolo_barrier();
    }
    check(rc);
  });

  bindData(m);  // after the exception classes, which it maps kolo::Error to
}

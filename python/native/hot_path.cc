// kolo._native's hot path: raw CPython functions.
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
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <pybind11/pybind11.h>

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>

#include "bindings.h"
#include "native_common.h"

namespace kolo_native {
namespace {

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

void bindHotPath(py::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), gHotPath) != 0) throw py::error_already_set();
  if (!kolo_native::addTensorHandles(m.ptr())) throw py::error_already_set();
}

}  // namespace kolo_native

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
// plain CPython functions rather than pybind11 ones (hot_path.cc says why
// and how), and so is kolo.torch's in-place allreduce with its handle type
// (tensor_handles.cc); everything else is pybind11.
//
// The module is built section by section (bindings.h): this file holds the
// error classes and codes; world_bindings.cc lifetime, layout and the
// synchronous collectives; runtime_bindings.cc the asynchronous operations,
// their completion, process sets and tools; ps_bindings.cc the parameter
// servers; hot_path.cc the raw functions; data_bindings.cc the data readers.
#include <kolo/cuda.h>
#include <kolo/kolo.h>
#include <pybind11/pybind11.h>

#include <string>
#include <string_view>

#include "bindings.h"
#include "native_common.h"

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

PyObject* newError(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string full = std::string("kolo._native.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module keeps a reference
  return cls;
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

[[noreturn]] void raise(int code, const std::string& message) {
  setError(code, message);
  throw py::error_already_set();
}

void check(int rc) {
  if (rc != KOLO_OK) raise(rc, kolo_last_error());
}

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

GroupedBuffers::GroupedBuffers(const char* what, const std::vector<std::string>& names_,
                               const std::vector<py::handle>& sends_,
                               const std::vector<py::handle>& recvs_,
                               const std::vector<std::vector<int64_t>>& shapes_) {
  const size_t n = names_.size();
  if (sends_.size() != n || recvs_.size() != n || shapes_.size() != n) {
    raise(KOLO_ERR_INVALID_ARGUMENT,
          std::string(what) + ": " + std::to_string(n) + " names, " +
              std::to_string(sends_.size()) + " sends, " + std::to_string(recvs_.size()) +
              " recvs, " + std::to_string(shapes_.size()) + " shapes");
  }
  names.resize(n);
  sends.resize(n);
  recvs.resize(n);
  ndims.resize(n);
  shapes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    names[i] = names_[i].c_str();
    sends[i] = addressOf(sends_[i], false);
    recvs[i] = addressOf(recvs_[i], true);
    ndims[i] = dims(shapes_[i]);
    shapes[i] = dimsData(shapes_[i]);
  }
}

void bindExceptions(py::module_& m) {
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
}

void bindCodes(py::module_& m) {
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
}

// kolo/cuda.h; no kolo_init needed.
void bindBuildInfo(py::module_& m) {
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
}

}  // namespace kolo_native

PYBIND11_MODULE(_native, m) {
  using namespace kolo_native;
  m.doc() =
      "kolo's C API for Python (docs/python.md). Tensors cross as data "
      "addresses plus shape and dtype; kolo.numpy and kolo.torch build on it.";
  bindExceptions(m);
  bindCodes(m);
  bindBuildInfo(m);
  bindLifetime(m);
  bindParameterServers(m);
  bindAsyncOperations(m);
  bindCompletion(m);
  bindHotPath(m);
  bindProcessSets(m);
  bindTools(m);
  bindSyncCollectives(m);
  bindCudaOperations(m);
  bindData(m);  // after the exception classes, which it maps kolo::Error to
}

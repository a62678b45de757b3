// What the files of kolo._native share: the module's error reporting, the
// GIL guard, and the registration of the in-place allreduce fast path
// (tensor_handles.cc). Internal to the extension.
#pragma once

#include <Python.h>

#include <string_view>

namespace kolo_native {

// Sets the Python error of a kolo code: the class by code (KoloError and its
// subclasses), the message, .code and .code_name. Never throws; when
// building the exception fails, that failure is the error set.
void setError(int code, std::string_view message) noexcept;

// kolo._native.InvalidArgumentError (valid after the module's import).
PyObject* invalidArgumentClass() noexcept;

// Py_BEGIN/END_ALLOW_THREADS as an object, so that no path (an exception
// included) leaves the GIL released.
class WithoutGil {
 public:
  WithoutGil() : state_(PyEval_SaveThread()) {}
  ~WithoutGil() { PyEval_RestoreThread(state_); }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

// Adds tensor_handles.cc's type and functions to the module; false with the
// Python error set on failure.
bool addTensorHandles(PyObject* module) noexcept;

}  // namespace kolo_native

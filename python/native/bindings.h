// What the pybind11 files of kolo._native share: the argument helpers and
// one bind function per section of the module, called in this order by
// PYBIND11_MODULE (native.cc). Internal to the extension.
#pragma once

#include <kolo/kolo.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace py = pybind11;

namespace kolo_native {

// Sets the Python error of `code` (setError) and throws it to pybind11.
[[noreturn]] void raise(int code, const std::string& message);

// Raises for a non-zero code, with the calling thread's kolo_last_error().
void check(int rc);

// A data address: a Python int, or an object with the buffer protocol (the
// caller keeps it alive until the operation ends). None is a null pointer.
void* addressOf(const py::handle& obj, bool writable);

// Any int as a C enum: the C API checks the value (an int outside the
// enumerators must not go through static_cast).
template <typename E>
E asEnum(int v) {
  static_assert(sizeof(E) == sizeof(int));
  E e;
  std::memcpy(&e, &v, sizeof(e));
  return e;
}

inline int dims(const std::vector<int64_t>& shape) {
  return static_cast<int>(shape.size());
}

inline const int64_t* dimsData(const std::vector<int64_t>& shape) {
  return shape.empty() ? nullptr : shape.data();
}

// The C arrays of a grouped submission (kolo_grouped_allreduce_async and its
// _cuda form), checked to be as long as `names`; `what` names the call in
// the error. The pointers stay valid while the Python lists live.
struct GroupedBuffers {
  GroupedBuffers(const char* what, const std::vector<std::string>& names,
                 const std::vector<py::handle>& sends,
                 const std::vector<py::handle>& recvs,
                 const std::vector<std::vector<int64_t>>& shapes);
  std::vector<const char*> names;
  std::vector<const void*> sends;
  std::vector<void*> recvs;
  std::vector<int> ndims;
  std::vector<const int64_t*> shapes;
};

// The sections of the module.
void bindExceptions(py::module_& m);        // native.cc: KoloError and its subclasses
void bindCodes(py::module_& m);             // native.cc: dtype, op and error codes
void bindBuildInfo(py::module_& m);         // native.cc: what the build has
void bindLifetime(py::module_& m);          // world_bindings.cc: init, layout, elastic
void bindParameterServers(py::module_& m);  // ps_bindings.cc
void bindAsyncOperations(py::module_& m);   // runtime_bindings.cc: *_async
void bindCompletion(py::module_& m);        // runtime_bindings.cc: poll, wait, output
void bindHotPath(py::module_& m);           // hot_path.cc: raw CPython functions
void bindProcessSets(py::module_& m);       // runtime_bindings.cc
void bindTools(py::module_& m);             // runtime_bindings.cc: timeline, stragglers
void bindSyncCollectives(py::module_& m);   // world_bindings.cc: kolo.h's collectives
void bindCudaOperations(py::module_& m);  // cuda_bindings.cc: *_async_cuda, output_dlpack

}  // namespace kolo_native

// data_bindings.cc: ImageFolder, BatchPrefetcher, DistributedSampler, JPEG.
void bindData(py::module_& m);

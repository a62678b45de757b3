// kolo._native's operations on CUDA device memory: the runtime's `_cuda`
// submissions (kolo_<op>_async_cuda: kolo_<op>_async's arguments plus a
// kolo_cuda_memory {device, stream}). The outputs kolo allocates
// (allgather, alltoall, reducescatter) are host memory, read with
// output_into as for host operations (include/kolo/runtime.h).
//
// kolo.torch passes the tensor's device index and the caller's current CUDA
// stream (torch.cuda.current_stream().cuda_stream, a cudaStream_t as an
// int); kolo orders its reads after the work enqueued on that stream before
// the call and its writes before the work enqueued after it (docs/gpu.md).
// Like the rest of kolo._native this file includes no CUDA and no torch
// header: the stream crosses as an address.
//
// In a libkolo without CUDA, or without a usable device, the calls return
// KOLO_ERR_INVALID_ARGUMENT naming the operation and the cause, and make no
// handle; kolo.torch checks the build first (kolo.torch.device).
#include <kolo/cuda.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"

namespace kolo_native {
namespace {

kolo_cuda_memory memoryOf(int device, uintptr_t stream) {
  kolo_cuda_memory m;
  m.device = device;
  m.stream = reinterpret_cast<void*>(stream);
  return m;
}

}  // namespace

void bindCudaOperations(py::module_& m) {
  m.def(
      "allreduce_async_cuda",
      [](const std::string& name, py::handle send, py::handle recv,
         std::vector<int64_t> shape, int dtype, int op, double prescale, double postscale,
         int processSet, int device, uintptr_t stream) -> kolo_handle {
        kolo_cuda_memory mem = memoryOf(device, stream);
        kolo_handle h = 0;
        check(kolo_allreduce_async_cuda(
            name.c_str(), addressOf(send, false), addressOf(recv, true), dims(shape),
            dimsData(shape), asEnum<kolo_dtype>(dtype), asEnum<kolo_op>(op), prescale,
            postscale, processSet, &h, &mem));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("recv_ptr"), py::arg("shape"),
      py::arg("dtype"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"), py::arg("device"), py::arg("stream"),
      "allreduce_async on device memory of `device`, ordered on `stream`.");
  m.def(
      "grouped_allreduce_async_cuda",
      [](const std::vector<std::string>& names, const std::vector<py::handle>& sends,
         const std::vector<py::handle>& recvs,
         const std::vector<std::vector<int64_t>>& shapes, int dtype, int op,
         double prescale, double postscale, int processSet, int device,
         uintptr_t stream) {
        GroupedBuffers b("grouped_allreduce_async_cuda", names, sends, recvs, shapes);
        const size_t n = b.names.size();
        kolo_cuda_memory mem = memoryOf(device, stream);
        std::vector<kolo_handle> handles(n);
        check(kolo_grouped_allreduce_async_cuda(
            static_cast<int>(n), b.names.data(), b.sends.data(), b.recvs.data(),
            b.ndims.data(), b.shapes.data(), asEnum<kolo_dtype>(dtype),
            asEnum<kolo_op>(op), prescale, postscale, processSet, handles.data(), &mem));
        return handles;
      },
      py::arg("names"), py::arg("send_ptrs"), py::arg("recv_ptrs"), py::arg("shapes"),
      py::arg("dtype"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set"), py::arg("device"), py::arg("stream"),
      "grouped_allreduce_async on device memory.");
  m.def(
      "allgather_async_cuda",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         int processSet, int device, uintptr_t stream) -> kolo_handle {
        kolo_cuda_memory mem = memoryOf(device, stream);
        kolo_handle h = 0;
        check(kolo_allgather_async_cuda(name.c_str(), addressOf(send, false), dims(shape),
                                        dimsData(shape), asEnum<kolo_dtype>(dtype),
                                        processSet, &h, &mem));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("process_set"), py::arg("device"), py::arg("stream"),
      "allgather_async on device memory; the output (host memory): output_into.");
  m.def(
      "broadcast_async_cuda",
      [](const std::string& name, py::handle buf, std::vector<int64_t> shape, int dtype,
         int root, int processSet, int device, uintptr_t stream) -> kolo_handle {
        kolo_cuda_memory mem = memoryOf(device, stream);
        kolo_handle h = 0;
        check(kolo_broadcast_async_cuda(name.c_str(), addressOf(buf, true), dims(shape),
                                        dimsData(shape), asEnum<kolo_dtype>(dtype), root,
                                        processSet, &h, &mem));
        return h;
      },
      py::arg("name"), py::arg("ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("root"), py::arg("process_set"), py::arg("device"), py::arg("stream"),
      "In-place broadcast_async on device memory.");
  m.def(
      "alltoall_async_cuda",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         std::optional<std::vector<int64_t>> splits, int processSet, int device,
         uintptr_t stream) -> kolo_handle {
        kolo_cuda_memory mem = memoryOf(device, stream);
        if (splits && splits->empty()) {
          raise(KOLO_ERR_INVALID_ARGUMENT,
                "alltoall_async '" + name + "': empty splits (give None for equal)");
        }
        kolo_handle h = 0;
        const int64_t* s = splits ? splits->data() : nullptr;
        const int ns = splits ? static_cast<int>(splits->size()) : 0;
        check(kolo_alltoall_async_cuda(name.c_str(), addressOf(send, false), dims(shape),
                                       dimsData(shape), s, ns, asEnum<kolo_dtype>(dtype),
                                       processSet, &h, &mem));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("splits"), py::arg("process_set"), py::arg("device"), py::arg("stream"),
      "alltoall_async on device memory; the output (host memory): output_into.");
  m.def(
      "reducescatter_async_cuda",
      [](const std::string& name, py::handle send, std::vector<int64_t> shape, int dtype,
         int op, int processSet, int device, uintptr_t stream) -> kolo_handle {
        kolo_cuda_memory mem = memoryOf(device, stream);
        kolo_handle h = 0;
        check(kolo_reducescatter_async_cuda(
            name.c_str(), addressOf(send, false), dims(shape), dimsData(shape),
            asEnum<kolo_dtype>(dtype), asEnum<kolo_op>(op), processSet, &h, &mem));
        return h;
      },
      py::arg("name"), py::arg("send_ptr"), py::arg("shape"), py::arg("dtype"),
      py::arg("op"), py::arg("process_set"), py::arg("device"), py::arg("stream"),
      "reducescatter_async on device memory; the output (host memory): output_into.");
}

}  // namespace kolo_native

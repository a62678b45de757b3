#include "frameworks/torch/device_memory.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <type_traits>
#include <utility>

#include "collectives/cuda/device_staging.h"
#include "common/check.h"

namespace kolo::torch {
namespace {

// c10::Stream::native_handle() (the cudaStream_t of a CUDA stream) exists
// in torch 2.x; older libtorch cannot name the stream without c10_cuda.
template <typename S, typename = void>
struct HasNativeHandle : std::false_type {};
template <typename S>
struct HasNativeHandle<S, std::void_t<decltype(std::declval<const S&>().native_handle())>>
    : std::true_type {};

template <typename S>
void* currentStream(const S& stream, const std::string& what) {
  if constexpr (HasNativeHandle<S>::value) {
    return stream.native_handle();
  } else {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": a CUDA tensor needs a libtorch whose c10::Stream has "
                       "native_handle() (torch 2.x) to name its current stream; "
                       "move the tensor to the CPU");
  }
}

}  // namespace

void deviceRequest(runtime::OpRequest& request, const at::Tensor& tensor,
                   const std::string& what) {
  request.device = nullptr;
  request.spec.onDevice = false;
  const c10::Device device = tensor.device();
  if (device.is_cpu()) return;
  if (!device.is_cuda()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": tensor is on " << device.str()
                    << "; kolo takes CPU tensors and CUDA tensors");
  }
  const int index = device.has_index() ? device.index() : 0;
  const auto* guard = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  void* stream =
      currentStream(guard->getStream(c10::Device(c10::DeviceType::CUDA,
                                                 static_cast<c10::DeviceIndex>(index))),
                    what);
  request.device = collectives::cuda::DeviceEntry::record(what, index, stream);
  request.spec.onDevice = true;
}

}  // namespace kolo::torch

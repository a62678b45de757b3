// Where a tensor's data lives, for the requests kolo's libtorch integration
// gives the runtime (docs/gpu.md, "libtorch"):
//
// - deviceRequest(request, tensor, what): for a CPU tensor, leaves the
//   request a host request. For a CUDA tensor, makes it a device request
//   (spec.onDevice, and request.device recorded on the tensor's device and
//   the CURRENT CUDA stream of that device, as c10 has it on this thread):
//   the runtime reads the tensor after the work already enqueued on that
//   stream and stages it through pinned host memory; the handle is done
//   once the results are in the tensor (any stream may read them then).
//   Other devices (meta, mps, xpu...) throw Error(kInvalidArgument) naming
//   `what` and the device; so does a CUDA tensor when this kolo has no CUDA
//   support, no device, or the libtorch cannot name its stream (before
//   c10::Stream::native_handle, torch < 2.x), each saying which.
//
// Plain libtorch: the stream comes from c10's device guard interface, so
// kolo_torch links no torch_cuda/c10_cuda and builds against a CPU-only
// libtorch as well.
#pragma once

#include <torch/torch.h>

#include <string>

#include "runtime/submission_queue.h"

namespace kolo::torch {

void deviceRequest(runtime::OpRequest& request, const at::Tensor& tensor,
                   const std::string& what);

}  // namespace kolo::torch

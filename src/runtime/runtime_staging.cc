// CUDA device memory in the runtime's operations other than a fused
// allreduce (runtime.h; docs/gpu.md, "The host-staged path").
//
// stageIn copies the operation's input (this rank's bytes: the broadcast
// buffer, the allgather, alltoall or reducescatter input) from the device
// into pinned host memory, after the caller's ready event, and points the
// operation at the host copy, so the host code path runs unchanged.
// stageOut copies a broadcast's result back into the device buffer; for
// every kind it records the done event, restores the device pointers, and
// returns once the device outputs are written. The outputs kolo allocates
// (allgather, alltoall, reducescatter) are host memory in the handle (the
// C API's kolo_handle_output), as for host tensors.
#include <algorithm>

#include "runtime/runtime.h"

namespace kolo::runtime {

namespace cuda = collectives::cuda;

cuda::DeviceStager& Runtime::stager() {
  if (!stager_) {
    stager_ = options_.makeStager ? options_.makeStager()
                                  : std::make_unique<cuda::DeviceStager>();
  }
  return *stager_;
}

// This rank's input bytes: the agreed spec is the lowest submitting rank's,
// and allgather and alltoall may differ from it in the first dimension.
size_t Runtime::localInputBytes(const ReadyOp& r) const {
  const OpSpec& s = *r.spec;
  if (!firstDimMayDiffer(s.kind) || s.shape.empty()) return s.bytes();
  size_t row = 1;
  for (size_t i = 1; i < s.shape.size(); ++i) row *= static_cast<size_t>(s.shape[i]);
  return static_cast<size_t>(r.firstDims[rank_]) * row * elementSize(s.dtype);
}

void Runtime::stageIn(const ReadyOp& r, Op& o, StagedIo& io) {
  const OpSpec& s = *r.spec;
  const auto& entry = o.handle->deviceEntry();
  io.input = o.input;
  io.output = o.output;
  const size_t bytes = localInputBytes(r);
  uint8_t* host = stager().hostBuffer(std::max<size_t>(bytes, 1));
  pieces_.assign(
      1, cuda::StagedPiece{entry->device(), 0, bytes, o.input, nullptr, entry.get()});
  stager().toHost(cuda::planRuns(pieces_).at(0), pieces_, host);
  o.input = host;
  // A broadcast runs in place; the other kinds' outputs are host memory.
  if (s.kind == OpKind::kBroadcast) o.output = host;
}

void Runtime::stageOut(const ReadyOp& r, Op& o, const StagedIo& io) {
  const OpSpec& s = *r.spec;
  const auto& entry = o.handle->deviceEntry();
  const bool back = s.kind == OpKind::kBroadcast;
  const uint8_t* host = static_cast<const uint8_t*>(o.input);
  pieces_.assign(1, cuda::StagedPiece{entry->device(), 0, back ? s.bytes() : 0, nullptr,
                                      back ? io.output : nullptr, entry.get()});
  o.input = io.input;
  o.output = io.output;
  stager().fromHost(cuda::planRuns(pieces_).at(0), pieces_, host);
}

}  // namespace kolo::runtime

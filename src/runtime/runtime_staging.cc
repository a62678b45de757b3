// CUDA device memory by host staging (runtime.h; docs/gpu.md, "The
// host-staged path"): a fused allreduce (allreduceStaged), and the other
// kinds (stageIn / stageOut), where the communicator has no device path
// (runtime_device.cc) or a joined rank has no device buffer.
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

#include "collectives/elementwise.h"
#include "runtime/allreduce_bucket.h"
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

// Device memory: the members laid out in pinned host memory as in the
// fusion buffer (a joined rank's share: the identity), each run of
// neighbours on one device copied in with one host copy (staging_plan.h),
// prescale, the collective in place, the average's division and postscale
// in place, each run copied back; the handles complete once their done
// events have (DeviceStager::fromHost waits for them).
void Runtime::allreduceStaged(const AllreduceBucket& b) {
  const size_t esize = elementSize(b.dtype);
  cuda::DeviceStager& st = stager();
  uint8_t* host = st.hostBuffer(std::max<size_t>(b.bytes, 1));
  pieces_.clear();
  size_t at = 0;
  for (const ReadyOp* m : b.members) {
    const size_t n = static_cast<size_t>(m->spec->elements());
    cuda::StagedPiece p;
    p.offset = at;
    p.bytes = n * esize;
    at += p.bytes;
    if (!m->localId) {
      collectives::fillIdentity(host + p.offset, n, b.dtype, b.commOp);
    } else {
      Op& o = opAt(*m->localId);
      const auto& entry = o.handle->deviceEntry();
      p.device = entry->device();
      p.input = o.input;
      p.output = o.output;
      p.entry = entry.get();
    }
    pieces_.push_back(p);
  }
  const auto runs = cuda::planRuns(pieces_);
  for (const auto& run : runs) st.toHost(run, pieces_, host);
  for (size_t i = 0; i < b.members.size(); ++i) {
    const ReadyOp& r = *b.members[i];
    if (!r.localId) continue;
    const double prescale = r.spec->prescale;
    if (prescale != 1.0) {
      collectives::scaleInPlace(host + pieces_[i].offset,
                                static_cast<size_t>(r.spec->elements()), b.dtype,
                                prescale);
    }
    if (b.tl) b.tl->begin(r.spec->name, phase::kCollective, b.args);
  }
  AllreduceOptions ar = b.options();
  ar.send = ar.recv = host;
  ar.algorithm = algorithm_;
  comm_->allreduce(ar);
  std::vector<OpId> done;
  done.reserve(b.members.size());
  for (size_t i = 0; i < b.members.size(); ++i) {
    const ReadyOp& r = *b.members[i];
    if (!r.localId) continue;
    if (b.tl) b.tl->end(r.spec->name);
    uint8_t* p = host + pieces_[i].offset;
    b.finishValues(r, p, p);
    done.push_back(*r.localId);
  }
  for (const auto& run : runs) st.fromHost(run, pieces_, host);
  finishAll(done);
}

}  // namespace kolo::runtime

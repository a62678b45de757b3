// CUDA device memory on the communicator's device path (runtime.h;
// docs/gpu.md, "The paths"): the runtime's device operations run on a
// DeviceCollectives (CUDA IPC, NCCL or hierarchical) when the communicator
// has one, with their data kept on the device; else by host staging
// (runtime_staging.cc, allreduceStaged).
//
// Where an operation runs is decided alike on every rank from what the
// negotiation agreed (deviceRoute): the submissions (ReadyOp::submitted)
// and every rank's device of the tensor (ReadyOp::devices, carried in the
// specs and the response cache).
// - The path is made once, collectively, at the first device operation
//   that every rank submitted (the same operation on every rank: ready
//   operations run in one order); each rank's device is that operation's
//   tensor's, and the path stays bound to it (pathDevices_).
// - An operation some rank did not submit (a joined rank, which has no
//   device buffer) runs by host staging, where a joined rank's share is
//   written on the host.
// - An operation whose tensor is, on some rank, on another device than the
//   path's of that rank fails on every rank, naming the tensor, the rank
//   and both devices; nothing runs.
//
// On the path, all on kolo's stream of the device (DeviceStager): a fused
// bucket's members are gathered into the device fusion buffer after their
// ready events (one device-to-device copy each), prescaled with the device
// kernel, reduced in place by the path (kAverage divided by the path), then
// postscaled and scattered to the outputs with the done events recorded;
// a bucket of one tensor goes from its input to its output without the
// gather. Broadcast runs in place in the output. Allgather, alltoall and
// reducescatter write the path's result into the device fusion buffer and
// copy it once into the handle's host output (the C API's
// kolo_handle_output is host memory on every path: docs/gpu.md).
#include <algorithm>
#include <numeric>

#include "api/communicator_impl.h"
#include "common/check.h"
#include "common/logging.h"
#include "runtime/allreduce_bucket.h"
#include "runtime/runtime.h"

namespace kolo::runtime {

namespace cuda = collectives::cuda;

namespace {

// The communicator's own device path for this rank's `device` (null: host
// staging). Communicators other than kolo's own (a test's) have none.
std::shared_ptr<cuda::DeviceCollectives> communicatorPath(Communicator& comm,
                                                          int device) {
  auto* impl = dynamic_cast<api::CommunicatorImpl*>(&comm);
  if (impl == nullptr) return nullptr;
  // Owned by the communicator, which outlives this runtime.
  return std::shared_ptr<cuda::DeviceCollectives>(std::shared_ptr<void>(),
                                                  impl->deviceCollectives(device));
}

}  // namespace

std::string_view Runtime::pathName(const cuda::DeviceCollectives* path) {
  return path ? path->name() : std::string_view("staged");
}

Runtime::DeviceRoute Runtime::deviceRoute(const ReadyOp& r) {
  if (r.contributors() != size_ || r.devices.size() != static_cast<size_t>(size_)) {
    return {};
  }
  if (!pathAsked_) {
    pathAsked_ = true;
    const int device = r.devices[rank_];
    try {
      path_ = options_.makeDevicePath ? options_.makeDevicePath(*comm_, device)
                                      : communicatorPath(*comm_, device);
    } catch (const Error&) {
      // A forced path that cannot run, or settings that differ: the same
      // error on every rank, for this and every later device operation.
      pathError_ = std::current_exception();
    }
    if (path_) {
      pathDevices_ = r.devices;
      stager().keepDeviceMemory();  // the path's peers may map its buffers
    }
    if (!pathError_) {
      KOLO_LOG(kDebug) << "runtime: device operations run on the "
                       << (path_ ? std::string(path_->name()) + " path"
                                 : "host-staged path")
                       << " (this rank's device " << device << ", from '" << r.spec->name
                       << "')";
    }
  }
  if (pathError_) return {nullptr, pathError_};
  if (!path_) return {};
  for (int q = 0; q < size_; ++q) {
    if (r.devices[q] == pathDevices_[q]) continue;
    const OpSpec& s = *r.spec;
    return {nullptr, errorPtr(ErrorCode::kInvalidArgument,
                              std::string(toString(s.kind)) + " '" + s.name + "': rank " +
                                  std::to_string(q) + "'s tensor is on CUDA device " +
                                  std::to_string(r.devices[q]) + ", but the " +
                                  std::string(path_->name()) + " device path of rank " +
                                  std::to_string(q) + " is bound to CUDA device " +
                                  std::to_string(pathDevices_[q]) +
                                  " (the device of its first device operation); every "
                                  "device tensor of a rank must be on that device")};
  }
  return {path_.get(), nullptr};
}

// A fused bucket's members: those that cannot run fail here (alike on
// every rank), the rest go on in `onward`; the path when all of them can
// run on it, else null (host staging for the whole bucket).
cuda::DeviceCollectives* Runtime::routeDeviceBucket(const std::vector<ReadyOp*>& members,
                                                    std::vector<ReadyOp*>& onward) {
  onward.clear();
  cuda::DeviceCollectives* path = nullptr;
  bool staged = false;
  for (ReadyOp* m : members) {
    DeviceRoute route = deviceRoute(*m);
    if (route.error) {
      if (m->localId) finish(*m->localId, route.error);
      continue;
    }
    staged = staged || route.path == nullptr;
    path = route.path;
    onward.push_back(m);
  }
  return staged ? nullptr : path;
}

// One run of the bucket's pieces on the path's device (every member is on
// it: deviceRoute), all on kolo's stream of that device.
void Runtime::allreduceOnPath(const AllreduceBucket& b, cuda::DeviceCollectives& path) {
  const size_t esize = elementSize(b.dtype);
  cuda::DeviceStager& st = stager();
  const int device = path.device();
  pieces_.clear();
  size_t at = 0;
  for (const ReadyOp* m : b.members) {
    Op& o = opAt(*m->localId);
    cuda::StagedPiece p;
    p.device = device;
    p.offset = at;
    p.bytes = static_cast<size_t>(m->spec->elements()) * esize;
    p.input = o.input;
    p.output = o.output;
    p.entry = o.handle->deviceEntry().get();
    at += p.bytes;
    pieces_.push_back(p);
  }
  const cuda::StagingRun run{device, 0, pieces_.size(), 0, b.bytes};
  const size_t count = b.bytes / esize;
  const double prescale = b.members.front()->spec->prescale;
  const double postscale = b.members.front()->spec->postscale;
  void* stream = st.stream(device);
  const void* in = st.gather(run, pieces_);
  // The reduced values land in `work`: the device fusion buffer, or a lone
  // member's own output.
  void* work = pieces_.size() == 1 ? pieces_[0].output : const_cast<void*>(in);
  if (prescale != 1.0) {
    st.copy(device, work, in, b.bytes);
    st.scale(device, work, count, b.dtype, prescale);
    in = work;
  }
  if (b.tl) {
    for (const ReadyOp* m : b.members)
      b.tl->begin(m->spec->name, phase::kCollective, b.args);
  }
  path.allreduce(in, work, count, b.dtype, b.commOp, stream);
  if (b.op == ReduceOp::kAverage && !b.averaged) {
    st.divide(device, work, count, b.dtype, size_);
  }
  if (postscale != 1.0) st.scale(device, work, count, b.dtype, postscale);
  st.scatter(run, pieces_, work);
  std::vector<OpId> done;
  done.reserve(b.members.size());
  for (const ReadyOp* m : b.members) {
    if (b.tl) b.tl->end(m->spec->name);
    done.push_back(*m->localId);
  }
  finishAll(done);
}

// Every kind but an allreduce, on the path: the input read on the device
// after its ready event, the outputs written, the done event recorded and
// waited for.
void Runtime::runOnPath(const ReadyOp& r, Op& o, cuda::DeviceCollectives& path) {
  switch (r.spec->kind) {
    case OpKind::kBroadcast: return broadcastOnPath(r, o, path);
    case OpKind::kAllgather: return allgatherOnPath(r, o, path);
    case OpKind::kReduceScatter: return reduceScatterOnPath(r, o, path);
    case OpKind::kAlltoall: return alltoallOnPath(r, o, path);
    default:
      KOLO_THROW(ErrorCode::kInternal, toString(r.spec->kind)
                                           << " '" << r.spec->name
                                           << "' has no device path form");
  }
}

namespace {

// Elements per row (first dimension) of an allgather or alltoall: the
// agreed spec's first dimension is one rank's, and may be 0.
size_t rowElements(const OpSpec& s) {
  size_t n = 1;
  for (size_t i = 1; i < s.shape.size(); ++i) n *= static_cast<size_t>(s.shape[i]);
  return n;
}

// The one piece of a single operation's device input (or output).
cuda::StagedPiece onePiece(int device, size_t bytes, const void* input, void* output,
                           const cuda::DeviceEntry* entry) {
  return cuda::StagedPiece{device, 0, bytes, input, output, entry};
}

}  // namespace

void Runtime::broadcastOnPath(const ReadyOp& r, Op& o, cuda::DeviceCollectives& path) {
  const OpSpec& s = *r.spec;
  cuda::DeviceStager& st = stager();
  const int device = path.device();
  const size_t bytes = s.bytes();
  pieces_.assign(
      1, onePiece(device, bytes, o.input, o.output, o.handle->deviceEntry().get()));
  const cuda::StagingRun run{device, 0, 1, 0, bytes};
  const void* in = st.gather(run, pieces_);
  if (s.root == rank_ && in != o.output) st.copy(device, o.output, in, bytes);
  path.broadcast(o.output, static_cast<size_t>(s.elements()), s.dtype, s.root,
                 st.stream(device));
  st.scatter(run, pieces_, o.output);
}

// The path's result, `bytes` at `src` on the device, into the handle's
// host output `dst`; the done event recorded after the copy and waited for.
void Runtime::finishToHost(const cuda::StagingRun& run, void* dst, const void* src,
                           size_t bytes) {
  cuda::DeviceStager& st = stager();
  st.copy(run.device, dst, src, bytes);
  pieces_.resize(1);
  pieces_[0].output = nullptr;
  st.scatter(run, pieces_, nullptr);
}

void Runtime::allgatherOnPath(const ReadyOp& r, Op& o, cuda::DeviceCollectives& path) {
  const OpSpec& s = *r.spec;
  cuda::DeviceStager& st = stager();
  const int device = path.device();
  const size_t esize = elementSize(s.dtype);
  const size_t row = rowElements(s);
  std::vector<size_t> counts(size_);
  int64_t rows = 0;
  for (int q = 0; q < size_; ++q) {
    counts[q] = static_cast<size_t>(r.firstDims[q]) * row;
    rows += r.firstDims[q];
  }
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t inBytes = counts[rank_] * esize;
  pieces_.assign(
      1, onePiece(device, inBytes, o.input, nullptr, o.handle->deviceEntry().get()));
  const cuda::StagingRun run{device, 0, 1, 0, inBytes};
  const void* in = st.gather(run, pieces_);
  void* out = st.deviceBuffer(device, total * esize);
  path.allgather(in, out, counts, s.dtype, st.stream(device));
  auto& host = o.handle->mutableOutput();
  host.resize(total * esize);
  finishToHost(run, host.data(), out, total * esize);
  auto shape = s.shape;
  shape[0] = rows;
  o.handle->setOutputShape(std::move(shape));
}

void Runtime::reduceScatterOnPath(const ReadyOp& r, Op& o,
                                  cuda::DeviceCollectives& path) {
  const OpSpec& s = *r.spec;
  cuda::DeviceStager& st = stager();
  const int device = path.device();
  const size_t esize = elementSize(s.dtype);
  const size_t n = static_cast<size_t>(s.elements());
  const size_t recvCount = n / size_;
  pieces_.assign(
      1, onePiece(device, n * esize, o.input, nullptr, o.handle->deviceEntry().get()));
  const cuda::StagingRun run{device, 0, 1, 0, n * esize};
  const void* in = st.gather(run, pieces_);
  // The device fusion buffer: [the prescaled input | the result].
  auto* work = static_cast<uint8_t*>(st.deviceBuffer(device, (n + recvCount) * esize));
  void* recv = work + n * esize;
  if (s.prescale != 1.0) {
    st.copy(device, work, in, n * esize);
    st.scale(device, work, n, s.dtype, s.prescale);
    in = work;
  }
  path.reduceScatter(in, recv, std::vector<size_t>(size_, recvCount), s.dtype, s.op,
                     st.stream(device));
  if (s.postscale != 1.0) st.scale(device, recv, recvCount, s.dtype, s.postscale);
  finishToHost(run, o.output, recv, recvCount * esize);
  auto shape = s.shape;
  shape[0] /= size_;
  o.handle->setOutputShape(std::move(shape));
  cycleBytes_ += s.bytes();
}

void Runtime::alltoallOnPath(const ReadyOp& r, Op& o, cuda::DeviceCollectives& path) {
  const OpSpec& s = *r.spec;
  cuda::DeviceStager& st = stager();
  const int device = path.device();
  const size_t esize = elementSize(s.dtype);
  const size_t row = rowElements(s);
  std::vector<int64_t> mine;
  const std::vector<int64_t> matrix = alltoallMatrix(r, &o, mine);
  std::vector<size_t> sendCounts(size_), recvCounts(size_);
  int64_t rowsIn = 0;
  for (int q = 0; q < size_; ++q) {
    sendCounts[q] = static_cast<size_t>(mine[q]) * row;
    recvCounts[q] = static_cast<size_t>(matrix[q * size_ + rank_]) * row;
    rowsIn += matrix[q * size_ + rank_];
  }
  const size_t inBytes =
      std::accumulate(sendCounts.begin(), sendCounts.end(), size_t{0}) * esize;
  const size_t outBytes = static_cast<size_t>(rowsIn) * row * esize;
  pieces_.assign(
      1, onePiece(device, inBytes, o.input, nullptr, o.handle->deviceEntry().get()));
  const cuda::StagingRun run{device, 0, 1, 0, inBytes};
  const void* in = st.gather(run, pieces_);
  void* out = st.deviceBuffer(device, outBytes);
  path.alltoall(in, sendCounts, out, recvCounts, s.dtype, st.stream(device));
  auto& host = o.handle->mutableOutput();
  host.resize(outBytes);
  finishToHost(run, host.data(), out, outBytes);
  auto shape = s.shape;
  shape[0] = rowsIn;
  o.handle->setOutputShape(std::move(shape));
}

}  // namespace kolo::runtime

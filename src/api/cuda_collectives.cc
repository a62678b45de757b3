// kolo/cuda_communicator.h: the device-memory forms of the collectives.
// On the communicator's device path (CommunicatorImpl::deviceCollectives:
// CUDA IPC, NCCL or hierarchical) when it has one: kolo's stream of the
// device waits on an event recorded on the caller's stream, the path's
// collective runs on the device buffers themselves, and the call returns
// once the done event recorded after it has completed. Else on the
// host-staged path (collectives/cuda/device_staging.h, docs/gpu.md): the
// inputs are copied into pinned host memory after the work already on the
// caller's stream, the CPU collective runs, and the results are copied
// back. The checks a caller can act on (the build, the device, the device
// number) come first and are local: every rank given the same arguments
// gives the same answer, so no rank is left waiting in a collective.
//
// The path is made at the first `_cuda` call on the communicator (a
// collective call, so the same point on every rank) for that call's
// device, and serves that device of each rank from then on. Each later
// call on the path first gathers every rank's device (one small host
// allgather): a rank whose buffers are on another device than its path's
// fails the call on every rank, naming the rank and both devices.
#include <kolo/cuda_communicator.h>

#include <map>
#include <mutex>
#include <numeric>

#include "api/communicator_impl.h"
#include "collectives/cuda/device_collectives.h"
#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/device_staging.h"
#include "collectives/cuda/nccl_collectives.h"
#include "collectives/cuda/nccl_library.h"
#include "common/check.h"
#include "common/logging.h"

namespace kolo {
namespace {

namespace cuda = collectives::cuda;

// One stager per process for the synchronous calls (its pinned buffer and
// device fusion buffers are reused); the calls of several threads take
// turns.
std::mutex gStagerMu;
cuda::DeviceStager& stager() {
  static cuda::DeviceStager* s = new cuda::DeviceStager();  // never destroyed:
  return *s;  // CUDA may be torn down before static destructors run
}

// Stages `inBytes` from `in` to host, runs `collective(hostIn, hostOut)`,
// and copies `outBytes` from host back to `out`. `inPlace`: one host region
// serves as input and output (broadcast).
template <typename Fn>
void staged(const char* operation, const CudaMemory& memory, const void* in,
            size_t inBytes, void* out, size_t outBytes, bool inPlace, Fn&& collective) {
  auto entry = cuda::DeviceEntry::record(operation, memory.device, memory.stream);
  std::lock_guard<std::mutex> lock(gStagerMu);
  const size_t outAt = inPlace ? 0 : inBytes;
  uint8_t* host = stager().hostBuffer(std::max<size_t>(1, outAt + outBytes));
  std::vector<cuda::StagedPiece> pieces(1);
  pieces[0] = {memory.device, 0, inBytes, in, nullptr, entry.get()};
  stager().toHost(cuda::planRuns(pieces).at(0), pieces, host);
  collective(host, host + outAt);
  pieces[0] = {memory.device, outAt, outBytes, nullptr, out, entry.get()};
  stager().fromHost(cuda::planRuns(pieces).at(0), pieces, host);
}

// The device each communicator's path was made for on this rank (guarded
// by gStagerMu). A communicator made later at the same address has no path
// yet (devicePathText() is empty), and its first call replaces the entry.
std::map<const api::CommunicatorImpl*, int> gPathDevice;

// The device path of `comm` for this call (null: host staging), agreed on
// every rank; gStagerMu held.
cuda::DeviceCollectives* pathFor(Communicator& comm, const char* operation, int device) {
  auto* impl = dynamic_cast<api::CommunicatorImpl*>(&comm);
  if (impl == nullptr) return nullptr;
  const std::string text = impl->devicePathText();
  if (text.empty()) {  // the first call (or a failed one: it throws again)
    cuda::DeviceCollectives* path = impl->deviceCollectives(device);
    gPathDevice[impl] = device;
    if (path != nullptr) stager().keepDeviceMemory();  // its peers may map them
    return path;
  }
  if (text == "staged") return nullptr;
  auto bound = gPathDevice.find(impl);
  const int mine[2] = {device, bound == gPathDevice.end() ? device : bound->second};
  std::vector<int32_t> all(2 * static_cast<size_t>(comm.size()));
  AllgatherOptions ag;
  ag.send = mine;
  ag.recv = all.data();
  ag.count = 2;
  ag.dtype = DataType::kInt32;
  comm.allgather(ag);
  for (int q = 0; q < comm.size(); ++q) {
    if (all[2 * q] == all[2 * q + 1]) continue;
    KOLO_THROW(ErrorCode::kInvalidArgument,
               operation << " on CUDA device memory: rank " << q
                         << "'s buffers are on CUDA device " << all[2 * q] << ", but the "
                         << text << " device path of rank " << q << " serves CUDA device "
                         << all[2 * q + 1]
                         << " (the device of its first call on this communicator)");
  }
  return impl->deviceCollectives(device);
}

// Runs `collective(path, stream)` on the device path when `comm` has one
// (true), after the caller's stream's work before the call, and returns
// once the device output `out` is written; false: the caller stages.
// gStagerMu is held for the whole call, so the calls of several threads
// reach the path (and its device agreement) one at a time.
template <typename Fn>
bool onPath(Communicator& comm, const char* operation, const CudaMemory& memory,
            const void* in, size_t inBytes, void* out, Fn&& collective) {
  std::lock_guard<std::mutex> lock(gStagerMu);
  cuda::DeviceCollectives* path = pathFor(comm, operation, memory.device);
  if (path == nullptr) return false;
  KOLO_LOG(kDebug) << operation << " on CUDA device memory: the " << path->name()
                   << " path";
  auto entry = cuda::DeviceEntry::record(operation, memory.device, memory.stream);
  std::vector<cuda::StagedPiece> pieces(1);
  pieces[0] = {memory.device, 0, inBytes, in, out, entry.get()};
  const cuda::StagingRun run{memory.device, 0, 1, 0, inBytes};
  stager().gather(run, pieces);
  collective(*path, stager().stream(memory.device));
  stager().scatter(run, pieces, out);
  return true;
}

// NCCL usable as a backend by this build, as Horovod's nccl_built answers
// for a build with NCCL: a build with CUDA where libnccl.so.2 loads with
// every entry point the NCCL path calls, at a version it accepts
// (nccl_collectives.h); NCCL's version code, else 0. Whether this machine
// has a device is the devices count's question. Loading the library
// creates no CUDA context.
int ncclUsableVersion() {
  if (!cuda::built()) return 0;
  try {
    const cuda::NcclLibrary& nccl = cuda::NcclLibrary::load();
    const int version = nccl.version();
    const bool usable = version >= cuda::kNcclMinimumVersion &&
                        nccl.commInitRankConfig != nullptr &&
                        nccl.commFinalize != nullptr;
    return usable ? version : 0;
  } catch (const Error&) {
    return 0;
  }
}

}  // namespace

CudaSupport cudaSupport() {
  CudaSupport support;
  support.built = cuda::built();
  support.devices = cuda::probeDevices().count;
  support.reason = cuda::probeDevices().reason;
  support.ncclVersion = ncclUsableVersion();
  return support;
}

void allreduce(Communicator& comm, const AllreduceOptions& options,
               const CudaMemory& memory) {
  cuda::checkDevice("allreduce", memory.device);
  if (options.segmentCount > 0) {
    KOLO_THROW(
        ErrorCode::kInvalidArgument,
        "allreduce on CUDA device memory: the segmented form takes host memory only");
  }
  const size_t bytes = options.count * elementSize(options.dtype);
  if (onPath(comm, "allreduce", memory, options.send, bytes, options.recv,
             [&](cuda::DeviceCollectives& path, void* stream) {
               path.allreduce(options.send, options.recv, options.count, options.dtype,
                              options.op, stream);
             })) {
    return;
  }
  staged("allreduce", memory, options.send, bytes, options.recv, bytes, false,
         [&](void* in, void* out) {
           AllreduceOptions o = options;
           o.send = in;
           o.recv = out;
           comm.allreduce(o);
         });
}

void broadcast(Communicator& comm, const BroadcastOptions& options,
               const CudaMemory& memory) {
  cuda::checkDevice("broadcast", memory.device);
  const size_t bytes = options.count * elementSize(options.dtype);
  if (onPath(comm, "broadcast", memory, options.buffer, bytes, options.buffer,
             [&](cuda::DeviceCollectives& path, void* stream) {
               path.broadcast(options.buffer, options.count, options.dtype, options.root,
                              stream);
             })) {
    return;
  }
  // Every rank copies its buffer in (the root's data, the others' to be
  // overwritten), so the copy back writes every byte the collective wrote.
  staged("broadcast", memory, options.buffer, bytes, options.buffer, bytes, true,
         [&](void* in, void*) {
           BroadcastOptions o = options;
           o.buffer = in;
           comm.broadcast(o);
         });
}

void allgather(Communicator& comm, const AllgatherOptions& options,
               const CudaMemory& memory) {
  cuda::checkDevice("allgather", memory.device);
  const size_t esize = elementSize(options.dtype);
  const bool varying = !options.counts.empty();
  if (varying && options.counts.size() != static_cast<size_t>(comm.size())) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "allgather on CUDA device memory: "
                                                << options.counts.size() << " counts for "
                                                << comm.size() << " ranks");
  }
  const size_t sendCount = varying ? options.counts[comm.rank()] : options.count;
  const size_t recvCount =
      varying ? std::accumulate(options.counts.begin(), options.counts.end(), size_t{0})
              : options.count * comm.size();
  if (onPath(comm, "allgather", memory, options.send, sendCount * esize, options.recv,
             [&](cuda::DeviceCollectives& path, void* stream) {
               path.allgather(options.send, options.recv,
                              varying ? options.counts
                                      : std::vector<size_t>(comm.size(), options.count),
                              options.dtype, stream);
             })) {
    return;
  }
  staged("allgather", memory, options.send, sendCount * esize, options.recv,
         recvCount * esize, false, [&](void* in, void* out) {
           AllgatherOptions o = options;
           o.send = in;
           o.recv = out;
           comm.allgather(o);
         });
}

void reduceScatter(Communicator& comm, const ReduceScatterOptions& options,
                   const CudaMemory& memory) {
  cuda::checkDevice("reduce_scatter", memory.device);
  const size_t esize = elementSize(options.dtype);
  if (onPath(comm, "reduce_scatter", memory, options.send,
             options.recvCount * comm.size() * esize, options.recv,
             [&](cuda::DeviceCollectives& path, void* stream) {
               path.reduceScatter(options.send, options.recv,
                                  std::vector<size_t>(comm.size(), options.recvCount),
                                  options.dtype, options.op, stream);
             })) {
    return;
  }
  staged("reduce_scatter", memory, options.send, options.recvCount * comm.size() * esize,
         options.recv, options.recvCount * esize, false, [&](void* in, void* out) {
           ReduceScatterOptions o = options;
           o.send = in;
           o.recv = out;
           comm.reduceScatter(o);
         });
}

void alltoall(Communicator& comm, const AlltoallOptions& options,
              const CudaMemory& memory) {
  cuda::checkDevice("alltoall", memory.device);
  const size_t bytes = options.countPerRank * comm.size() * elementSize(options.dtype);
  if (onPath(comm, "alltoall", memory, options.send, bytes, options.recv,
             [&](cuda::DeviceCollectives& path, void* stream) {
               const std::vector<size_t> counts(comm.size(), options.countPerRank);
               path.alltoall(options.send, counts, options.recv, counts, options.dtype,
                             stream);
             })) {
    return;
  }
  staged("alltoall", memory, options.send, bytes, options.recv, bytes, false,
         [&](void* in, void* out) {
           AlltoallOptions o = options;
           o.send = in;
           o.recv = out;
           comm.alltoall(o);
         });
}

}  // namespace kolo

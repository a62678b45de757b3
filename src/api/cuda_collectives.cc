// kolo/cuda_communicator.h: the device-memory forms of the collectives, on
// the host-staged path (collectives/cuda/device_staging.h, docs/gpu.md):
// the inputs are copied into pinned host memory after the work already on
// the caller's stream (an event recorded there), the CPU collective runs,
// and the results are copied back; the call returns once they are in the
// device outputs. The checks a caller can act on (the build, the device,
// the device number) come first and are local: every rank given the same
// arguments gives the same answer, so no rank is left waiting in a
// collective.
#include <kolo/cuda_communicator.h>

#include <mutex>
#include <numeric>

#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/device_staging.h"
#include "common/check.h"

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

}  // namespace

CudaSupport cudaSupport() {
  CudaSupport support;
  support.built = cuda::built();
  support.devices = cuda::probeDevices().count;
  support.reason = cuda::probeDevices().reason;
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
  staged("alltoall", memory, options.send, bytes, options.recv, bytes, false,
         [&](void* in, void* out) {
           AlltoallOptions o = options;
           o.send = in;
           o.recv = out;
           comm.alltoall(o);
         });
}

}  // namespace kolo

// Host staging (device_staging.h) in a build with CUDA.
//
// Order of one staged collective, per device run:
//   caller's stream:  ... work producing the inputs ... [ready event]
//   kolo's stream:    wait(ready) per piece -> D2D gather into the device
//                     fusion buffer -> ONE D2H into pinned host memory
//   host:             cudaStreamSynchronize(kolo's stream), the CPU collective
//   kolo's stream:    ONE H2D -> D2D scatter to the outputs -> [done events]
//   host:             cudaEventSynchronize(last done), the handle completes
// Only kolo's own stream and events are waited on: never the device, never
// the caller's stream from the host.
#include "collectives/cuda/device_staging.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/device_reduce.h"
#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/device_scope.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

void check(cudaError_t e, const char* what, int device) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    KOLO_THROW(ErrorCode::kInternal, "host staging: " << what << " on CUDA device "
                                                      << device
                                                      << " failed: " << cudaErrorText(e));
  }
}

// The run's bytes at `src` (device memory) copied to each piece's output
// (none where the output is `src` itself: a run of one written in place),
// each piece's done event recorded on `stream`; returns once the last one
// has run (or the stream has, when no piece has an event).
void scatterAndSignal(const StagingRun& run, const std::vector<StagedPiece>& pieces,
                      const void* src, cudaStream_t stream) {
  size_t at = 0;
  cudaEvent_t last = nullptr;
  for (size_t i = run.first; i < run.first + run.count; ++i) {
    const StagedPiece& p = pieces[i];
    const auto* from = static_cast<const uint8_t*>(src) + at;
    if (p.bytes > 0 && p.output != nullptr && p.output != from) {
      check(cudaMemcpyAsync(p.output, from, p.bytes, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync from the device fusion buffer", run.device);
    }
    at += p.bytes;
    const auto* entry = static_cast<const DeviceEntry*>(p.entry);
    if (entry != nullptr) {
      last = static_cast<cudaEvent_t>(entry->doneEvent());
      check(cudaEventRecord(last, stream), "cudaEventRecord of the done event",
            run.device);
    }
  }
  if (last != nullptr) {
    check(cudaEventSynchronize(last), "cudaEventSynchronize on the done event",
          run.device);
  } else {
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize on kolo's stream",
          run.device);
  }
}

}  // namespace

void checkDevice(const std::string& operation, int device) {
  const std::string what = operation + " on CUDA device memory";
  if (device < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": device " << device << " is not a CUDA device ordinal");
  }
  const DeviceProbe& probe = probeDevices();
  if (probe.count == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": no CUDA device: " << probe.reason);
  }
  if (device >= probe.count) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": CUDA device " << device
                                                 << " does not exist (" << probe.count
                                                 << " devices)");
  }
}

std::shared_ptr<DeviceEntry> DeviceEntry::record(const std::string& operation, int device,
                                                 void* stream) {
  checkDevice(operation, device);
  std::shared_ptr<DeviceEntry> entry(new DeviceEntry(device, stream));
  DeviceScope scope(device, "host staging");
  cudaEvent_t ready = nullptr, done = nullptr;
  check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate",
        device);
  entry->ready_ = ready;
  check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate",
        device);
  entry->done_ = done;
  check(cudaEventRecord(ready, static_cast<cudaStream_t>(stream)),
        "cudaEventRecord on the caller's stream", device);
  return entry;
}

DeviceEntry::~DeviceEntry() {
  if (ready_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ready_));
  if (done_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(done_));
}

struct DeviceStager::Impl {
  struct PerDevice {
    cudaStream_t stream = nullptr;
    void* fusion = nullptr;  // device fusion buffer
    size_t fusionBytes = 0;
  };
  std::map<int, PerDevice> devices;
  bool keep = false;     // keepDeviceMemory()
  void* host = nullptr;  // pinned
  size_t hostBytes = 0;

  PerDevice& on(int device, size_t fusionBytes) {
    PerDevice& d = devices[device];
    if (d.stream == nullptr) {
      check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking),
            "cudaStreamCreate", device);
    }
    if (d.fusionBytes < fusionBytes) {
      if (d.fusion != nullptr) {
        // The stream's earlier copies used it: let them end first.
        check(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize", device);
        if (keep) {
          // Peers of a device path may still map it: never freed (and
          // doubled, so that few are kept).
          fusionBytes = std::max(fusionBytes, 2 * d.fusionBytes);
        } else {
          check(cudaFree(d.fusion), "cudaFree", device);
        }
        d.fusion = nullptr;
        d.fusionBytes = 0;
      }
      check(cudaMalloc(&d.fusion, fusionBytes), "cudaMalloc of the device fusion buffer",
            device);
      d.fusionBytes = fusionBytes;
    }
    return d;
  }

  ~Impl() {
    int previous = 0;
    const bool restore = cudaGetDevice(&previous) == cudaSuccess;
    for (auto& [device, d] : devices) {
      (void)cudaSetDevice(device);
      if (d.stream != nullptr) (void)cudaStreamSynchronize(d.stream);
      if (d.fusion != nullptr && !keep) (void)cudaFree(d.fusion);
      if (d.stream != nullptr) (void)cudaStreamDestroy(d.stream);
    }
    if (host != nullptr) (void)cudaFreeHost(host);
    if (restore) (void)cudaSetDevice(previous);
  }
};

DeviceStager::DeviceStager() : impl_(std::make_unique<Impl>()) {}
DeviceStager::~DeviceStager() = default;

uint8_t* DeviceStager::hostBuffer(size_t bytes) {
  if (impl_->hostBytes < bytes) {
    if (impl_->host != nullptr) {
      check(cudaFreeHost(impl_->host), "cudaFreeHost", -1);
      impl_->host = nullptr;
      impl_->hostBytes = 0;
    }
    // Grown by half again, so a slowly growing workload reallocates rarely.
    const size_t grown = bytes + bytes / 2;
    check(cudaHostAlloc(&impl_->host, grown, cudaHostAllocPortable),
          "cudaHostAlloc of the pinned staging buffer", -1);
    impl_->hostBytes = grown;
  }
  return static_cast<uint8_t*>(impl_->host);
}

void DeviceStager::toHost(const StagingRun& run, const std::vector<StagedPiece>& pieces,
                          uint8_t* host) {
  DeviceScope scope(run.device, "host staging");
  const bool direct = run.count == 1;
  Impl::PerDevice& d = impl_->on(run.device, direct ? 0 : run.bytes);
  size_t at = 0;
  for (size_t i = run.first; i < run.first + run.count; ++i) {
    const StagedPiece& p = pieces[i];
    const auto* entry = static_cast<const DeviceEntry*>(p.entry);
    if (entry != nullptr) {
      check(
          cudaStreamWaitEvent(d.stream, static_cast<cudaEvent_t>(entry->readyEvent()), 0),
          "cudaStreamWaitEvent on the input's ready event", run.device);
    }
    if (!direct && p.bytes > 0) {
      check(cudaMemcpyAsync(static_cast<uint8_t*>(d.fusion) + at, p.input, p.bytes,
                            cudaMemcpyDeviceToDevice, d.stream),
            "cudaMemcpyAsync into the device fusion buffer", run.device);
    }
    at += p.bytes;
  }
  if (run.bytes > 0) {
    const void* src = direct ? pieces[run.first].input : d.fusion;
    check(cudaMemcpyAsync(host + run.offset, src, run.bytes, cudaMemcpyDefault, d.stream),
          "cudaMemcpyAsync to pinned host memory", run.device);
  }
  check(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize on kolo's stream",
        run.device);
}

void DeviceStager::fromHost(const StagingRun& run, const std::vector<StagedPiece>& pieces,
                            const uint8_t* host) {
  DeviceScope scope(run.device, "host staging");
  const bool direct = run.count == 1;
  Impl::PerDevice& d = impl_->on(run.device, direct ? 0 : run.bytes);
  void* dst = direct ? pieces[run.first].output : d.fusion;
  if (run.bytes > 0) {
    check(cudaMemcpyAsync(dst, host + run.offset, run.bytes, cudaMemcpyDefault, d.stream),
          "cudaMemcpyAsync from pinned host memory", run.device);
  }
  scatterAndSignal(run, pieces, dst, d.stream);
}

void DeviceStager::keepDeviceMemory() {
  impl_->keep = true;
}

void* DeviceStager::stream(int device) {
  DeviceScope scope(device, "host staging");
  return impl_->on(device, 0).stream;
}

void* DeviceStager::deviceBuffer(int device, size_t bytes) {
  DeviceScope scope(device, "host staging");
  return impl_->on(device, std::max<size_t>(bytes, 1)).fusion;
}

const void* DeviceStager::gather(const StagingRun& run,
                                 const std::vector<StagedPiece>& pieces) {
  DeviceScope scope(run.device, "host staging");
  const bool direct = run.count == 1;
  Impl::PerDevice& d = impl_->on(run.device, direct ? 0 : std::max<size_t>(run.bytes, 1));
  size_t at = 0;
  for (size_t i = run.first; i < run.first + run.count; ++i) {
    const StagedPiece& p = pieces[i];
    const auto* entry = static_cast<const DeviceEntry*>(p.entry);
    if (entry != nullptr) {
      check(
          cudaStreamWaitEvent(d.stream, static_cast<cudaEvent_t>(entry->readyEvent()), 0),
          "cudaStreamWaitEvent on the input's ready event", run.device);
    }
    if (!direct && p.bytes > 0) {
      check(cudaMemcpyAsync(static_cast<uint8_t*>(d.fusion) + at, p.input, p.bytes,
                            cudaMemcpyDeviceToDevice, d.stream),
            "cudaMemcpyAsync into the device fusion buffer", run.device);
    }
    at += p.bytes;
  }
  return direct ? pieces[run.first].input : d.fusion;
}

void DeviceStager::scatter(const StagingRun& run, const std::vector<StagedPiece>& pieces,
                           const void* src) {
  DeviceScope scope(run.device, "host staging");
  scatterAndSignal(run, pieces, src, impl_->on(run.device, 0).stream);
}

void DeviceStager::copy(int device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceScope scope(device, "host staging");
  Impl::PerDevice& d = impl_->on(device, 0);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, d.stream),
        "cudaMemcpyAsync on kolo's stream", device);
}

void DeviceStager::scale(int device, void* buf, size_t count, DataType dtype,
                         double factor) {
  DeviceScope scope(device, "host staging");
  scaleInPlace(buf, count, dtype, factor, impl_->on(device, 0).stream);
}

void DeviceStager::divide(int device, void* buf, size_t count, DataType dtype,
                          double divisor) {
  DeviceScope scope(device, "host staging");
  divideInPlace(buf, count, dtype, divisor, impl_->on(device, 0).stream);
}

void DeviceStager::synchronize(int device) {
  DeviceScope scope(device, "host staging");
  check(cudaStreamSynchronize(impl_->on(device, 0).stream),
        "cudaStreamSynchronize on kolo's stream", device);
}

}  // namespace kolo::collectives::cuda

// The memory and device of tests/cuda_ipc_check.cc: the host double of the
// device (ipc_host_device.h) or a CUDA device, behind one interface, so
// that one program checks the CUDA IPC collectives on either. For tests.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/cuda/ipc_collectives.h"

namespace kolo::test {

class CheckMemory {
 public:
  virtual ~CheckMemory() = default;
  virtual int device() const = 0;
  // `bytes` of device memory; !exportable: memory whose IPC export fails
  // (host double: heap memory; CUDA: cudaMallocAsync pool memory).
  virtual void* alloc(size_t bytes, bool exportable) = 0;
  // Host -> device before a collective; device -> host after one (both
  // ordered after the stream's work).
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual std::vector<uint8_t> download(const void* src, size_t bytes) = 0;
  virtual void* stream() = 0;
  // Frees everything alloc() gave.
  virtual void freeAll() = 0;
  virtual std::unique_ptr<collectives::cuda::DeviceCollectives> makeCollectives(
      const collectives::cuda::IpcOptions& options, rendezvous::Store& store) = 0;
};

std::unique_ptr<CheckMemory> hostCheckMemory();
// Null, with `why`, without a CUDA device (or a build without CUDA).
std::unique_ptr<CheckMemory> cudaCheckMemory(int rank, std::string* why);

// Small whole values, different per rank, element and salt, some negative
// (not uint8): sums, products and averages of up to 3 ranks are exact or
// rounded once, whatever the order.
std::vector<uint8_t> smallValues(DataType dtype, size_t count, int rank, int salt);
// A fresh directory private to this user (a file store for one rank).
std::string privateTempDir();

// CUDA only (host memory: nothing): the reduceToMany kernel against the
// CPU kernels, every dtype and op (rank 0); returns the failures.
int checkKernelOnDevice(CheckMemory& memory, int rank, int* checks);
// CUDA only: 256 MiB float32 allreduce through `ipc` against the device's
// device-to-device copy; rank 0 prints the figures under `label`.
void benchAllreduce(collectives::cuda::DeviceCollectives& ipc, CheckMemory& memory,
                    int rank, const char* label);

}  // namespace kolo::test

// The NCCL path's DeviceCollectives (nccl_collectives.h), for its two
// source files: nccl_communicator.cc (init, the wait, the errors, the end)
// and nccl_operations.cc (the collectives). CUDA build only; plain C++
// (the cudaEvent_t is held as void*).
#pragma once

#include <kolo/error.h>

#include <chrono>
#include <optional>
#include <string>

#include "collectives/cuda/nccl_communicator.h"

namespace kolo::collectives::cuda {

// One collective, for messages.
struct NcclCall {
  const char* name = "";
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int op = -1;    // a ReduceOp, -1 for none
  int root = -1;  // -1 for none
  std::string describe() const;
};

// Makes `device` current on this thread while it lives; throws
// Error(kInternal) starting with `who` when the device cannot be set.
class NcclDeviceGuard {
 public:
  NcclDeviceGuard(int device, const std::string& who);
  ~NcclDeviceGuard();
  NcclDeviceGuard(const NcclDeviceGuard&) = delete;
  NcclDeviceGuard& operator=(const NcclDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// ncclGetErrorString(result), with ncclGetLastError's text where NCCL has it.
std::string ncclErrorText(const NcclLibrary& nccl, NcclLibrary::Result result,
                          NcclLibrary::Comm comm);

class NcclCommunicator final : public DeviceCollectives {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes an initialized communicator and an event (cudaEvent_t) on
  // options.device; destroys both.
  NcclCommunicator(const NcclLibrary& nccl, const NcclOptions& options,
                   NcclLibrary::Comm comm, void* event);
  ~NcclCommunicator() override;

  std::string_view name() const override { return "nccl"; }
  int device() const override { return options_.device; }
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                 void* stream) override;
  void broadcast(void* buffer, size_t count, DataType dtype, int root,
                 void* stream) override;
  void allgather(const void* send, void* recv, const std::vector<size_t>& counts,
                 DataType dtype, void* stream) override;
  void reduceScatter(const void* send, void* recv, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, void* stream) override;
  void alltoall(const void* send, const std::vector<size_t>& sendCounts, void* recv,
                const std::vector<size_t>& recvCounts, DataType dtype,
                void* stream) override;

 private:
  // nccl_communicator.cc
  void finalize();
  void throwIfBroken() const;
  // Aborts the communicator, keeps the error for later calls, throws it.
  [[noreturn]] void breakWith(ErrorCode code, const std::string& message);
  [[noreturn]] void asyncFailure(const NcclCall& call, NcclLibrary::Result state);
  [[noreturn]] void timedOut(const NcclCall& call);
  // ncclCommGetAsyncError: ncclSuccess or ncclInProgress; an error breaks.
  NcclLibrary::Result asyncState(const NcclCall& call);
  // The result of an enqueueing call (or ncclGroupEnd): waits out
  // ncclInProgress; an error breaks.
  void enqueued(NcclLibrary::Result result, const NcclCall& call,
                Clock::time_point deadline);
  // Records the event on `stream` and polls it (and NCCL's async error)
  // until the work before it is done.
  void waitDone(const NcclCall& call, void* stream, Clock::time_point deadline);

  // nccl_operations.cc
  // Checks, makes the device current, runs enqueue(deadline) (the NCCL
  // calls), waits until done; average divides the result afterwards.
  template <typename Enqueue>
  void run(const NcclCall& call, void* stream, Enqueue&& enqueue);
  // ncclGroupStart, each call, ncclGroupEnd: the first failure among the
  // calls breaks after the group is closed.
  template <typename Calls>
  void grouped(const NcclCall& call, Clock::time_point deadline, Calls&& calls);
  void divideBySize(void* buffer, size_t count, DataType dtype, const NcclCall& call,
                    void* stream);

  const NcclLibrary& nccl_;
  NcclOptions options_;
  NcclLibrary::Comm comm_ = nullptr;  // null once aborted or finalized
  void* event_ = nullptr;             // cudaEvent_t
  std::string self_;                  // "rank G"
  std::optional<Error> broken_;
};

}  // namespace kolo::collectives::cuda

// The NCCL path's DeviceCollectives (nccl_collectives.h), for its two
// source files: nccl_communicator.cc (the wait, the errors, the end) and
// nccl_operations.cc (which NCCL calls run each collective), and for the
// tests that drive it with a stand-in NCCL and stand-in device operations.
// Plain C++: CUDA is behind NcclDeviceOps (nccl_device_ops.h).
#pragma once

#include <kolo/error.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "collectives/cuda/nccl_communicator.h"
#include "collectives/cuda/nccl_device_ops.h"

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

class NcclCommunicator final : public DeviceCollectives {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes an initialized communicator and the device operations of
  // options.device; finalizes (or aborts) and destroys the communicator.
  NcclCommunicator(const NcclLibrary& nccl, const NcclOptions& options,
                   NcclLibrary::Comm comm, std::unique_ptr<NcclDeviceOps> ops);
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
  [[noreturn]] void ncclFailure(const NcclCall& call, NcclLibrary::Result state);
  [[noreturn]] void deviceFailure(const NcclCall& call, const std::string& error);
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
  // Makes the device current, runs enqueue(deadline) (the NCCL calls),
  // waits until done.
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
  std::unique_ptr<NcclDeviceOps> ops_;
  std::string self_;  // "rank G"
  std::optional<Error> broken_;
};

}  // namespace kolo::collectives::cuda

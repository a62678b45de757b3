// One asynchronous kernel invocation in flight in kolo's runtime.
//
// Contract
// - Made by a kernel's ComputeAsync with its context and done callback; it
//   owns itself from then on and deletes itself after calling done().
// - submitted(rc, handle) records each kolo submission (its C API result);
//   a failed submission sets the op's status from kolo_last_error() and
//   ends the op once start() is called. The op's inputs and outputs, and
//   any buffer kept with keep(), stay alive until done() (TensorFlow keeps
//   a context's tensors until then).
// - start(finish) waits for every recorded handle without blocking: it asks
//   kolo for a callback on each (kolo_handle_notify), and when the last one
//   has ended runs the rest on one of TensorFlow's CPU worker threads: the
//   first failed handle's error becomes the op's status; else finish()
//   reads the outputs (kolo_handle_output) and returns the status. Then
//   every handle is released and done() called. No thread of kolo's runs
//   TensorFlow code: the runtime's thread only counts down and schedules.
// - Errors map to TensorFlow's codes as Horovod's do: ranks that disagree
//   (kolo MismatchError) and calls before init -> FailedPrecondition, bad
//   arguments -> InvalidArgument, a lost or silent peer -> Unavailable /
//   DeadlineExceeded, the rest -> Internal. Messages start with kolo's
//   error name (e.g. "PeerLostError: ...") so that kolo.tensorflow can turn
//   them back into kolo's exception classes.
#pragma once

#include <kolo/runtime.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"

namespace kolo::tf {

// TensorFlow's status for kolo code `rc` (not KOLO_OK), with `message`.
absl::Status statusFor(int rc, const std::string& message);

class PendingOp {
 public:
  using Finish = std::function<absl::Status()>;

  PendingOp(::tensorflow::OpKernelContext* ctx,
            ::tensorflow::AsyncOpKernel::DoneCallback done);
  PendingOp(const PendingOp&) = delete;
  PendingOp& operator=(const PendingOp&) = delete;

  // Records one submission; false (and the op failed) when rc != KOLO_OK.
  bool submitted(int rc, kolo_handle handle);
  // Fails the op with a status of the kernel's own (before start()).
  void fail(const absl::Status& status);
  bool failed() const { return !status_.ok(); }

  // Buffers that must live until the op ends (widened or padded copies).
  std::vector<uint8_t>& keep(size_t bytes);

  // See the contract above. The op is deleted before start() returns or
  // later; its caller must not touch it afterwards.
  void start(Finish finish);

  // For finish(): the output kolo allocated for handle i (allgather,
  // alltoall, reducescatter).
  absl::Status output(size_t i, const void** data, size_t* bytes,
                      std::vector<int64_t>* shape) const;

 private:
  static void onHandleDone(void* self);
  void end();  // on a TensorFlow worker thread

  ::tensorflow::OpKernelContext* const ctx_;
  ::tensorflow::AsyncOpKernel::DoneCallback done_;
  std::vector<kolo_handle> handles_;
  std::vector<std::vector<uint8_t>> buffers_;
  absl::Status status_;
  Finish finish_;
  std::atomic<size_t> remaining_{0};
};

}  // namespace kolo::tf

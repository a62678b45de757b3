#include "pending_op.h"

#include <kolo/kolo.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/platform/errors.h"
#include "tensorflow/core/platform/threadpool.h"

namespace kolo::tf {

using absl::Status;

Status statusFor(int rc, const std::string& message) {
  switch (rc) {
    case KOLO_OK: return absl::OkStatus();
    case KOLO_ERR_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(absl::StrCat("InvalidArgumentError: ", message));
    case KOLO_ERR_NOT_INITIALIZED:
      return absl::FailedPreconditionError(
          absl::StrCat("NotInitializedError: ", message));
    case KOLO_ERR_MISMATCH:
      return absl::FailedPreconditionError(absl::StrCat("MismatchError: ", message));
    case KOLO_ERR_PEER_LOST:
      return absl::UnavailableError(absl::StrCat("PeerLostError: ", message));
    case KOLO_ERR_TIMEOUT:
      return absl::DeadlineExceededError(absl::StrCat("KoloTimeoutError: ", message));
    default: return absl::InternalError(absl::StrCat("KoloError: ", message));
  }
}

PendingOp::PendingOp(::tensorflow::OpKernelContext* ctx,
                     ::tensorflow::AsyncOpKernel::DoneCallback done)
    : ctx_(ctx), done_(std::move(done)) {}

bool PendingOp::submitted(int rc, kolo_handle handle) {
  if (rc != KOLO_OK) {
    if (status_.ok()) status_ = statusFor(rc, kolo_last_error());
    return false;
  }
  handles_.push_back(handle);
  return true;
}

void PendingOp::fail(const Status& status) {
  if (status_.ok()) status_ = status;
}

std::vector<uint8_t>& PendingOp::keep(size_t bytes) {
  buffers_.emplace_back(bytes);
  return buffers_.back();
}

void PendingOp::start(Finish finish) {
  finish_ = std::move(finish);
  // One count more than there are handles, dropped below: a callback run
  // at once (a handle already done) cannot end the op while handles are
  // still being registered.
  remaining_.store(handles_.size() + 1);
  for (kolo_handle h : handles_) {
    if (kolo_handle_notify(h, &PendingOp::onHandleDone, this) != KOLO_OK) {
      // Unknown handle: cannot happen for one just made; count it as ended
      // (end() reports kolo_wait's error for it).
      onHandleDone(this);
    }
  }
  onHandleDone(this);
}

void PendingOp::onHandleDone(void* self) {
  auto* op = static_cast<PendingOp*>(self);
  if (op->remaining_.fetch_sub(1) != 1) return;
  // The last one: the rest runs on TensorFlow's thread pool, never on the
  // runtime's thread (kolo's contract for the callback: be quick).
  op->ctx_->device()->tensorflow_cpu_worker_threads()->workers->Schedule(
      [op] { op->end(); });
}

void PendingOp::end() {
  for (kolo_handle h : handles_) {
    if (!status_.ok()) break;
    const int rc = kolo_wait(h);  // ended: returns at once
    if (rc != KOLO_OK) status_ = statusFor(rc, kolo_last_error());
  }
  if (status_.ok() && finish_) status_ = finish_();
  for (kolo_handle h : handles_) kolo_release(h);
  if (!status_.ok()) ctx_->SetStatus(status_);
  auto done = std::move(done_);
  delete this;
  done();
}

Status PendingOp::output(size_t i, const void** data, size_t* bytes,
                         std::vector<int64_t>* shape) const {
  int ndim = 0;
  const int64_t* dims = nullptr;
  const int rc = kolo_handle_output(handles_.at(i), data, bytes, &ndim, &dims);
  if (rc != KOLO_OK) return statusFor(rc, kolo_last_error());
  shape->assign(dims, dims + ndim);
  return absl::OkStatus();
}

}  // namespace kolo::tf

// The NCCL communicator of the NCCL path (nccl_collectives.h): its
// creation around the non-blocking init (nccl_init.h), and the watch that turns an NCCL
// or CUDA error, or a collective past KOLO_TIMEOUT, into an aborted communicator and a
// kolo::Error instead of a hang.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0): any call
// may return ncclInProgress while NCCL works in the background, and
// ncclCommGetAsyncError then says ncclInProgress until the work is
// enqueued (ncclSuccess) or failed; enqueued() polls it against the
// deadline. A collective then records the completion event (NcclDeviceOps) on the
// caller's stream behind NCCL's kernels, and waitDone() polls the event and the async
// error until the kernels finished (the contract's "returns once its
// outputs are written"), aborting on an error or at the deadline. Which
// NCCL calls run each collective: nccl_operations.cc.
#include "collectives/cuda/nccl_communicator_impl.h"

#include <sstream>
#include <thread>

#include "collectives/cuda/nccl_init.h"
#include "collectives/cuda/nccl_types.h"
#include "common/backoff.h"
#include "common/check.h"
#include "common/rank_text.h"

namespace kolo::collectives::cuda {
namespace {

std::string seconds(std::chrono::milliseconds timeout) {
  std::ostringstream os;
  os << timeout.count() / 1000.0 << " s";
  return os.str();
}

}  // namespace

std::string NcclCall::describe() const {
  std::ostringstream os;
  os << "NCCL " << name << " of " << count << " " << toString(dtype);
  if (op >= 0) os << " (" << toString(static_cast<ReduceOp>(op)) << ")";
  if (root >= 0) os << " from root " << root;
  return os.str();
}

NcclCommunicator::NcclCommunicator(const NcclLibrary& nccl, const NcclOptions& options,
                                   NcclLibrary::Comm comm,
                                   std::unique_ptr<NcclDeviceOps> ops)
    : nccl_(nccl), options_(options), comm_(comm), ops_(std::move(ops)) {
  self_ = rankText(options_.globalRanks.empty()
                       ? options_.rank
                       : options_.globalRanks[static_cast<size_t>(options_.rank)]);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  try {
    const int previous = ops_->enter(self_);
    finalize();
    ops_->leave(previous);
  } catch (...) {
    if (comm_ != nullptr) (void)nccl_.commAbort(comm_);
  }
}

// ncclCommFinalize flushes and waits (non-blocking: polled) for the peers
// to finish with this communicator, then ncclCommDestroy frees it without
// waiting; past the timeout the communicator is aborted instead.
void NcclCommunicator::finalize() {
  NcclLibrary::Comm comm = comm_;
  comm_ = nullptr;
  const auto deadline = Clock::now() + options_.timeout;
  NcclLibrary::Result state = nccl_.commFinalize(comm);
  Backoff backoff;
  while (state == nccl::kInProgress && Clock::now() < deadline) {
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
    if (nccl_.commGetAsyncError(comm, &state) != nccl::kSuccess) break;
  }
  if (state == nccl::kSuccess) {
    (void)nccl_.commDestroy(comm);
  } else {
    (void)nccl_.commAbort(comm);
  }
}

void NcclCommunicator::throwIfBroken() const {
  if (broken_) throw *broken_;
}

void NcclCommunicator::breakWith(ErrorCode code, const std::string& message) {
  if (comm_ != nullptr) {
    (void)nccl_.commAbort(comm_);
    comm_ = nullptr;
  }
  broken_ = Error(code, message);
  throw *broken_;
}

void NcclCommunicator::ncclFailure(const NcclCall& call, NcclLibrary::Result state) {
  breakWith(nccl::errorCodeOf(state),
            self_ + ": " + call.describe() + " on CUDA device " +
                std::to_string(options_.device) +
                " failed: NCCL reported: " + ncclErrorText(nccl_, state, comm_) +
                "; the NCCL communicator was aborted");
}

void NcclCommunicator::deviceFailure(const NcclCall& call, const std::string& error) {
  breakWith(ErrorCode::kInternal, self_ + ": " + call.describe() + " on CUDA device " +
                                      std::to_string(options_.device) + " failed: " +
                                      error + "; the NCCL communicator was aborted");
}

void NcclCommunicator::timedOut(const NcclCall& call) {
  breakWith(ErrorCode::kTimeout,
            self_ + ": " + call.describe() + " on CUDA device " +
                std::to_string(options_.device) + " not done after " +
                seconds(options_.timeout) +
                " (KOLO_TIMEOUT): a peer did not call it, or is stuck or gone; the NCCL "
                "communicator was aborted");
}

NcclLibrary::Result NcclCommunicator::asyncState(const NcclCall& call) {
  NcclLibrary::Result state = nccl::kSuccess;
  const NcclLibrary::Result result = nccl_.commGetAsyncError(comm_, &state);
  if (result != nccl::kSuccess) ncclFailure(call, result);
  if (state != nccl::kSuccess && state != nccl::kInProgress) ncclFailure(call, state);
  return state;
}

void NcclCommunicator::enqueued(NcclLibrary::Result result, const NcclCall& call,
                                Clock::time_point deadline) {
  if (result == nccl::kSuccess) return;
  if (result != nccl::kInProgress) ncclFailure(call, result);
  Backoff backoff;
  while (asyncState(call) == nccl::kInProgress) {
    if (Clock::now() >= deadline) timedOut(call);
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
  }
}

void NcclCommunicator::waitDone(const NcclCall& call, void* stream,
                                Clock::time_point deadline) {
  std::string error = ops_->record(stream);
  if (!error.empty()) deviceFailure(call, error);
  Backoff backoff;
  for (;;) {
    const NcclDeviceOps::Poll poll = ops_->poll(&error);
    if (poll == NcclDeviceOps::Poll::kDone) return;
    if (poll == NcclDeviceOps::Poll::kFailed) deviceFailure(call, error);
    (void)asyncState(call);
    if (Clock::now() >= deadline) timedOut(call);
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
  }
}

std::unique_ptr<DeviceCollectives> openNcclCommunicator(const NcclLibrary& nccl,
                                                        const NcclOptions& options,
                                                        const NcclLibrary::UniqueId& id,
                                                        NcclRendezvous& rendezvous) {
  const NcclGroup& group = rendezvous.group();
  const std::string what = group.self() + ": NCCL communicator '" + group.key + "' (" +
                           std::to_string(group.size) + " ranks, CUDA device " +
                           std::to_string(options.device) + ")";
  std::unique_ptr<NcclDeviceOps> ops = makeCudaDeviceOps(options.device);
  const int previous = ops->enter(what);
  NcclLibrary::Comm comm = nullptr;
  try {
    comm = initCommunicator(nccl, id, rendezvous, what);
  } catch (...) {
    ops->leave(previous);
    throw;
  }
  ops->leave(previous);
  return std::make_unique<NcclCommunicator>(nccl, options, comm, std::move(ops));
}

}  // namespace kolo::collectives::cuda

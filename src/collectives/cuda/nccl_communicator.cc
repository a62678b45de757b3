// The NCCL communicator of the NCCL path (nccl_collectives.h), in a build
// with CUDA: its non-blocking init, the collectives on the caller's stream,
// and the watch that turns an NCCL or CUDA error, or a collective past
// KOLO_TIMEOUT, into an aborted communicator and a kolo::Error instead of a
// hang.
//
// The communicator is made non-blocking (ncclConfig_t::blocking = 0):
// ncclCommInitRankConfig, and any later call, may return ncclInProgress
// while NCCL works in the background; ncclCommGetAsyncError then says
// ncclInProgress until the work is enqueued (ncclSuccess) or failed.
// settle() polls it against a deadline. A collective then records `event_`
// on the caller's stream behind NCCL's kernels, and waitDone() polls the
// event and the async error until the kernels finished (the contract's
// "returns once its outputs are written"), aborting on an error or at the
// deadline. The collectives' algorithms (which NCCL call runs what):
// nccl_operations.cc.
#include "collectives/cuda/nccl_communicator_impl.h"

#include <cuda_runtime_api.h>

#include <sstream>
#include <thread>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/nccl_types.h"
#include "common/backoff.h"
#include "common/check.h"
#include "common/rank_text.h"

namespace kolo::collectives::cuda {
namespace {

using Clock = std::chrono::steady_clock;

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

NcclDeviceGuard::NcclDeviceGuard(int device, const std::string& who) {
  cudaError_t e = cudaGetDevice(&previous_);
  if (e == cudaSuccess && previous_ != device) e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    KOLO_THROW(ErrorCode::kInternal,
               who << ": cudaSetDevice(" << device << ") failed: " << cudaErrorText(e));
  }
  restore_ = previous_ != device;
}

NcclDeviceGuard::~NcclDeviceGuard() {
  if (restore_) (void)cudaSetDevice(previous_);
}

std::string ncclErrorText(const NcclLibrary& nccl, NcclLibrary::Result result,
                          NcclLibrary::Comm comm) {
  std::string text = nccl.getErrorString(result);
  const char* last = nccl.getLastError ? nccl.getLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

NcclCommunicator::NcclCommunicator(const NcclLibrary& nccl, const NcclOptions& options,
                                   NcclLibrary::Comm comm, void* event)
    : nccl_(nccl), options_(options), comm_(comm), event_(event) {
  self_ = rankText(options_.globalRanks.empty()
                       ? options_.rank
                       : options_.globalRanks[static_cast<size_t>(options_.rank)]);
}

NcclCommunicator::~NcclCommunicator() {
  try {
    NcclDeviceGuard guard(options_.device, self_);
    if (comm_ != nullptr) finalize();
  } catch (...) {
    if (comm_ != nullptr) (void)nccl_.commAbort(comm_);
  }
  if (event_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

// ncclCommFinalize flushes and waits (non-blocking: polled) for the peers
// to finish with this communicator, then ncclCommDestroy frees it without
// waiting; past the timeout the communicator is aborted instead.
void NcclCommunicator::finalize() {
  NcclLibrary::Comm comm = comm_;
  comm_ = nullptr;
  const auto deadline = Clock::now() + options_.timeout;
  NcclLibrary::Result result = nccl_.commFinalize(comm);
  NcclLibrary::Result state = result;
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

void NcclCommunicator::asyncFailure(const NcclCall& call, NcclLibrary::Result state) {
  breakWith(nccl::errorCodeOf(state),
            self_ + ": " + call.describe() + " on CUDA device " +
                std::to_string(options_.device) +
                " failed: NCCL reported: " + ncclErrorText(nccl_, state, comm_) +
                "; the NCCL communicator was aborted");
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
  if (result != nccl::kSuccess) asyncFailure(call, result);
  if (state != nccl::kSuccess && state != nccl::kInProgress) asyncFailure(call, state);
  return state;
}

void NcclCommunicator::enqueued(NcclLibrary::Result result, const NcclCall& call,
                                Clock::time_point deadline) {
  if (result == nccl::kSuccess) return;
  if (result != nccl::kInProgress) asyncFailure(call, result);
  Backoff backoff;
  while (asyncState(call) == nccl::kInProgress) {
    if (Clock::now() >= deadline) timedOut(call);
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
  }
}

void NcclCommunicator::waitDone(const NcclCall& call, void* stream,
                                Clock::time_point deadline) {
  const auto event = static_cast<cudaEvent_t>(event_);
  cudaError_t e = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
  Backoff backoff;
  while (e == cudaSuccess || e == cudaErrorNotReady) {
    e = cudaEventQuery(event);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) break;
    (void)asyncState(call);
    if (Clock::now() >= deadline) timedOut(call);
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
  }
  (void)cudaGetLastError();
  breakWith(ErrorCode::kInternal, self_ + ": " + call.describe() + " on CUDA device " +
                                      std::to_string(options_.device) +
                                      " failed: " + cudaErrorText(e) +
                                      "; the NCCL communicator was aborted");
}

std::unique_ptr<DeviceCollectives> openNcclCommunicator(const NcclLibrary& nccl,
                                                        const NcclOptions& options,
                                                        const NcclLibrary::UniqueId& id,
                                                        NcclRendezvous& rendezvous) {
  const NcclGroup& group = rendezvous.group();
  const std::string what = group.self() + ": NCCL communicator '" + group.key + "' (" +
                           std::to_string(group.size) + " ranks, CUDA device " +
                           std::to_string(options.device) + ")";
  NcclDeviceGuard guard(options.device, what);
  NcclLibrary::Config config;
  config.blocking = 0;
  NcclLibrary::Comm comm = nullptr;
  NcclLibrary::Result state =
      nccl.commInitRankConfig(&comm, group.size, id, group.rank, &config);
  auto fail = [&](ErrorCode code, const std::string& why) {
    const std::string text = what + ": " + why;
    if (comm != nullptr) (void)nccl.commAbort(comm);
    throw Error(code, text);
  };
  Backoff backoff;
  while (state == nccl::kInProgress) {
    const NcclLibrary::Result result = nccl.commGetAsyncError(comm, &state);
    if (result != nccl::kSuccess) state = result;
    if (state != nccl::kInProgress) break;
    try {
      rendezvous.checkPeers();
    } catch (const Error&) {
      (void)nccl.commAbort(comm);
      throw;  // names the member that failed
    }
    if (Clock::now() >= rendezvous.deadline()) {
      fail(ErrorCode::kTimeout, "ncclCommInitRankConfig not done within " +
                                    seconds(options.timeout) +
                                    " (KOLO_TIMEOUT), though every rank had joined; "
                                    "the communicator was aborted");
    }
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
  }
  if (state != nccl::kSuccess) {
    fail(nccl::errorCodeOf(state),
         "ncclCommInitRankConfig failed: " + ncclErrorText(nccl, state, comm));
  }
  cudaEvent_t event = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::kInternal, "cudaEventCreateWithFlags failed: " + cudaErrorText(e));
  }
  return std::make_unique<NcclCommunicator>(nccl, options, comm, event);
}

}  // namespace kolo::collectives::cuda

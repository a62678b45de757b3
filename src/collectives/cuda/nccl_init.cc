// The non-blocking NCCL init, polled (nccl_init.h).
#include "collectives/cuda/nccl_init.h"

#include <sstream>
#include <thread>

#include "collectives/cuda/nccl_types.h"
#include "common/backoff.h"
#include "common/check.h"

namespace kolo::collectives::cuda {

std::string ncclErrorText(const NcclLibrary& nccl, NcclLibrary::Result result,
                          NcclLibrary::Comm comm) {
  std::string text = nccl.getErrorString(result);
  const char* last = nccl.getLastError ? nccl.getLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

NcclLibrary::Comm initCommunicator(const NcclLibrary& nccl,
                                   const NcclLibrary::UniqueId& id,
                                   NcclRendezvous& rendezvous, const std::string& what) {
  const NcclGroup& group = rendezvous.group();
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
    if (NcclRendezvous::Clock::now() >= rendezvous.deadline()) {
      std::ostringstream os;
      os << "ncclCommInitRankConfig not done within " << group.timeout.count() / 1000.0
         << " s (KOLO_TIMEOUT), though every rank had joined; the communicator was "
            "aborted";
      fail(ErrorCode::kTimeout, os.str());
    }
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
  }
  if (state != nccl::kSuccess) {
    fail(nccl::errorCodeOf(state),
         "ncclCommInitRankConfig failed: " + ncclErrorText(nccl, state, comm));
  }
  return comm;
}

}  // namespace kolo::collectives::cuda

// The NCCL path's availability and factory (nccl_collectives.h); compiled
// in every build: what needs CUDA is behind nccl_device_ops.h.
#include "collectives/cuda/nccl_collectives.h"

#include <functional>
#include <sstream>

#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/nccl_communicator.h"
#include "collectives/cuda/nccl_library.h"
#include "collectives/cuda/nccl_rendezvous.h"
#include "collectives/cuda/nccl_types.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

std::string versionText(int code) {
  std::ostringstream os;
  os << code / 10000 << "." << code / 100 % 100 << "." << code % 100;
  return os.str();
}

NcclAvailability askOnce() {
  return ncclAvailabilityOf(built(), probeDevices(),
                            []() -> const NcclLibrary& { return NcclLibrary::load(); });
}

// Step 1 of makeNcclCollectives: what can be told without the others.
void checkLocally(const NcclOptions& options, const NcclGroup& group) {
  const NcclAvailability available = ncclAvailability();
  if (available.version == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               group.self() << ": the NCCL path on CUDA device " << options.device
                            << " is unavailable: " << available.reason);
  }
  const int count = probeDevices().count;
  if (options.device < 0 || options.device >= count) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               group.self() << ": the NCCL path: CUDA device " << options.device
                            << " does not exist (" << count << " devices)");
  }
  if (options.timeout.count() <= 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               group.self() << ": the NCCL path: the timeout must be positive, got "
                            << options.timeout.count() << " ms");
  }
}

NcclLibrary::UniqueId makeUniqueId(const NcclLibrary& nccl, const NcclGroup& group) {
  NcclLibrary::UniqueId id{};
  const NcclLibrary::Result result = nccl.getUniqueId(&id);
  if (result != nccl::kSuccess) {
    const char* last = nccl.getLastError ? nccl.getLastError(nullptr) : nullptr;
    KOLO_THROW(nccl::errorCodeOf(result),
               group.self() << ": ncclGetUniqueId failed: " << nccl.getErrorString(result)
                            << (last && *last ? std::string(" (") + last + ")" : ""));
  }
  return id;
}

}  // namespace

NcclAvailability ncclAvailabilityOf(bool cudaBuilt, const DeviceProbe& devices,
                                    const std::function<const NcclLibrary&()>& load) {
  NcclAvailability out;
  if (!cudaBuilt) {
    out.reason =
        "this kolo build has no CUDA support (KOLO_WITH_CUDA was off or nvcc missing)";
    return out;
  }
  if (devices.count == 0) {
    out.reason = "no CUDA device: " + devices.reason;
    return out;
  }
  const NcclLibrary* nccl = nullptr;
  int version = 0;
  try {
    nccl = &load();
    version = nccl->version();
  } catch (const Error& e) {
    out.reason = e.what();
    return out;
  }
  if (version < kNcclMinimumVersion || nccl->commInitRankConfig == nullptr ||
      nccl->commFinalize == nullptr) {
    out.reason = "NCCL " + versionText(version) + " (" + nccl->path() +
                 ") is older than " + versionText(kNcclMinimumVersion) +
                 ", which kolo needs for a communicator init that cannot hang "
                 "(ncclCommInitRankConfig with blocking = 0, ncclCommFinalize)";
    return out;
  }
  out.version = version;
  return out;
}

NcclAvailability ncclAvailability() {
  static const NcclAvailability answer = askOnce();
  return answer;
}

std::unique_ptr<DeviceCollectives> makeNcclCollectives(const NcclOptions& options,
                                                       rendezvous::Store& store) {
  NcclGroup group{options.rank, options.size, options.globalRanks, options.key,
                  options.timeout};
  NcclRendezvous rendezvous(store, std::move(group),
                            NcclRendezvous::Clock::now() + options.timeout);
  try {
    checkLocally(options, rendezvous.group());
    rendezvous.join();
    const NcclLibrary& nccl = NcclLibrary::load();
    const NcclLibrary::UniqueId id =
        rendezvous.exchangeId([&] { return makeUniqueId(nccl, rendezvous.group()); });
    return openNcclCommunicator(nccl, options, id, rendezvous);
  } catch (const Error& e) {
    rendezvous.fail(e.what());
    throw;
  }
}

}  // namespace kolo::collectives::cuda

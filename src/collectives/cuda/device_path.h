// Which path runs a communicator's collectives on CUDA device memory
// (docs/gpu.md, "The paths"): each rank's device as it sees it, gathered
// once from every rank, and a pure choice from that and KOLO_DEVICE_PATH.
//
// The paths: staged (host staging, device_staging.h), ipc (CUDA IPC among
// the ranks of one host, transport/cuda_ipc/), nccl (NCCL, one rank per
// GPU), hier (ipc or nccl inside each host, the communicator's tcp or mpi
// transport between hosts: hier_collectives.h).
//
// KOLO_DEVICE_PATH=auto chooses, in this order:
//   - a rank without a usable CUDA device            -> staged
//   - one host:
//       ranks sharing a GPU                            -> ipc, else staged
//       one rank per GPU                               -> nccl, else ipc, else staged
//   - several hosts:
//       one rank per GPU (no GPU shared in the job)    -> nccl if available
//       else, some host holding several ranks          -> hier, else staged
// where "nccl" needs NCCL usable on every rank and no two ranks on one
// GPU (NCCL refuses "Duplicate GPU"; a GPU is its UUID, so ranks on pretend
// hosts of one machine count as sharing), "ipc" needs every rank able to
// take part (ipcUnusable empty) and, between any two GPUs of a host used by
// its ranks, peer access both ways. hier's intra-host part is nccl when no
// host has two ranks on one GPU and NCCL is usable everywhere, else ipc.
// A forced path (staged, ipc, nccl, hier) that cannot run is an error
// naming why; staged always runs.
//
// Contract
// - chooseDevicePath is pure: the same DeviceTopology gives the same
//   choice, or the same error, on every rank. It throws Error(kMismatch)
//   when the ranks' settings differ (naming two ranks and their values),
//   Error(kInvalidArgument) for a setting that is not a path name or a
//   forced path that cannot run (naming the ranks, GPUs, hosts and the
//   cause).
// - encodeRankDevice / decodeRankDevice: one rank's record to bytes and
//   back (kolo's byte codec, host order: one build of kolo on one kind of
//   machine); decode throws Error(kInternal) on a truncated record.
// - probeRankDevice (device_identity.h for the device part) never throws: a
//   device that cannot be used is recorded with the reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::collectives::cuda {

enum class DevicePath : uint8_t { kStaged, kIpc, kNccl, kHier };

// "staged", "ipc", "nccl", "hier".
std::string_view devicePathName(DevicePath path);

// One rank's device, as that rank sees it.
struct RankDevice {
  int host = 0;                  // the communicator's host index of the rank
  std::string hostId;            // its host's name, for messages
  std::string setting = "auto";  // KOLO_DEVICE_PATH on that rank
  int device = -1;               // CUDA ordinal in that rank's process
  std::string uuid;              // "GPU-...", as nvidia-smi prints it
  std::string unusable;          // why the device cannot be used; empty: usable
  // UUIDs of the other devices visible to that rank that `device` can
  // access peer to peer (cudaDeviceCanAccessPeer).
  std::vector<std::string> peers;
  std::string ipcUnusable;   // why CUDA IPC cannot run on that rank; empty: it can
  std::string ncclUnusable;  // why NCCL cannot run on that rank; empty: it can
};

struct DeviceTopology {
  std::vector<RankDevice> ranks;  // indexed by rank
  std::string inter = "tcp";      // the communicator's transport between hosts
};

struct DevicePathChoice {
  DevicePath path = DevicePath::kStaged;
  DevicePath intra = DevicePath::kStaged;  // hier: kIpc or kNccl
  std::string inter;                       // hier: "tcp" or "mpi"
  std::string reason;                      // why, in words
  // "staged", "ipc", "nccl", "hier (ipc inside hosts, tcp between)".
  std::string text() const;
};

DevicePathChoice chooseDevicePath(const DeviceTopology& topology);

std::vector<uint8_t> encodeRankDevice(const RankDevice& device);
RankDevice decodeRankDevice(const std::vector<uint8_t>& bytes);

// This rank's record for `device`: host and setting as given, the rest
// asked of the CUDA runtime (identifyDevice), the IPC and NCCL checks.
RankDevice probeRankDevice(int device, int host, const std::string& hostId,
                           const std::string& setting);

}  // namespace kolo::collectives::cuda

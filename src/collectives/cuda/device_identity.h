// Who a CUDA device is, as this process sees it: what a communicator's
// ranks exchange to find out which of them share a GPU and which GPUs of a
// host reach each other (device_path.h). Plain C++ (no CUDA header).
//
// Contract
// - identifyDevice(device) asks the CUDA runtime (cudaGetDeviceProperties,
//   cudaDeviceCanAccessPeer: no kernel, no allocation) about `device`, an
//   ordinal of this process (CUDA_VISIBLE_DEVICES applies). Throws
//   checkDevice's Error(kInvalidArgument) when there is no such device (and
//   always in a build without CUDA), Error(kInternal) naming the CUDA call
//   when one fails.
// - Thread-safe (the CUDA runtime's calls are).
#pragma once

#include <string>
#include <vector>

namespace kolo::collectives::cuda {

struct DeviceIdentity {
  std::string uuid;      // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi -L)
  std::string pciBusId;  // "0000:3b:00.0"
  // UUIDs of the other devices of this process that `device` can access
  // peer to peer.
  std::vector<std::string> peers;
};

DeviceIdentity identifyDevice(int device);

// "GPU-" and the 16 bytes of a CUDA UUID in nvidia-smi's grouping 8-4-4-4-12.
std::string uuidText(const unsigned char (&bytes)[16]);

}  // namespace kolo::collectives::cuda

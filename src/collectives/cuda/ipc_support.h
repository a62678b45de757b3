// Whether CUDA IPC (ipc_collectives.h) can serve the ranks of one host, for
// the choice of the device path (device_path.h).
//
// CUDA IPC serves a group when every rank's device is one GPU (processes
// sharing a GPU need no peer access), or when every pair of the group's
// GPUs has peer access (cudaDeviceCanAccessPeer) and every GPU is visible
// to this process (cudaIpcOpenMemHandle maps memory of visible devices
// only). Devices are named by PCI bus id ("0000:3b:00.0"), which, unlike
// an ordinal, means the same GPU in processes with different
// CUDA_VISIBLE_DEVICES.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace kolo::collectives::cuda {

struct IpcSupport {
  bool usable = false;
  std::string reason;  // why (usable or not), for logs and errors
};

// This process's device `device` as a PCI bus id. Throws Error
// (kInvalidArgument) without CUDA or without that device.
std::string devicePciBusId(int device);

// Each local rank's device (pciBusIds[localRank]), as devicePciBusId gave
// it in that rank. Asks the CUDA runtime of this process; never throws (no
// CUDA, or a bus id this process cannot see: not usable, saying why).
IpcSupport ipcSupport(const std::vector<std::string>& pciBusIds);

// The rule itself, with the questions to the runtime passed in:
// `visible(busId)` whether this process sees that GPU, `canAccessPeer(a,
// b)` whether GPU a can access GPU b's memory. ipcSupport is this with
// CUDA's answers.
IpcSupport ipcSupportWith(
    const std::vector<std::string>& pciBusIds,
    const std::function<bool(const std::string&)>& visible,
    const std::function<bool(const std::string&, const std::string&)>& canAccessPeer);

}  // namespace kolo::collectives::cuda

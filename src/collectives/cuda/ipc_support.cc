// ipcSupportWith (ipc_support.h): the rule, in both builds.
#include "collectives/cuda/ipc_support.h"

#include <set>

namespace kolo::collectives::cuda {

IpcSupport ipcSupportWith(
    const std::vector<std::string>& pciBusIds,
    const std::function<bool(const std::string&)>& visible,
    const std::function<bool(const std::string&, const std::string&)>& canAccessPeer) {
  if (pciBusIds.empty()) return {false, "no local ranks"};
  for (size_t r = 0; r < pciBusIds.size(); ++r) {
    if (pciBusIds[r].empty())
      return {false, "local rank " + std::to_string(r) + " has no CUDA device"};
  }
  const std::set<std::string> gpus(pciBusIds.begin(), pciBusIds.end());
  if (gpus.size() == 1) {
    return {true, "the " + std::to_string(pciBusIds.size()) + " local ranks share GPU " +
                      *gpus.begin()};
  }
  for (const std::string& g : gpus) {
    if (!visible(g)) return {false, "GPU " + g + " is not visible to this process"};
  }
  for (const std::string& a : gpus) {
    for (const std::string& b : gpus) {
      if (a != b && !canAccessPeer(a, b))
        return {false, "GPU " + a + " has no peer access to GPU " + b};
    }
  }
  return {true, "every pair of the " + std::to_string(gpus.size()) +
                    " GPUs of the local ranks has peer access"};
}

}  // namespace kolo::collectives::cuda

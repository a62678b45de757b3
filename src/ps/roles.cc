#include "ps/roles.h"

#include <algorithm>
#include <map>

#include "common/check.h"

namespace kolo::ps {

int Roles::serverIndexOf(int rank) const {
  auto it = std::find(servers.begin(), servers.end(), rank);
  return it == servers.end() ? -1 : static_cast<int>(it - servers.begin());
}

int Roles::workerIndexOf(int rank) const {
  auto it = std::find(workers.begin(), workers.end(), rank);
  return it == workers.end() ? -1 : static_cast<int>(it - workers.begin());
}

Roles assignRoles(const std::vector<int>& hostOfRank, int servers) {
  const int n = static_cast<int>(hostOfRank.size());
  if (servers < 0 || servers >= n) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_SERVERS=" << servers << " with " << n
                               << " ranks (expected 0 <= servers < ranks, so that at "
                                  "least one worker is left)");
  }
  // Hosts in the order of their first rank, each with its ranks descending.
  std::vector<std::vector<int>> hosts;
  std::map<int, size_t> indexOf;
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = indexOf.emplace(hostOfRank[r], hosts.size());
    if (fresh) hosts.emplace_back();
    hosts[it->second].insert(hosts[it->second].begin(), r);
  }
  Roles roles;
  std::vector<bool> isServer(n, false);
  for (size_t round = 0; static_cast<int>(roles.servers.size()) < servers; ++round) {
    for (auto& ranks : hosts) {
      if (round >= ranks.size() || static_cast<int>(roles.servers.size()) == servers)
        continue;
      roles.servers.push_back(ranks[round]);
      isServer[ranks[round]] = true;
    }
  }
  for (int r = 0; r < n; ++r) {
    if (!isServer[r]) roles.workers.push_back(r);
  }
  return roles;
}

}  // namespace kolo::ps

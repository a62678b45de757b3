#include "api/topology.h"

#include <unistd.h>

#include <map>

#include "common/check.h"

namespace kolo::api {

std::string defaultHostId() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

bool Topology::uniform() const {
  for (const auto& h : hosts) {
    if (h.size() != hosts[0].size()) return false;
  }
  return true;
}

std::vector<int> Topology::crossRanks() const {
  std::vector<int> out;
  for (const auto& h : hosts) {
    if (static_cast<int>(h.size()) > layout.localRank) out.push_back(h[layout.localRank]);
  }
  return out;
}

Topology Topology::discover(int rank, int size, const std::string& hostId,
                            rendezvous::Store& store, std::chrono::milliseconds timeout) {
  store.setString("host/" + std::to_string(rank), hostId);
  Topology t;
  std::map<std::string, int> hostIndex;
  t.hostOf.resize(size);
  for (int r = 0; r < size; ++r) {
    std::string id =
        r == rank ? hostId : store.getString("host/" + std::to_string(r), timeout);
    auto [it, added] = hostIndex.emplace(id, static_cast<int>(t.hosts.size()));
    if (added) t.hosts.emplace_back();
    t.hosts[it->second].push_back(r);
    t.hostOf[r] = it->second;
  }
  Layout& l = t.layout;
  l.rank = rank;
  l.size = size;
  l.hostId = hostId;
  l.crossRank = t.hostOf[rank];
  l.crossSize = static_cast<int>(t.hosts.size());
  const auto& mine = t.hosts[l.crossRank];
  l.localSize = static_cast<int>(mine.size());
  for (int i = 0; i < l.localSize; ++i) {
    if (mine[i] == rank) l.localRank = i;
  }
  return t;
}

}  // namespace kolo::api

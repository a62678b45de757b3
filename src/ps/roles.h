// Which ranks of a job are parameter servers (docs/parameter_server.md,
// "Roles").
//
// Contract
// - assignRoles is a pure function of the ranks' hosts and S: every rank
//   computes the same roles.
// - Placement, one server per host first: hosts in the order of their first
//   rank; each round takes, on every host that still has a non-server rank,
//   its highest such rank, until S are taken. Workers are the other ranks in
//   ascending order (worker index = position).
// - Errors (kInvalidArgument): S < 0, or S >= N (no worker would be left),
//   naming both values.
#pragma once

#include <vector>

namespace kolo::ps {

struct Roles {
  std::vector<int> servers;  // job ranks, by server index
  std::vector<int> workers;  // job ranks, by worker index

  // -1 when `rank` is not a server / not a worker.
  int serverIndexOf(int rank) const;
  int workerIndexOf(int rank) const;
};

// hostOfRank[r]: the host index of job rank r (any numbering).
Roles assignRoles(const std::vector<int>& hostOfRank, int servers);

}  // namespace kolo::ps

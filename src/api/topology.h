// Which ranks share a host, worked out at start-up through the store.
//
// Every rank publishes its host id (KOLO_HOST_ID, else the host name);
// ranks with equal ids are one host. Hosts are numbered in order of their
// lowest rank; local ranks in rank order. cross rank = the host's number,
// cross size = the number of hosts (as in Horovod when every host has the
// same number of ranks).
#pragma once

#include <kolo/communicator.h>

#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::api {

struct Topology {
  Layout layout;
  std::vector<std::vector<int>> hosts;  // ranks of each host, in host order
  std::vector<int> hostOf;              // rank -> host index

  const std::vector<int>& localRanks() const { return hosts[layout.crossRank]; }
  // Ranks with this rank's local rank, one per host that has one (host
  // order). With uneven hosts the groups of higher local ranks are smaller;
  // every host has a local rank 0, whose group spans all hosts.
  std::vector<int> crossRanks() const;
  bool uniform() const;

  static Topology discover(int rank, int size, const std::string& hostId,
                           rendezvous::Store& store, std::chrono::milliseconds timeout);
};

std::string defaultHostId();

}  // namespace kolo::api

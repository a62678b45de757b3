// How an error raised inside a process set names ranks.
//
// A process set k > 0 runs on a team of its own (split()), whose transports
// number the members 0..n-1 in the set's order; their errors name those
// indices. Before such an error reaches the user (the runtime's handles),
// every rank it names is turned into the job-wide (global) rank, keeping
// the index as context:
//   "rank 0 timed out ... waiting for rank 1"  (set 2 = global ranks {1, 3})
//   -> "rank 1 (rank 0 of process set 2) timed out ... waiting for rank 3
//       (rank 1 of process set 2)"
//   "ranks 0,1" -> "ranks 1,3 (ranks 0,1 of process set 2)"
// Only numbers that are ranks of the set are rewritten; "local rank N" (a
// rank's index on its host) is left alone. Errors of a lost or silent peer
// (kPeerLost, kTimeout) are rewritten, and their peer() becomes the global
// rank; others, and a set whose indices are the global ranks (set 0), pass
// unchanged. Pure functions; thread-safe.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::runtime {

struct SetRankNames {
  int set = 0;                   // the process set's id
  std::vector<int> globalRanks;  // global rank of each index; empty: the same
};

// `text` with every rank of the set named as above.
std::string globalRankText(std::string_view text, const SetRankNames& names);

// `error` rewritten as above when it is a kolo::Error of a lost or silent
// peer; otherwise `error` itself.
std::exception_ptr inGlobalRanks(std::exception_ptr error, const SetRankNames& names);

}  // namespace kolo::runtime

// Elastic membership: how an elastic launcher (kolorun --min-np/--max-np)
// and its workers agree, through the job's store, on who forms each world.
//
// Every worker the launcher starts has a stable id (KOLO_ELASTIC_WORKER, a
// non-negative integer never reused in the job). A world is a *generation*
// G = 1, 2, ...; the launcher alone numbers them, so the keys and messages
// of one world (its communicator is named "world/e<G>") can never be taken
// for another's.
//
// Protocol (keys of the job's store)
// - A worker that wants a world (kolo_init; again after a failure or a host
//   change) does ADD elastic/want/<id> += 1, which returns k (its k-th
//   request), then ADD elastic/want_total += 1, then waits (GET) for
//   elastic/assign/<id>/<k>.
// - The launcher watches elastic/want_total (ADD 0 reads it without
//   blocking); when it moved, it reads each live worker's want counter.
//   When every live worker it knows has an unanswered request (or the join
//   window closed), it opens generation G + 1 with the waiting workers,
//   ranked in the order of their ranks in the last world (workers that were
//   not in it after them, by id), and SETs elastic/assign/<id>/<k> to
//   "G RANK SIZE UPDATES ADDITIONS" for each (the host-update counters at
//   that moment); to a worker it will not take, "refused REASON".
// - When the discovered hosts change, the launcher ADDs to
//   elastic/host_updates (and elastic/host_additions for an added host);
//   a worker compares them with its world's (HostUpdates, host_updates.h;
//   the world's are the communicator's, Communicator::elasticWorld).
//
// Contract: encode/decode are pure; joinGeneration() blocks up to
// `timeout` and throws Error(kTimeout) naming the worker and the key, or
// Error(kInvalidArgument) carrying the launcher's reason for a refusal.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "rendezvous/store.h"

namespace kolo::rendezvous::elastic {

struct Assignment {
  int64_t generation = 0;
  int rank = 0;
  int size = 0;
  // The launcher's host-update counters when it formed this world (see
  // kHostUpdatesKey): later values mean the hosts changed since.
  int64_t hostUpdates = 0;
  int64_t hostAdditions = 0;
};

// Counters the launcher ADDs to when the discovered hosts change: every
// change, and the changes that added a host.
inline constexpr const char* kHostUpdatesKey = "elastic/host_updates";
inline constexpr const char* kHostAdditionsKey = "elastic/host_additions";

std::string wantKey(int64_t worker);
inline constexpr const char* kWantTotalKey = "elastic/want_total";
std::string assignKey(int64_t worker, int64_t request);

std::string encode(const Assignment& a);
std::string encodeRefusal(const std::string& reason);
// The assignment, or nullopt with `refusal` set for a refusal; throws
// Error(kInvalidArgument) for anything else.
std::optional<Assignment> decode(const std::string& value, std::string& refusal);

// The world name of a generation: "world/e<G>".
std::string worldName(int64_t generation);

// Worker side: asks for the next world and waits for the launcher's answer.
Assignment joinGeneration(Store& store, int64_t worker,
                          std::chrono::milliseconds timeout);

}  // namespace kolo::rendezvous::elastic

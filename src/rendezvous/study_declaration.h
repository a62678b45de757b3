// A rank's declaration to its launcher that it runs a kolo.hpo study
// (docs/hpo.md): the job's failure policy for that rank changes while the
// declaration holds.
//
// kolorun ends the whole job when any rank fails, unless the job has
// declared that it tolerates the loss: a rank inside kolo.hpo's
// Study.optimize or PBT.run does (its team's trial fails, the study goes
// on). Each such rank counts itself in and out of a counter of its own in
// the job's rendezvous store, which kolorun hosts:
//
//   key "kolo.hpo.study/<rank>": > 0 while rank <rank> runs a study.
//
// kolorun reads the failed rank's counter (ADD 0: no wait, a key never
// added reads 0) when that rank fails, before it decides; rank 0's failure
// ends the job whatever it declared (it owns the study). The store proves
// the job secret both ways on every connection (tcp_store.h), so only the
// job's own ranks can write or read a declaration.
//
// Races: a rank that fails before it counts itself in (or after it counts
// itself out) ends the job as usual; a rank killed inside leaves its count
// in place, which is what kolorun reads.
//
// Contract
// - StudyDeclaration: the rank's end, one store connection of its own,
//   opened at the first call and kept; enter()/leave() are one round trip
//   each and throw kolo::Error from the store (the connection is then
//   dropped and the next call connects afresh). Thread-safe.
// - studyDeclared(): the launcher's read, one round trip on its client.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "rendezvous/store.h"

namespace kolo::rendezvous {

// The store key of `rank`'s declaration counter.
std::string studyKey(int rank);

// Whether `rank` held a declaration (its counter > 0) in `store`.
bool studyDeclared(Store& store, int rank);

class StudyDeclaration {
 public:
  // The store at `address` (the job's rendezvous), reached with `secret`.
  StudyDeclaration(std::string address, std::chrono::milliseconds connectTimeout,
                   std::string secret, int rank);
  StudyDeclaration(const StudyDeclaration&) = delete;
  StudyDeclaration& operator=(const StudyDeclaration&) = delete;

  // Counts this rank in (enter) or out (leave); returns the count after.
  int64_t enter() { return add(1); }
  int64_t leave() { return add(-1); }

 private:
  int64_t add(int64_t delta);

  const std::string address_;
  const std::chrono::milliseconds connectTimeout_;
  const std::string secret_;
  const int rank_;
  std::mutex mu_;
  std::unique_ptr<Store> store_;  // guarded by mu_; null until the first call
};

}  // namespace kolo::rendezvous

// Agreement vouched for by the caller: collectives whose descriptors need
// not be exchanged.
//
// Before data moves the communicator makes the ranks agree on each
// collective (descriptor_check.h): an allgather of 32-byte descriptors over
// the transport (a shared-memory step on one host), one more round trip
// per collective. A caller with an agreement protocol of its own, the
// runtime, whose negotiation makes every rank run the same operations in
// the same order (docs/runtime.md), would pay it twice. An AgreedScope lets
// it say so; docs/collectives.md ("Agreement") has what is still detected.
//
// Contract
// - AgreedScope(comm) holds `comm` for this thread: it waits until the
//   communicator's earlier operations ended; then, until the scope ends,
//   this thread's blocking calls on `comm` run and every other thread's
//   operation on it (blocking or async, including its closing step: the
//   destructor, finalize, the exit goodbye) waits. So a closing step never
//   lands in the middle of a scope, only between scopes.
// - agreedFromHere(): this thread's next blocking operations on `comm`, up
//   to the scope's end, skip the descriptor exchange. The caller promises
//   that every rank makes the same calls (kind, dtype, count, op, root, per
//   rank counts) in the same order, each marking the same operation as the
//   first agreed one. Before it (e.g. the negotiation's own exchange) the
//   operations are checked as usual. A rank whose own arguments fail
//   validation in an agreed operation cannot tell the others in an
//   exchange: it breaks the communicator with kInternal (a broken promise,
//   a bug of the caller) and the peers get its abort notice, naming it.
// - Barriers and closing steps are never skipped (on one host the exchange
//   is the barrier).
// - ~AgreedScope: checked again, and the hold is released.
// - A communicator that is not the library's own (no
//   collectives::AgreementHost, agreement_host.h) is left alone: nothing is
//   held, nothing skipped.
// - Not copyable; one scope per thread and communicator at a time; not for
//   async operations (they would wait for the scope's end).
#pragma once

#include <kolo/communicator.h>

#include "collectives/agreement_host.h"

namespace kolo::runtime {

class AgreedScope {
 public:
  explicit AgreedScope(Communicator& comm);
  ~AgreedScope();
  AgreedScope(const AgreedScope&) = delete;
  AgreedScope& operator=(const AgreedScope&) = delete;

  void agreedFromHere();

 private:
  collectives::AgreementHost* host_;  // null: not the library's communicator
};

}  // namespace kolo::runtime

// The goodbye of a process that exits (exit(), a return from main) while
// communicators of it are still open, i.e. without kolo_finalize or
// destroying them: each one runs its closing step (CommunicatorImpl::
// shutdown) with a descriptor that says "exited without finalize", so ranks
// waiting in a collective fail at once, all with the same error naming
// this rank and the collective it skipped (docs/errors.md), instead of each
// seeing a dead link its own way.
//
// Contract
// - A process-wide registry (the one piece of global state this needs: an
//   atexit handler has no other way to find the open communicators).
//   Communicators enrol when set up and leave when destroyed; the handler
//   is registered with std::atexit on the first enrolment.
// - At exit the handler says goodbye on every enrolled communicator at
//   once (a thread each, since communicators of one process may be ranks of
//   one job whose closing steps must meet), holding the registry's mutex:
//   a destructor running meanwhile on another thread waits, then finds the
//   communicator already shut down. A forked child that exits says nothing
//   on its parent's communicators (they are the parent's links).
// - Bounded like finalize: at most the communicator's timeout per
//   communicator when a peer neither answers nor dies. Not run on _exit,
//   abort or a fatal signal (the peers then see a lost peer, kPeerLost).
// - Thread safety: all functions may be called from any thread.
#pragma once

#include <functional>

namespace kolo::api {

// `goodbye` is what the handler runs for `owner` at exit.
void enrolForExitGoodbye(const void* owner, std::function<void()> goodbye);
void leaveExitGoodbye(const void* owner);

}  // namespace kolo::api

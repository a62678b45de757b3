// The wire time of a flat allreduce's schedule when ranks send eagerly.
//
// kolo's transports never wait for the receiver before they send: isend
// writes at once and the receiver reads an unexpected message into a
// buffer (tcp_frames.cc). So a rank starts each step's send as soon as it
// has finished its previous step, even when its partner has not reached
// that step yet. Where the schedule is not symmetric (the fold of tree and
// rhd on a number of ranks that is not a power of two, partition.h), ranks
// that sit out the fold-in send their first step at once, and those bytes
// share the folded rank's link with the fold-in: on 3 hosts of one rank,
// rank 2's first exchange and rank 0's fold-in both go down rank 1's
// link (measured with the links' byte counters: 2b at the link's rate,
// then rank 1's half of the exchange and the fold-back, 2b more: tree 552
// ms for 16 MiB at 1 Gbit/s, against 3b = 414 ms when the steps take turns).
//
// eagerStepExtra() replays the transfers as flows through the hosts'
// links (each host one link, each direction its own capacity, shared
// max-min fairly among the flows crossing it; ranks of one host reach each
// other without the link, in intraSecondsPerByte per byte: the transport's
// copy, which sets when a host's ranks reach their cross-host steps), every rank running
// its steps in order and starting a step's send when it reaches the step. A step is done
// for a rank when its send has arrived and its receive is in. It returns, per step of the
// algorithm, how much later the step ends than the step-by-step walk of
// allreduce_model.cc counts: the end of the step over all ranks, minus the end of the
// step before, minus the step's own time (its busiest link direction's bytes at the rate,
// or its longest copy inside a host), at least 0. The model adds that to the step's wire
// time. Only the transfers are replayed (no latency, no reduction): the term is the
// link's queueing behind bytes that were sent early.
#pragma once
#include <vector>

namespace kolo::predict {

// One step of one rank: optionally a send of `sendBytes` to `sendTo` and a
// receive of `recvBytes` from `recvFrom` (-1: none); `step` is the
// algorithm's step index (0 .. steps-1) it belongs to.
struct EagerOp {
  int step = 0;
  int sendTo = -1;
  double sendBytes = 0;
  int recvFrom = -1;
  double recvBytes = 0;
};

// Every rank's steps, in order (program[r] for rank r). Messages between
// one pair are matched in order (the k-th send of a to b is b's k-th
// receive from a).
using EagerProgram = std::vector<std::vector<EagerOp>>;

// Per step (size `steps`): the seconds by which eager sends delay the
// step's end beyond its own wire time (see above). hostOf[r]: rank r's
// host; bytesPerSecond: each link direction's payload rate (> 0);
// intraSecondsPerByte: a transfer between ranks of one host.
std::vector<double> eagerStepExtra(const EagerProgram& program, int steps,
                                   const std::vector<int>& hostOf, double bytesPerSecond,
                                   double intraSecondsPerByte = 0);

}  // namespace kolo::predict

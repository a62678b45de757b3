// The NCCL path's collectives (nccl_communicator_impl.h): which NCCL calls
// run each of DeviceCollectives' operations.
//
// - allreduce: ncclAllReduce; kAverage is ncclSum, then kolo's
//   divideInPlace kernel on the result (nccl_types.h says why).
// - broadcast: ncclBroadcast in place.
// - allgather: equal counts are one ncclAllGather. NCCL has no uneven
//   allgather (allgatherv), so uneven counts are one ncclBroadcast per rank
//   with a block (root i sends its counts[i] elements to their place in
//   every recv), all in one NCCL group: every rank receives the same bytes
//   as in an allgather, over NCCL's ring or tree, without padding every
//   block to the largest and compacting afterwards, and without the
//   all-pairs connections that send/recv to every peer would open.
// - reduceScatter: equal counts are one ncclReduceScatter; uneven ones one
//   ncclReduce per block (block i to root i) in one group, the same way.
// - alltoall: one NCCL group of ncclSend / ncclRecv per peer with a
//   non-empty block (NCCL's point-to-point); this rank's own block is a
//   device-to-device copy on the caller's stream.
//
// Every operation returns early for zero elements (every rank agrees on
// the counts, so every rank returns alike), after the broken check.
#include <numeric>

#include "collectives/cuda/nccl_communicator_impl.h"
#include "collectives/cuda/nccl_types.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

// The elements' offsets: the prefix sums of counts.
std::vector<size_t> offsetsOf(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

bool allEqual(const std::vector<size_t>& counts) {
  for (size_t c : counts) {
    if (c != counts.front()) return false;
  }
  return true;
}

size_t total(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

const char* at(const void* base, size_t elements, size_t width) {
  return static_cast<const char*>(base) + elements * width;
}

char* at(void* base, size_t elements, size_t width) {
  return static_cast<char*>(base) + elements * width;
}

}  // namespace

template <typename Enqueue>
void NcclCommunicator::run(const NcclCall& call, void* stream, Enqueue&& enqueue) {
  throwIfBroken();
  const int previous = ops_->enter(self_ + ": NCCL " + call.name);
  try {
    const auto deadline = Clock::now() + options_.timeout;
    enqueue(deadline);
    waitDone(call, stream, deadline);
  } catch (...) {
    ops_->leave(previous);
    throw;
  }
  ops_->leave(previous);
}

template <typename Calls>
void NcclCommunicator::grouped(const NcclCall& call, Clock::time_point deadline,
                               Calls&& calls) {
  NcclLibrary::Result first = nccl::kSuccess;
  auto note = [&](NcclLibrary::Result result) {
    if (result != nccl::kSuccess && result != nccl::kInProgress &&
        first == nccl::kSuccess) {
      first = result;
    }
  };
  note(nccl_.groupStart());
  calls(note);
  const NcclLibrary::Result end = nccl_.groupEnd();
  if (first != nccl::kSuccess) ncclFailure(call, first);
  enqueued(end, call, deadline);
}

void NcclCommunicator::divideBySize(void* buffer, size_t count, DataType dtype,
                                    const NcclCall& call, void* stream) {
  if (options_.size == 1) return;  // the sum of one is the average
  try {
    ops_->divide(buffer, count, dtype, static_cast<double>(options_.size), stream);
  } catch (const Error& e) {
    breakWith(e.code(), self_ + ": " + call.describe() + ": " + e.what());
  }
}

void NcclCommunicator::allreduce(const void* send, void* recv, size_t count,
                                 DataType dtype, ReduceOp op, void* stream) {
  const NcclCall call{"allreduce", count, dtype, static_cast<int>(op)};
  const int type = nccl::ncclDataTypeOf(dtype);
  const nccl::Reduction reduction = nccl::ncclReductionOf(op);
  throwIfBroken();
  if (count == 0) return;
  run(call, stream, [&](Clock::time_point deadline) {
    enqueued(nccl_.allReduce(send, recv, count, type, reduction.op, comm_, stream), call,
             deadline);
    if (reduction.divideBySize) divideBySize(recv, count, dtype, call, stream);
  });
}

void NcclCommunicator::broadcast(void* buffer, size_t count, DataType dtype, int root,
                                 void* stream) {
  const NcclCall call{"broadcast", count, dtype, -1, root};
  const int type = nccl::ncclDataTypeOf(dtype);
  if (root < 0 || root >= options_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument, self_ << ": " << call.describe()
                                                  << ": root is not a rank of the "
                                                  << options_.size << " ranks");
  }
  throwIfBroken();
  if (count == 0) return;
  run(call, stream, [&](Clock::time_point deadline) {
    enqueued(nccl_.broadcast(buffer, buffer, count, type, root, comm_, stream), call,
             deadline);
  });
}

void NcclCommunicator::allgather(const void* send, void* recv,
                                 const std::vector<size_t>& counts, DataType dtype,
                                 void* stream) {
  const NcclCall call{"allgather", counts.empty() ? 0 : total(counts), dtype};
  const int type = nccl::ncclDataTypeOf(dtype);
  if (counts.size() != static_cast<size_t>(options_.size)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, self_ << ": " << call.describe() << ": "
                                                  << counts.size() << " counts for "
                                                  << options_.size << " ranks");
  }
  throwIfBroken();
  if (call.count == 0) return;
  const size_t width = elementSize(dtype);
  run(call, stream, [&](Clock::time_point deadline) {
    if (allEqual(counts)) {
      enqueued(nccl_.allGather(send, recv, counts.front(), type, comm_, stream), call,
               deadline);
      return;
    }
    const std::vector<size_t> offsets = offsetsOf(counts);
    grouped(call, deadline, [&](auto note) {
      for (int i = 0; i < options_.size; ++i) {
        const size_t n = counts[static_cast<size_t>(i)];
        if (n == 0) continue;
        const void* source = i == options_.rank ? send : nullptr;
        note(nccl_.broadcast(source, at(recv, offsets[static_cast<size_t>(i)], width), n,
                             type, i, comm_, stream));
      }
    });
  });
}

void NcclCommunicator::reduceScatter(const void* send, void* recv,
                                     const std::vector<size_t>& counts, DataType dtype,
                                     ReduceOp op, void* stream) {
  const NcclCall call{"reduceScatter", counts.empty() ? 0 : total(counts), dtype,
                      static_cast<int>(op)};
  const int type = nccl::ncclDataTypeOf(dtype);
  const nccl::Reduction reduction = nccl::ncclReductionOf(op);
  if (counts.size() != static_cast<size_t>(options_.size)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, self_ << ": " << call.describe() << ": "
                                                  << counts.size() << " counts for "
                                                  << options_.size << " ranks");
  }
  throwIfBroken();
  if (call.count == 0) return;
  const size_t width = elementSize(dtype);
  const size_t mine = counts[static_cast<size_t>(options_.rank)];
  run(call, stream, [&](Clock::time_point deadline) {
    if (allEqual(counts)) {
      enqueued(nccl_.reduceScatter(send, recv, mine, type, reduction.op, comm_, stream),
               call, deadline);
    } else {
      const std::vector<size_t> offsets = offsetsOf(counts);
      grouped(call, deadline, [&](auto note) {
        for (int i = 0; i < options_.size; ++i) {
          const size_t n = counts[static_cast<size_t>(i)];
          if (n == 0) continue;
          void* target = i == options_.rank ? recv : nullptr;
          note(nccl_.reduce(at(send, offsets[static_cast<size_t>(i)], width), target, n,
                            type, reduction.op, i, comm_, stream));
        }
      });
    }
    if (reduction.divideBySize && mine > 0) divideBySize(recv, mine, dtype, call, stream);
  });
}

void NcclCommunicator::alltoall(const void* send, const std::vector<size_t>& sendCounts,
                                void* recv, const std::vector<size_t>& recvCounts,
                                DataType dtype, void* stream) {
  const NcclCall call{"alltoall", total(sendCounts), dtype};
  const int type = nccl::ncclDataTypeOf(dtype);
  const auto n = static_cast<size_t>(options_.size);
  if (sendCounts.size() != n || recvCounts.size() != n) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               self_ << ": " << call.describe() << ": " << sendCounts.size()
                     << " send counts and " << recvCounts.size() << " receive counts for "
                     << n << " ranks");
  }
  const auto me = static_cast<size_t>(options_.rank);
  if (sendCounts[me] != recvCounts[me]) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               self_ << ": " << call.describe() << ": sends itself " << sendCounts[me]
                     << " elements but receives " << recvCounts[me] << " from itself");
  }
  throwIfBroken();
  if (total(sendCounts) == 0 && total(recvCounts) == 0) return;
  const size_t width = elementSize(dtype);
  const std::vector<size_t> sendOffsets = offsetsOf(sendCounts);
  const std::vector<size_t> recvOffsets = offsetsOf(recvCounts);
  run(call, stream, [&](Clock::time_point deadline) {
    if (sendCounts[me] > 0) {
      const std::string error =
          ops_->copy(at(recv, recvOffsets[me], width), at(send, sendOffsets[me], width),
                     sendCounts[me] * width, stream);
      if (!error.empty()) deviceFailure(call, "the copy of its own block: " + error);
    }
    grouped(call, deadline, [&](auto note) {
      for (size_t j = 0; j < n; ++j) {
        if (j == me) continue;
        const int peer = static_cast<int>(j);
        if (sendCounts[j] > 0) {
          note(nccl_.send(at(send, sendOffsets[j], width), sendCounts[j], type, peer,
                          comm_, stream));
        }
        if (recvCounts[j] > 0) {
          note(nccl_.recv(at(recv, recvOffsets[j], width), recvCounts[j], type, peer,
                          comm_, stream));
        }
      }
    });
  });
}

}  // namespace kolo::collectives::cuda

// CommunicatorImpl's collective calls: the argument checks, the agreement
// step (agree, exchange) and the guard that breaks the communicator on a
// lost peer, then allreduce (and its algorithm's choice), broadcast,
// allgather, reduce-scatter, alltoall and barrier with their blocking and
// async entry points. Set-up is in communicator_setup.cc.
#include <cstring>
#include <limits>

#include "api/communicator_impl.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "collectives/segment_view.h"
#include "common/check.h"
#include "common/logging.h"

namespace kolo {
namespace api {
namespace {

using collectives::CollectiveKind;
using collectives::OpDescriptor;

// Bytes of count elements, or an error naming the overflow.
size_t checkedBytes(size_t count, DataType dtype, const char* what) {
  const size_t es = elementSize(dtype);
  constexpr size_t kMax = size_t{1} << 62;
  if (count > kMax / es) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": count " << count << " of "
                                                 << toString(dtype)
                                                 << " overflows the addressable size");
  }
  return count * es;
}

// `count` elements for each of `ranks` ranks must be addressable.
void checkedPerRank(size_t count, int ranks, DataType dtype, const char* what,
                    const char* name) {
  if (count > (size_t{1} << 62) / ranks) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": " << name << " " << count
                                                 << " times " << ranks
                                                 << " ranks overflows");
  }
  checkedBytes(count * ranks, dtype, what);
}

// With one rank the result is the input.
void copyIfDistinct(const void* send, void* recv, size_t count, DataType dtype) {
  if (count > 0 && recv != send) std::memmove(recv, send, count * elementSize(dtype));
}

void checkDtype(DataType dtype, const char* what) {
  if (!isValid(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown dtype value " << static_cast<int>(dtype));
  }
}

void checkOp(ReduceOp op, const char* what) {
  if (!isValid(op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown reduction op value " << static_cast<int>(op));
  }
}

void checkBuffer(const void* p, size_t count, const char* what, const char* name) {
  if (p == nullptr && count > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": " << name << " buffer is null but count is " << count);
  }
}

// A segmented allreduce's arguments: send and recv unused, the segments'
// buffers set, their counts adding up to `count`.
void checkSegments(const AllreduceOptions& o, const char* what) {
  if (o.segments == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": segments is null but segmentCount is " << o.segmentCount);
  }
  if (o.send != nullptr || o.recv != nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": send and recv must be null when segments are given");
  }
  size_t total = 0;
  for (size_t i = 0; i < o.segmentCount; ++i) {
    const AllreduceSegment& s = o.segments[i];
    if ((s.send == nullptr || s.recv == nullptr) && s.count > 0) {
      KOLO_THROW(ErrorCode::kInvalidArgument, what
                                                  << ": segment " << i << " has a null "
                                                  << (s.send == nullptr ? "send" : "recv")
                                                  << " buffer but count " << s.count);
    }
    if (s.count > std::numeric_limits<size_t>::max() - total) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what << ": the segments' counts overflow at segment " << i);
    }
    total += s.count;
  }
  if (total != o.count) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": the " << o.segmentCount
                                                 << " segments hold " << total
                                                 << " elements, count is " << o.count);
  }
}

uint64_t hashCounts(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t c : counts) {
    for (int i = 0; i < 8; ++i) {
      h ^= (c >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h | 1;  // never 0: 0 means "equal counts"
}

// Runs validation; returns the error instead of throwing, so the rank still
// takes part in the agreement step.
template <typename Checks>
std::exception_ptr validate(const Checks& checks) {
  try {
    checks();
  } catch (const Error&) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

void CommunicatorImpl::guarded(const std::function<void()>& op) {
  if (broken_) std::rethrow_exception(broken_);
  try {
    op();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout ||
        e.code() == ErrorCode::kIo || e.code() == ErrorCode::kInternal) {
      broken_ = std::current_exception();
      if (!everyoneKnows_ &&
          (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout)) {
        familyLost_->store(true);
      }
      // Tell the others why, so they name the rank really lost; unless they
      // all found it in the same descriptors (a departed rank), when a
      // notice could only race their own identical error.
      try {
        if (!everyoneKnows_) world_->abort(e);
      } catch (...) {
      }
    }
    throw;
  }
}

collectives::Context CommunicatorImpl::nextContext() {
  collectives::Context ctx{*world_, topology_.layout};
  ctx.local = local_.get();
  ctx.cross = cross_.get();
  ctx.shm = shm_.get();
  ctx.stores = &stagingStores_;
  ctx.selector = selector_.get();
  ctx.tag = ++sequence_ * collectives::kTagsPerOp;
  return ctx;
}

void CommunicatorImpl::agree(const collectives::Context& ctx, const OpDescriptor& d,
                             std::exception_ptr localError) {
  if (!agreed_) return exchange(ctx, d, localError);
  if (layout().size > 1) skipped_.fetch_add(1, std::memory_order_relaxed);
  if (!localError) return;
  try {
    std::rethrow_exception(localError);
  } catch (const Error& e) {
    KOLO_THROW(ErrorCode::kInternal,
               "rank " << rank() << ": " << e.what()
                       << " in a collective its caller had agreed on (collective #"
                       << sequence_ << "); the other ranks could not be told in an "
                       << "agreement step, so the communicator is broken");
  }
}

void CommunicatorImpl::exchange(const collectives::Context& ctx, OpDescriptor d,
                                std::exception_ptr localError) {
  d.sequence = sequence_;
  d.invalid = localError ? 1 : 0;
  try {
    if (layout().size == 1) {
      // nothing to agree with
    } else if (allLocalShm_) {
      exchanged_.fetch_add(1, std::memory_order_relaxed);
      collectives::exchangeAndVerify(*shm_, d, topology_.localRanks());
    } else {
      exchanged_.fetch_add(1, std::memory_order_relaxed);
      collectives::Context checkCtx = ctx;
      checkCtx.tag += collectives::kTagsPerOp / 2;  // clear of the op's own tags
      collectives::exchangeAndVerify(checkCtx, d);
    }
  } catch (const Error& e) {
    if (localError) std::rethrow_exception(localError);
    // A rank that left is seen by every rank in the same descriptors.
    everyoneKnows_ = collectives::isDeparture(e);
    throw;
  }
  if (localError) std::rethrow_exception(localError);
}

// ---- allreduce -------------------------------------------------------------

void CommunicatorImpl::doAllreduce(const AllreduceOptions& o) {
  const char* what = "allreduce";
  size_t bytes = 0;
  const bool segmented = o.segmentCount > 0;
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkOp(o.op, what);
    bytes = checkedBytes(o.count, o.dtype, what);
    if (segmented) {
      checkSegments(o, what);
    } else {
      checkBuffer(o.send, o.count, what, "send");
      checkBuffer(o.recv, o.count, what, "recv");
    }
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kAllreduce;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.op = static_cast<uint8_t>(o.op);
  d.count = o.count;

  collectives::Context ctx = nextContext();
  const collectives::AllreduceAlgorithm* algo = nullptr;
  if (!error) {
    try {
      const std::string_view name =
          !o.algorithm.empty() ? std::string_view(o.algorithm) : forcedAllreduce(ctx);
      algo = name.empty() ? &collectives::selectAllreduce(bytes, ctx)
                          : &collectives::findAllreduce(name, ctx);
    } catch (const Error&) {
      error = std::current_exception();
    }
  }
  d.sequence = sequence_;
  if (error || !algo->checksArguments) {
    agree(ctx, d, error);
  } else {
    ctx.check = &d;
  }
  const size_t es = elementSize(o.dtype);
  const collectives::SegmentView contiguous(o.send, o.recv, o.count, es);
  const collectives::SegmentView pieces(o.segments, o.segmentCount, es);
  const collectives::SegmentView& v = segmented ? pieces : contiguous;
  const ReduceOp op = o.op == ReduceOp::kAverage ? ReduceOp::kSum : o.op;
  if (size() == 1) {
    v.forEach(0, o.count, [&](const uint8_t* send, uint8_t* recv, size_t, size_t n) {
      copyIfDistinct(send, recv, n, o.dtype);
    });
    return;
  }
  // An average's division: inside the algorithm when it offers it, else
  // one pass over the result afterwards.
  const int divisor = o.op == ReduceOp::kAverage ? size() : 1;
  const bool divides = divisor > 1 && algo->dividesResult;
  if (!segmented || algo->takesSegments) {
    collectives::AllreduceArgs args{o.send, o.recv, o.count, o.dtype, op};
    if (segmented) {  // send and recv are null then
      args.segments = o.segments;
      args.segmentCount = o.segmentCount;
    }
    if (divides) args.divisor = divisor;
    algo->run(ctx, args);
  } else {
    // Packed: the segments into one buffer, in place, and back out.
    if (packed_.size() < bytes) packed_.resize(bytes);
    v.gatherSend(packed_.data(), 0, o.count);
    algo->run(ctx, {packed_.data(), packed_.data(), o.count, o.dtype, op});
    v.scatterRecv(packed_.data(), 0, o.count);
  }
  if (divisor > 1 && !divides && o.count > 0) {
    v.forEach(0, o.count, [&](const uint8_t*, uint8_t* recv, size_t, size_t n) {
      collectives::divideInPlace(recv, n, o.dtype, divisor);
    });
  }
}

std::string CommunicatorImpl::allreduceAlgorithm(size_t bytes) const {
  collectives::Context ctx{*world_, topology_.layout};
  ctx.local = local_.get();
  ctx.cross = cross_.get();
  ctx.shm = shm_.get();
  ctx.selector = selector_.get();
  const std::string_view forced = forcedAllreduce(ctx);
  if (!forced.empty()) return std::string(collectives::findAllreduce(forced, ctx).name);
  return std::string(collectives::selectAllreduce(bytes, ctx).name);
}

std::string_view CommunicatorImpl::forcedAllreduce(
    const collectives::Context& ctx) const {
  if (!settings_.allreduceAlgorithm.empty()) return settings_.allreduceAlgorithm;
  if (!settings_.algorithm.empty()) return settings_.algorithm;  // KOLO_ALGORITHM
  // Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE: ignored on one host.
  if (settings_.hierarchicalAllreduce != 0 && collectives::allreduceUsable("hier", ctx)) {
    return "hier";
  }
  return {};
}

// ---- broadcast -------------------------------------------------------------

void CommunicatorImpl::doBroadcast(const BroadcastOptions& o) {
  const char* what = "broadcast";
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkedBytes(o.count, o.dtype, what);
    checkBuffer(o.buffer, o.count, what, "data");
    if (o.root < 0 || o.root >= size()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what << ": root " << o.root << " is not a rank of a job of " << size());
    }
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kBroadcast;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.count = o.count;
  d.root = o.root;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return;
  collectives::broadcastBinomial(ctx, {o.buffer, o.count, o.dtype, o.root});
}

// ---- allgather -------------------------------------------------------------

void CommunicatorImpl::doAllgather(const AllgatherOptions& o) {
  const char* what = "allgather";
  const bool varying = !o.counts.empty();
  std::vector<size_t> counts = varying ? o.counts : std::vector<size_t>(size(), o.count);
  size_t total = 0;
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    if (varying && static_cast<int>(o.counts.size()) != size()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what << ": " << o.counts.size() << " per-rank counts given for a job of "
                      << size() << " ranks");
    }
    for (size_t c : counts) {
      checkedBytes(c, o.dtype, what);
      if (total + c < total)
        KOLO_THROW(ErrorCode::kInvalidArgument, what << ": total count overflows");
      total += c;
    }
    checkedBytes(total, o.dtype, what);
    checkBuffer(o.send, counts[rank()], what, "send");
    checkBuffer(o.recv, total, what, "recv");
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kAllgather;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.count = varying ? total : o.count;
  d.extra = varying ? hashCounts(counts) : 0;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return copyIfDistinct(o.send, o.recv, total, o.dtype);
  collectives::allgatherRing(ctx, {o.send, o.recv, std::move(counts), o.dtype});
}

// ---- reduce-scatter --------------------------------------------------------

void CommunicatorImpl::doReduceScatter(const ReduceScatterOptions& o) {
  const char* what = "reducescatter";
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkOp(o.op, what);
    checkedPerRank(o.recvCount, size(), o.dtype, what, "recv count");
    checkBuffer(o.send, o.recvCount, what, "send");
    checkBuffer(o.recv, o.recvCount, what, "recv");
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kReduceScatter;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.op = static_cast<uint8_t>(o.op);
  d.count = o.recvCount;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return copyIfDistinct(o.send, o.recv, o.recvCount, o.dtype);
  collectives::reduceScatterRing(ctx,
                                 {o.send, o.recv, o.recvCount, o.dtype,
                                  o.op == ReduceOp::kAverage ? ReduceOp::kSum : o.op});
  if (o.op == ReduceOp::kAverage && o.recvCount > 0) {
    collectives::divideInPlace(o.recv, o.recvCount, o.dtype, size());
  }
}

// ---- alltoall --------------------------------------------------------------

void CommunicatorImpl::doAlltoall(const AlltoallOptions& o) {
  const char* what = "alltoall";
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkedPerRank(o.countPerRank, size(), o.dtype, what, "count per rank");
    checkBuffer(o.send, o.countPerRank, what, "send");
    checkBuffer(o.recv, o.countPerRank, what, "recv");
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kAlltoall;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.count = o.countPerRank;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return copyIfDistinct(o.send, o.recv, o.countPerRank, o.dtype);
  collectives::alltoallPairwise(ctx, {o.send, o.recv, o.countPerRank, o.dtype});
}

// ---- barrier ---------------------------------------------------------------

// A barrier is its descriptor exchange: every rank hears from every other
// in it (one shared-memory step, or the allgather of descriptors over the
// transport), and a rank that waits in another collective meets it there
// and fails with the mismatch naming both (descriptor_check.h) instead of
// each side waiting for messages of tags the other never sends. Only in an
// agreed scope (agreed_scope.h: no rank can be elsewhere) does a barrier
// over the transport take the dissemination rounds (log2 n, not n - 1).
void CommunicatorImpl::doBarrier() {
  if (size() == 1) return;
  collectives::Context ctx = nextContext();
  if (allLocalShm_ || !agreed_) {
    OpDescriptor d;
    d.kind = CollectiveKind::kBarrier;
    exchange(ctx, d, nullptr);
    return;
  }
  collectives::barrierDissemination(ctx);
}

// ---- blocking and async entry points -----------------------------------------

#define KOLO_ENTRY(Name, Do, Options)                                     \
  void CommunicatorImpl::Name(const Options& o) {                         \
    queue_.runBlocking([&] { guarded([&] { Do(o); }); });                 \
  }                                                                       \
  std::shared_ptr<Work> CommunicatorImpl::Name##Async(const Options& o) { \
    return queue_.submit([this, o] { guarded([&] { Do(o); }); });         \
  }

KOLO_ENTRY(allreduce, doAllreduce, AllreduceOptions)
KOLO_ENTRY(broadcast, doBroadcast, BroadcastOptions)
KOLO_ENTRY(allgather, doAllgather, AllgatherOptions)
KOLO_ENTRY(reduceScatter, doReduceScatter, ReduceScatterOptions)
KOLO_ENTRY(alltoall, doAlltoall, AlltoallOptions)
#undef KOLO_ENTRY

void CommunicatorImpl::barrier() {
  queue_.runBlocking([&] { guarded([&] { doBarrier(); }); });
}

std::shared_ptr<Work> CommunicatorImpl::barrierAsync() {
  return queue_.submit([this] { guarded([&] { doBarrier(); }); });
}

}  // namespace api
}  // namespace kolo

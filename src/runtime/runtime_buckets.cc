// The runtime's bucket execution: a cycle's ready operations, bucket by
// bucket (runtime.h; docs/runtime.md, "Fusion").
//
// Running a bucket of allreduces: when this rank submitted every member and
// none has a prescale, one segmented allreduce (AllreduceOptions::segments)
// reads the members' inputs and writes their outputs directly (the shm
// algorithm copies them straight into and out of its staging memory; the
// others pack them inside the communicator), and each output is then
// multiplied by postscale in place. Otherwise each member's input is copied
// into the fusion buffer (times prescale; a rank that did not submit the
// operation writes the reduction's identity: zeros for sum and average),
// one allreduce runs in place, and each slice is scaled on its way to the
// member's output (one pass). An average of every rank is the
// Communicator's average (the shm algorithm divides each slice as it
// reduces it); with a joined rank it runs as a sum and is divided by the
// contributors together with the postscale. A bucket of one
// allreduce runs in place in the caller's output buffer; the fusion planner
// gives every allreduce above kFusionAloneBytes (256 KiB) such a bucket.
// Other kinds run one collective per operation.
//
// CUDA device memory (OpSpec::onDevice, its own fusion key): on the
// communicator's device path (runtime_device.cc), else through pinned host
// memory (runtime_staging.cc; docs/gpu.md, "The host-staged path").
#include <algorithm>
#include <cstring>

#include "collectives/elementwise.h"
#include "collectives/reduce.h"
#include "common/logging.h"
#include "runtime/allreduce_bucket.h"
#include "runtime/runtime.h"

namespace kolo::runtime {

using collectives::copyScaled;
using collectives::fillIdentity;
using collectives::finishInto;
using collectives::scaleInPlace;

namespace {

int64_t rowElements(const OpSpec& s) {
  int64_t n = 1;
  for (size_t i = 1; i < s.shape.size(); ++i) n *= s.shape[i];
  return n;
}

}  // namespace

void Runtime::runBucket(const std::vector<size_t>& members, std::vector<ReadyOp>& ready,
                        size_t bytes, int bucketIndex) {
  bool fused = true;
  for (size_t m : members) fused = fused && ready[m].spec->kind == OpKind::kAllreduce;
  if (fused) {
    std::vector<ReadyOp*> ops;
    for (size_t m : members) ops.push_back(&ready[m]);
    return runAllreduce(ops, bytes, bucketIndex);
  }
  for (size_t m : members) runOne(ready[m], bucketIndex);
}

void Runtime::runAllreduce(const std::vector<ReadyOp*>& members, size_t bytes,
                           int bucketIndex) {
  // A group may mix keys: then each member runs alone.
  for (const ReadyOp* m : members) {
    const OpSpec& a = *members.front()->spec;
    const OpSpec& b = *m->spec;
    if (a.dtype != b.dtype || a.op != b.op || a.prescale != b.prescale ||
        a.postscale != b.postscale || a.onDevice != b.onDevice) {
      for (ReadyOp* x : members) runAllreduce({x}, x->spec->bytes(), bucketIndex);
      return;
    }
  }
  // Device memory: on the communicator's device path, or staged; members
  // that can run on neither fail here (runtime_device.cc).
  collectives::cuda::DeviceCollectives* path = nullptr;
  std::vector<ReadyOp*> routed;
  const bool onDevice = members.front()->spec->onDevice;
  if (onDevice) {
    path = routeDeviceBucket(members, routed);
    if (routed.empty()) return;
    bytes = 0;
    for (const ReadyOp* m : routed) bytes += m->spec->bytes();
  }
  return runAllreduceOn(onDevice ? routed : members, bytes, bucketIndex, path);
}

void Runtime::runAllreduceOn(const std::vector<ReadyOp*>& members, size_t bytes,
                             int bucketIndex,
                             collectives::cuda::DeviceCollectives* path) {
  const OpSpec& first = *members.front()->spec;
  // An average over the team's size is the Communicator's own average
  // (divided inside the shm algorithm while in cache): always so when every
  // rank contributed, and in Horovod's join mode, where a joined rank's
  // zeros count. Left-out joined ranks: the sum is divided by the
  // contributors afterwards.
  const bool everyRank =
      options_.joinMode == RuntimeOptions::JoinMode::kHorovod ||
      std::all_of(members.begin(), members.end(),
                  [&](const ReadyOp* m) { return m->contributors() == size_; });
  const bool averaged = first.op == ReduceOp::kAverage && everyRank;
  AllreduceBucket b{
      members,
      bytes,
      first.dtype,
      first.op,
      first.op == ReduceOp::kAverage && !averaged ? ReduceOp::kSum : first.op,
      averaged,
      timeline(),
      {}};
  if (b.tl) {
    // On a device path the host's algorithm does not run: the path names
    // what ran.
    std::vector<std::pair<std::string, std::string>> args;
    if (!path) {
      args.emplace_back("algorithm", algorithm_.empty() ? comm_->allreduceAlgorithm(bytes)
                                                        : algorithm_);
    }
    args.emplace_back("bytes", std::to_string(bytes));
    args.emplace_back("bucket", std::to_string(bucketIndex));
    args.emplace_back("tensors", std::to_string(members.size()));
    if (first.onDevice) args.emplace_back("path", std::string(pathName(path)));
    b.args = timelineArgs(args);
  }
  cycleBytes_ += bytes;
  if (first.onDevice) {
    KOLO_LOG(kDebug) << "runtime: allreduce bucket " << bucketIndex << " ("
                     << members.size() << " tensors, " << bytes << " bytes) on the "
                     << pathName(path) << " path";
    return path ? allreduceOnPath(b, *path) : allreduceStaged(b);
  }
  if (members.size() == 1 && members[0]->localId) return allreduceInPlace(b);
  const bool allLocal = std::all_of(members.begin(), members.end(), [](const ReadyOp* m) {
    return m->localId.has_value();
  });
  if (allLocal && first.prescale == 1.0) return allreduceSegmented(b);
  allreduceFused(b);
}

// One operation of this rank's: in place in the caller's output buffer.
void Runtime::allreduceInPlace(const AllreduceBucket& b) {
  ReadyOp& r = *b.members[0];
  Op& o = opAt(*r.localId);
  const size_t n = static_cast<size_t>(r.spec->elements());
  copyScaled(o.output, o.input, n, b.dtype, r.spec->prescale);
  {
    TimelineSpan span(b.tl.get(), r.spec->name, phase::kCollective, b.args);
    AllreduceOptions ar = b.options();
    ar.send = ar.recv = o.output;
    ar.count = n;
    ar.algorithm = algorithm_;
    comm_->allreduce(ar);
  }
  b.finishValues(r, o.output, o.output);
  finish(*r.localId);
}

// Several of this rank's, no prescale: one segmented allreduce straight
// from the inputs into the outputs (the shm algorithm copies nothing else;
// the others pack them inside the communicator), then each output finished
// in place.
void Runtime::allreduceSegmented(const AllreduceBucket& b) {
  segments_.clear();
  for (const ReadyOp* m : b.members) {
    const Op& o = opAt(*m->localId);
    segments_.push_back({o.input, o.output, static_cast<size_t>(m->spec->elements())});
    if (b.tl) b.tl->begin(m->spec->name, phase::kCollective, b.args);
  }
  AllreduceOptions ar = b.options();
  ar.algorithm = algorithm_;
  ar.segments = segments_.data();
  ar.segmentCount = segments_.size();
  comm_->allreduce(ar);
  // Nothing left to do to the outputs when the collective averaged (or the
  // reduction is not an average) and there is no postscale (the members
  // share one: same key).
  const bool rework = (b.op == ReduceOp::kAverage && !b.averaged) ||
                      b.members.front()->spec->postscale != 1.0;
  std::vector<OpId> done;
  done.reserve(b.members.size());
  for (const ReadyOp* m : b.members) {
    const ReadyOp& r = *m;
    if (b.tl) b.tl->end(r.spec->name);
    if (rework) {
      void* out = opAt(*r.localId).output;
      b.finishValues(r, out, out);
    }
    done.push_back(*r.localId);
  }
  finishAll(done);
}

// A joined rank's share (the reduction's identity) or a prescale: through
// the fusion buffer.
void Runtime::allreduceFused(const AllreduceBucket& b) {
  const size_t esize = elementSize(b.dtype);
  if (fusion_.size() < b.bytes) fusion_.resize(b.bytes);
  size_t at = 0;
  for (const ReadyOp* m : b.members) {
    const ReadyOp& r = *m;
    const size_t n = static_cast<size_t>(r.spec->elements());
    uint8_t* p = fusion_.data() + at;
    at += n * esize;
    if (!r.localId) {
      fillIdentity(p, n, b.dtype, b.commOp);
      continue;
    }
    TimelineSpan span(b.tl.get(), r.spec->name, phase::kMemcpyIn);
    copyScaled(p, opAt(*r.localId).input, n, b.dtype, r.spec->prescale);
  }
  if (b.tl) {
    for (const ReadyOp* m : b.members) {
      if (m->localId) b.tl->begin(m->spec->name, phase::kCollective, b.args);
    }
  }
  AllreduceOptions ar = b.options();
  ar.send = ar.recv = fusion_.data();
  ar.algorithm = algorithm_;
  comm_->allreduce(ar);
  at = 0;
  std::vector<OpId> done;
  done.reserve(b.members.size());
  for (const ReadyOp* m : b.members) {
    const ReadyOp& r = *m;
    const size_t n = static_cast<size_t>(r.spec->elements());
    uint8_t* p = fusion_.data() + at;
    at += n * esize;
    if (!r.localId) continue;
    if (b.tl) b.tl->end(r.spec->name);
    TimelineSpan span(b.tl.get(), r.spec->name, phase::kMemcpyOut);
    b.finishValues(r, opAt(*r.localId).output, p);
    done.push_back(*r.localId);
  }
  finishAll(done);
}

// In Horovod's join mode, an operation other than an allreduce or barrier
// that a joined rank would take part in fails on every rank that submitted
// it, naming the first joined rank. Decided alike on every rank (the
// submissions are agreed), so no collective runs anywhere.
std::exception_ptr Runtime::joinedRankError(const ReadyOp& r) const {
  const OpSpec& s = *r.spec;
  if (options_.joinMode != RuntimeOptions::JoinMode::kHorovod ||
      s.kind == OpKind::kBarrier || r.contributors() == size_) {
    return nullptr;
  }
  const int joined =
      static_cast<int>(std::find(r.submitted.begin(), r.submitted.end(), uint8_t{0}) -
                       r.submitted.begin());
  return errorPtr(ErrorCode::kInvalidArgument,
                  std::string(toString(s.kind)) + " '" + s.name + "': rank " +
                      std::to_string(joined) +
                      " has joined (join()); with KOLO_JOIN_MODE=horovod only "
                      "allreduce and barrier go on with joined ranks");
}

// Every kind but a fused allreduce: one collective for one operation. A
// rank that did not submit it (joined) takes part with nothing to give:
// zero rows for allgather and alltoall, the identity for reducescatter,
// its output discarded (KOLO_JOIN_MODE=absent; in Horovod's mode these
// kinds fail instead: joinedRankError).
void Runtime::runOne(ReadyOp& r, int bucketIndex) {
  const OpSpec& s = *r.spec;
  if (s.kind == OpKind::kAllreduce) {
    return runAllreduce({&r}, s.bytes(), bucketIndex);
  }
  Op* o = r.localId ? &opAt(*r.localId) : nullptr;
  std::exception_ptr opError = joinedRankError(r);
  // Device memory: on the device path, staged, or (an error alike on every
  // rank) nowhere.
  DeviceRoute route;
  if (s.onDevice && !opError) {
    route = deviceRoute(r);
    opError = route.error;
  }
  StagedIo io;
  const bool staged = o && !opError && s.onDevice && !route.path;
  if (staged) stageIn(r, *o, io);
  {
    auto tl = timeline();
    std::string args;
    if (tl && o) {
      std::vector<std::pair<std::string, std::string>> fields{
          {"bytes", std::to_string(s.bytes())}, {"bucket", std::to_string(bucketIndex)}};
      if (s.onDevice) fields.emplace_back("path", std::string(pathName(route.path)));
      args = timelineArgs(fields);
    }
    TimelineSpan span(o ? tl.get() : nullptr, s.name, phase::kCollective, args);
    if (s.onDevice && !opError) {
      KOLO_LOG(kDebug) << "runtime: " << toString(s.kind) << " '" << s.name << "' on the "
                       << pathName(route.path) << " path";
    }
    if (route.path) {
      runOnPath(r, *o, *route.path);
      return finish(*r.localId);
    }
    switch (opError ? OpKind::kJoin : s.kind) {  // kJoin: run nothing
      case OpKind::kBarrier: comm_->barrier(); break;
      case OpKind::kBroadcast: opError = runBroadcast(r, o); break;
      case OpKind::kReduceScatter: runReduceScatter(r, o); break;
      case OpKind::kAllgather: runAllgather(r, o); break;
      case OpKind::kAlltoall: runAlltoall(r, o); break;
      case OpKind::kAllreduce:
      case OpKind::kJoin: break;
    }
  }
  if (staged) stageOut(r, *o, io);
  if (o) finish(*r.localId, opError);
}

// A joined rank's scratch output of `bytes` (kept across cycles).
void* Runtime::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

std::exception_ptr Runtime::runBroadcast(const ReadyOp& r, Op* o) {
  const OpSpec& s = *r.spec;
  if (!r.submitted[s.root]) {
    // Decided alike on every rank: no collective runs.
    return errorPtr(ErrorCode::kInvalidArgument,
                    "broadcast '" + s.name + "': root rank " + std::to_string(s.root) +
                        " has joined and has no data");
  }
  const size_t esize = elementSize(s.dtype);
  const size_t n = static_cast<size_t>(s.elements());
  void* buf = o ? o->output : scratch(n * esize);
  if (o && s.root == rank_ && n > 0 && o->input != o->output) {
    std::memcpy(o->output, o->input, n * esize);
  }
  BroadcastOptions b;
  b.buffer = buf;
  b.count = n;
  b.dtype = s.dtype;
  b.root = s.root;
  comm_->broadcast(b);
  return nullptr;
}

void Runtime::runReduceScatter(const ReadyOp& r, Op* o) {
  const OpSpec& s = *r.spec;
  const size_t esize = elementSize(s.dtype);
  const size_t n = static_cast<size_t>(s.elements());
  const size_t recvCount = n / size_;
  const ReduceOp commOp = s.op == ReduceOp::kAverage ? ReduceOp::kSum : s.op;
  const void* send;
  if (o && s.prescale == 1.0) {
    send = o->input;
  } else {
    if (fusion_.size() < n * esize) fusion_.resize(n * esize);
    if (o) {
      std::memcpy(fusion_.data(), o->input, n * esize);
      scaleInPlace(fusion_.data(), n, s.dtype, s.prescale);
    } else {
      fillIdentity(fusion_.data(), n, s.dtype, commOp);
    }
    send = fusion_.data();
  }
  void* recv = o ? o->output : scratch(recvCount * esize);
  ReduceScatterOptions rs;
  rs.send = send;
  rs.recv = recv;
  rs.recvCount = recvCount;
  rs.dtype = s.dtype;
  rs.op = commOp;
  comm_->reduceScatter(rs);
  if (o) {
    if (s.op == ReduceOp::kAverage && recvCount > 0) {
      collectives::divideInPlace(recv, recvCount, s.dtype, std::max(1, r.contributors()));
    }
    scaleInPlace(recv, recvCount, s.dtype, s.postscale);
    auto shape = s.shape;
    shape[0] /= size_;
    o->handle->setOutputShape(std::move(shape));
  }
  cycleBytes_ += s.bytes();
}

void Runtime::runAllgather(const ReadyOp& r, Op* o) {
  const OpSpec& s = *r.spec;
  const size_t esize = elementSize(s.dtype);
  const size_t row = static_cast<size_t>(rowElements(s));
  std::vector<size_t> counts(size_);
  size_t total = 0;
  int64_t rows = 0;
  for (int q = 0; q < size_; ++q) {
    counts[q] = static_cast<size_t>(r.firstDims[q]) * row;
    total += counts[q];
    rows += r.firstDims[q];
  }
  AllgatherOptions ag;
  ag.counts = counts;
  ag.dtype = s.dtype;
  if (o) {
    auto& out = o->handle->mutableOutput();
    out.resize(total * esize);
    ag.send = o->input != nullptr ? o->input : out.data();
    ag.recv = out.data();
    auto shape = s.shape;
    shape[0] = rows;
    o->handle->setOutputShape(std::move(shape));
  } else {
    ag.recv = scratch(total * esize);
    ag.send = ag.recv;
  }
  comm_->allgather(ag);
}

std::vector<int64_t> Runtime::alltoallMatrix(const ReadyOp& r, const Op* o,
                                             std::vector<int64_t>& mine) {
  mine.assign(size_, 0);
  if (o) {
    if (o->splits.empty()) {
      std::fill(mine.begin(), mine.end(), r.spec->shape[0] / size_);
    } else {
      mine = o->splits;
    }
  }
  std::vector<int64_t> matrix(size_ * size_);
  AllgatherOptions ag;
  ag.send = mine.data();
  ag.recv = matrix.data();
  ag.count = size_;
  ag.dtype = DataType::kInt64;
  comm_->allgather(ag);
  return matrix;
}

// Exchanges the splits (rows to each rank) first: matrix[src][dst]. Equal
// splits everywhere go straight from the input to the output; others go
// through padded blocks of the largest split, compacted afterwards.
void Runtime::runAlltoall(const ReadyOp& r, Op* o) {
  const OpSpec& s = *r.spec;
  const size_t esize = elementSize(s.dtype);
  const size_t row = static_cast<size_t>(rowElements(s));
  std::vector<int64_t> mine;
  const std::vector<int64_t> matrix = alltoallMatrix(r, o, mine);
  int64_t most = 0;
  bool uniform = true;
  for (int64_t v : matrix) {
    most = std::max(most, v);
    uniform = uniform && v == matrix[0];
  }
  int64_t rowsIn = 0;
  for (int q = 0; q < size_; ++q) rowsIn += matrix[q * size_ + rank_];
  std::vector<uint8_t> discard;
  std::vector<uint8_t>& out = o ? o->handle->mutableOutput() : discard;
  out.resize(static_cast<size_t>(rowsIn) * row * esize);
  AlltoallOptions a;
  a.countPerRank = static_cast<size_t>(most) * row;  // elements per rank
  a.dtype = s.dtype;
  if (uniform && o) {
    a.send = o->input;
    a.recv = out.data();
    comm_->alltoall(a);
  } else {
    alltoallPadded(a, o, mine, matrix, row * esize, out);
  }
  if (o) {
    auto shape = s.shape;
    shape[0] = rowsIn;
    o->handle->setOutputShape(std::move(shape));
  }
}

// Padded blocks of a.countPerRank elements per rank in the fusion buffer:
// this rank's rows for rank q at block q, then the rows from rank q
// compacted into `out`.
void Runtime::alltoallPadded(AlltoallOptions& a, const Op* o,
                             const std::vector<int64_t>& mine,
                             const std::vector<int64_t>& matrix, size_t rowBytes,
                             std::vector<uint8_t>& out) {
  const size_t blockBytes = a.countPerRank * elementSize(a.dtype);
  if (fusion_.size() < 2 * size_ * blockBytes) fusion_.resize(2 * size_ * blockBytes);
  uint8_t* send = fusion_.data();
  uint8_t* recv = fusion_.data() + size_ * blockBytes;
  size_t from = 0;
  for (int q = 0; q < size_; ++q) {
    const size_t b = static_cast<size_t>(mine[q]) * rowBytes;
    if (b > 0) {
      std::memcpy(send + q * blockBytes, static_cast<const uint8_t*>(o->input) + from, b);
    }
    from += b;
  }
  a.send = send;
  a.recv = recv;
  comm_->alltoall(a);
  size_t to = 0;
  for (int q = 0; q < size_; ++q) {
    const size_t b = static_cast<size_t>(matrix[q * size_ + rank_]) * rowBytes;
    if (b > 0) std::memcpy(out.data() + to, recv + q * blockBytes, b);
    to += b;
  }
}

}  // namespace kolo::runtime

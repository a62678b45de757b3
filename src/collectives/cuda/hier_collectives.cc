// The hierarchical device path (hier_collectives.h).
//
// Nomenclature: H hosts; on a host, L ranks numbered by local rank q; m =
// the smallest L of any host. The vector of an allreduce is split into m
// shards (blockOf(count, m, i)); local rank q < m owns shard q on its host,
// local ranks q >= m own none. The "cross group" of local rank q is the
// ranks of local rank q on every host (ctx.cross, host order), so for q < m
// its rank is the host index.
//
// allreduce (send -> recv on every rank):
//   1. intra reduce-scatter on the devices: local rank q gets shard q of the
//      host's sum, in device scratch (not in recv: an in-place call's
//      peers may still read their shards of send);
//   2. the shard to pinned host memory (after the stream's earlier work);
//   3. allreduce of the shard in the cross group, with the flat algorithm
//      the selection picks for one rank per host (as allreduce_hier.cc);
//      an average's sum is divided by the job's size here, on the host, in
//      the dtype's compute precision (the CPU collectives' rounding);
//   4. the shard back to the device, at its place in recv;
//   5. intra allgather of the shards, in place in recv.
// Each byte crosses the network 2(H-1)/H times per shard owner, and the
// slow links carry 1/m of the vector per rank, in parallel over m groups.
//
// broadcast from `root` (host R, local rank p): the carrier of each host is
// local rank c = p when p < m, else 0 (then R first broadcasts inside from
// p, so its local rank 0 holds the data). The carriers broadcast across
// hosts from R over their cross group (binomial tree, host memory), then
// every host except R-when-done broadcasts inside from c.
//
// Every collective calls HierHost::run exactly once on every rank (the tag
// blocks of the communicator must advance alike), whether or not this rank
// sends anything in it.
#include "collectives/cuda/hier_collectives.h"

#include <cstring>
#include <numeric>

#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "collectives/selection.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

std::vector<size_t> prefixSums(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

size_t sum(const std::vector<size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

// The cross group of this rank as a Context of its own, with the tags of
// `ctx`'s block.
Context crossContext(Context& ctx, size_t hosts) {
  KOLO_CHECK(ctx.cross != nullptr);
  KOLO_CHECK_EQ(static_cast<size_t>(ctx.cross->size()), hosts);
  Context cross{*ctx.cross, ctx.layout};
  cross.tag = ctx.tag;
  cross.selector = ctx.selector != nullptr ? ctx.selector->crossHosts() : nullptr;
  return cross;
}

}  // namespace

// ---- the host stand-in --------------------------------------------------------

void HostDeviceMemory::toHost(void* host, const void* device, size_t bytes, void*) {
  if (bytes > 0) std::memmove(host, device, bytes);
}
void HostDeviceMemory::toDevice(void* device, const void* host, size_t bytes, void*) {
  if (bytes > 0) std::memmove(device, host, bytes);
}
void HostDeviceMemory::copy(void* dst, const void* src, size_t bytes, void*) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}
uint8_t* HostDeviceMemory::hostScratch(size_t bytes, int slot) {
  KOLO_CHECK(slot == 0 || slot == 1);
  if (host_[slot].size() < bytes || host_[slot].empty()) host_[slot].resize(bytes + 1);
  return host_[slot].data();
}
void* HostDeviceMemory::deviceScratch(size_t bytes, int slot) {
  KOLO_CHECK(slot == 0 || slot == 1);
  if (device_[slot].size() < bytes || device_[slot].empty())
    device_[slot].resize(bytes + 1);
  return device_[slot].data();
}

// ---- HierCollectives ----------------------------------------------------------

HierCollectives::HierCollectives(std::unique_ptr<DeviceCollectives> intra, HierHost& host,
                                 std::unique_ptr<DeviceMemory> memory,
                                 std::vector<std::vector<int>> hosts, int rank)
    : intra_(std::move(intra)),
      host_(host),
      memory_(std::move(memory)),
      hosts_(std::move(hosts)),
      rank_(rank),
      size_(0),
      shards_(0) {
  KOLO_CHECK(intra_ != nullptr && memory_ != nullptr && !hosts_.empty());
  for (const auto& ranks : hosts_) size_ += static_cast<int>(ranks.size());
  hostOf_.assign(size_, -1);
  localOf_.assign(size_, -1);
  shards_ = size_;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    KOLO_CHECK(!hosts_[h].empty());
    shards_ = std::min(shards_, static_cast<int>(hosts_[h].size()));
    for (size_t q = 0; q < hosts_[h].size(); ++q) {
      const int r = hosts_[h][q];
      KOLO_CHECK(r >= 0 && r < size_ && hostOf_[r] < 0);
      hostOf_[r] = static_cast<int>(h);
      localOf_[r] = static_cast<int>(q);
    }
  }
  KOLO_CHECK(rank_ >= 0 && rank_ < size_);
  KOLO_CHECK_EQ(intra_->rank(), localOf_[rank_]);
  KOLO_CHECK_EQ(static_cast<size_t>(intra_->size()), hosts_[hostOf_[rank_]].size());
}

void HierCollectives::guarded(const std::function<void()>& op) {
  if (broken_) std::rethrow_exception(broken_);
  try {
    op();
  } catch (...) {
    broken_ = std::current_exception();
    throw;
  }
}

void HierCollectives::allreduce(const void* send, void* recv, size_t count,
                                DataType dtype, ReduceOp op, void* stream) {
  guarded([&] { doAllreduce(send, recv, count, dtype, op, stream); });
}

void HierCollectives::doAllreduce(const void* send, void* recv, size_t count,
                                  DataType dtype, ReduceOp op, void* stream) {
  if (count == 0) return;
  const size_t es = elementSize(dtype);
  const ReduceOp reduceOp = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  const int q = localOf_[rank_];
  std::vector<size_t> counts(intra_->size(), 0);
  for (int i = 0; i < shards_; ++i) counts[i] = blockOf(count, shards_, i).count;
  const Block mine = q < shards_ ? blockOf(count, shards_, q) : Block{0, 0};
  const size_t bytes = mine.count * es;

  void* shard = memory_->deviceScratch(bytes, 0);
  intra_->reduceScatter(send, shard, counts, dtype, reduceOp, stream);  // 1
  uint8_t* host = memory_->hostScratch(bytes, 0);
  memory_->toHost(host, shard, bytes, stream);  // 2
  host_.run([&](Context& ctx) {                 // 3
    if (mine.count == 0 || hosts_.size() == 1) return;
    Context cross = crossContext(ctx, hosts_.size());
    const AllreduceAlgorithm& algo = selectAllreduce(bytes, cross);
    algo.run(cross, AllreduceArgs{host, host, mine.count, dtype, reduceOp});
  });
  if (op == ReduceOp::kAverage && mine.count > 0) {
    divideInPlace(host, mine.count, dtype, size_);
  }
  uint8_t* place = static_cast<uint8_t*>(recv) + mine.offset * es;
  memory_->toDevice(place, host, bytes, stream);          // 4
  intra_->allgather(place, recv, counts, dtype, stream);  // 5
}

void HierCollectives::broadcast(void* buffer, size_t count, DataType dtype, int root,
                                void* stream) {
  guarded([&] { doBroadcast(buffer, count, dtype, root, stream); });
}

void HierCollectives::doBroadcast(void* buffer, size_t count, DataType dtype, int root,
                                  void* stream) {
  KOLO_CHECK(root >= 0 && root < size_);
  const size_t bytes = count * elementSize(dtype);
  const int rootHost = hostOf_[root];
  const int p = localOf_[root];
  const int c = p < shards_ ? p : 0;  // the carriers' local rank
  const bool onRootHost = hostOf_[rank_] == rootHost;
  const bool carrier = localOf_[rank_] == c;
  const bool rootHostFirst = p != c;
  if (onRootHost && rootHostFirst && count > 0) {
    intra_->broadcast(buffer, count, dtype, p, stream);
  }
  uint8_t* host = memory_->hostScratch(bytes, 0);
  if (carrier && onRootHost) memory_->toHost(host, buffer, bytes, stream);
  host_.run([&](Context& ctx) {
    if (!carrier || hosts_.size() == 1 || count == 0) return;
    Context cross = crossContext(ctx, hosts_.size());
    broadcastBinomial(cross, BroadcastArgs{host, count, dtype, rootHost});
  });
  if (count == 0) return;
  if (carrier && !onRootHost) memory_->toDevice(buffer, host, bytes, stream);
  if (!(onRootHost && rootHostFirst)) intra_->broadcast(buffer, count, dtype, c, stream);
}

void HierCollectives::allgather(const void* send, void* recv,
                                const std::vector<size_t>& counts, DataType dtype,
                                void* stream) {
  guarded([&] { doAllgather(send, recv, counts, dtype, stream); });
}

// Staged: every rank's block to host memory, kolo's ring allgather over
// the whole group, the result back to the device.
void HierCollectives::doAllgather(const void* send, void* recv,
                                  const std::vector<size_t>& counts, DataType dtype,
                                  void* stream) {
  KOLO_CHECK_EQ(counts.size(), static_cast<size_t>(size_));
  const size_t es = elementSize(dtype);
  const size_t total = sum(counts);
  const std::vector<size_t> offsets = prefixSums(counts);
  uint8_t* host = memory_->hostScratch(total * es, 0);
  uint8_t* mine = host + offsets[rank_] * es;
  memory_->toHost(mine, send, counts[rank_] * es, stream);
  host_.run([&](Context& ctx) {
    if (size_ == 1 || total == 0) return;
    allgatherRing(ctx, AllgatherArgs{mine, host, counts, dtype});
  });
  memory_->toDevice(recv, host, total * es, stream);
}

void HierCollectives::reduceScatter(const void* send, void* recv,
                                    const std::vector<size_t>& counts, DataType dtype,
                                    ReduceOp op, void* stream) {
  // Composed: the hierarchical allreduce of the whole vector, then this
  // rank's block (the network carries what an allreduce carries; the
  // ranks' blocks may differ in size, which the flat reduce-scatters of
  // the host do not take).
  guarded([&] {
    KOLO_CHECK_EQ(counts.size(), static_cast<size_t>(size_));
    const size_t es = elementSize(dtype);
    const size_t total = sum(counts);
    void* whole = memory_->deviceScratch(total * es, 1);
    doAllreduce(send, whole, total, dtype, op, stream);
    const size_t offset = prefixSums(counts)[rank_];
    memory_->copy(recv, static_cast<uint8_t*>(whole) + offset * es, counts[rank_] * es,
                  stream);
  });
}

void HierCollectives::alltoall(const void* send, const std::vector<size_t>& sendCounts,
                               void* recv, const std::vector<size_t>& recvCounts,
                               DataType dtype, void* stream) {
  guarded([&] { doAlltoall(send, sendCounts, recv, recvCounts, dtype, stream); });
}

// Staged: the whole send buffer to host memory, one message to and from
// every peer (all posted, then waited), the received blocks to the device.
void HierCollectives::doAlltoall(const void* send, const std::vector<size_t>& sendCounts,
                                 void* recv, const std::vector<size_t>& recvCounts,
                                 DataType dtype, void* stream) {
  KOLO_CHECK_EQ(sendCounts.size(), static_cast<size_t>(size_));
  KOLO_CHECK_EQ(recvCounts.size(), static_cast<size_t>(size_));
  const size_t es = elementSize(dtype);
  const std::vector<size_t> sendAt = prefixSums(sendCounts);
  const std::vector<size_t> recvAt = prefixSums(recvCounts);
  uint8_t* out = memory_->hostScratch(sum(sendCounts) * es, 0);
  uint8_t* in = memory_->hostScratch(sum(recvCounts) * es, 1);
  memory_->toHost(out, send, sum(sendCounts) * es, stream);
  host_.run([&](Context& ctx) {
    std::vector<transport::RequestPtr> requests;
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) {
        KOLO_CHECK_EQ(sendCounts[j], recvCounts[j]);
        if (sendCounts[j] > 0) {
          std::memcpy(in + recvAt[j] * es, out + sendAt[j] * es, sendCounts[j] * es);
        }
        continue;
      }
      if (recvCounts[j] > 0) {
        requests.push_back(
            ctx.world.irecv(j, ctx.tag, in + recvAt[j] * es, recvCounts[j] * es));
      }
      if (sendCounts[j] > 0) {
        requests.push_back(
            ctx.world.isend(j, ctx.tag, out + sendAt[j] * es, sendCounts[j] * es));
      }
    }
    ctx.world.waitAll(requests);
  });
  memory_->toDevice(recv, in, sum(recvCounts) * es, stream);
}

}  // namespace kolo::collectives::cuda

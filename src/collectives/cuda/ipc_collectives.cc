// IpcCollectives: the schedules of ipc_collectives.h on cuda_ipc::IpcGroup.
#include "collectives/cuda/ipc_collectives.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <numeric>

#include "collectives/cuda/cuda_ipc_device.h"
#include "collectives/cuda/device_reduce.h"
#include "common/check.h"
#include "transport/cuda_ipc/ipc_group.h"

namespace kolo::collectives::cuda {
namespace {

using cuda_ipc::IpcGroup;
using Use = IpcGroup::Use;

// The collective in a step's header.
enum Kind : uint32_t {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kAlltoall
};

// Allreduce slices start on multiples of 256 bytes (16-byte vector loads
// in the kernel; whole cache lines per rank).
constexpr size_t kSliceBytes = 256;

uint64_t digest(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the counts
  for (size_t c : counts) {
    h ^= static_cast<uint64_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<size_t> prefix(const std::vector<size_t>& counts) {
  std::vector<size_t> out(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) out[i + 1] = out[i] + counts[i];
  return out;
}

uint8_t* at(void* p, size_t bytes) {
  return static_cast<uint8_t*>(p) + bytes;
}

class IpcCollectives final : public DeviceCollectives {
 public:
  IpcCollectives(const IpcOptions& options, std::unique_ptr<IpcGroup> group)
      : options_(options), group_(std::move(group)) {}

  std::string_view name() const override { return "ipc"; }
  int device() const override { return options_.device; }
  int rank() const override { return options_.localRank; }
  int size() const override { return options_.localSize; }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                 void* stream) override;
  void broadcast(void* buffer, size_t count, DataType dtype, int root,
                 void* stream) override;
  void allgather(const void* send, void* recv, const std::vector<size_t>& counts,
                 DataType dtype, void* stream) override;
  void reduceScatter(const void* send, void* recv, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, void* stream) override;
  void alltoall(const void* send, const std::vector<size_t>& sendCounts, void* recv,
                const std::vector<size_t>& recvCounts, DataType dtype,
                void* stream) override;

 private:
  // Checks that `buffers` are memory of the device (Error(kInvalidArgument),
  // the object stays usable), then runs one step's schedule; an error in it
  // breaks the object (later calls rethrow it).
  void guarded(const char* what, const std::vector<IpcGroup::Buffer>& buffers,
               const std::function<void()>& body);
  // Rethrows the error that broke the object.
  void checkUsable() const;
  void checkDtype(const char* what, DataType dtype) const;
  void checkCounts(const char* what, const char* name,
                   const std::vector<size_t>& counts) const;
  // Null with elements, or a byte size that overflows.
  void checkPointer(const char* what, const char* name, const void* p, size_t count,
                    DataType dtype) const;
  // Rank r's slice of an allreduce of `count` elements: [begin, end).
  std::pair<size_t, size_t> slice(size_t count, size_t elementBytes, int r) const;
  void checkAlltoallCounts() const;
  int me() const { return options_.localRank; }
  int globalMe() const { return options_.globalRanks[options_.localRank]; }

  IpcOptions options_;
  std::unique_ptr<IpcGroup> group_;
  std::exception_ptr broken_;
};

void IpcCollectives::guarded(const char* what,
                             const std::vector<IpcGroup::Buffer>& buffers,
                             const std::function<void()>& body) {
  if (broken_) std::rethrow_exception(broken_);
  group_->checkBuffers(what, buffers);
  try {
    body();
  } catch (...) {
    broken_ = std::current_exception();
    throw;
  }
}

void IpcCollectives::checkUsable() const {
  if (broken_) std::rethrow_exception(broken_);
}

void IpcCollectives::checkDtype(const char* what, DataType dtype) const {
  if (!isValid(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalMe() << ": " << what
                       << " through CUDA IPC: unknown dtype value "
                       << static_cast<int>(dtype));
  }
}

void IpcCollectives::checkCounts(const char* what, const char* name,
                                 const std::vector<size_t>& counts) const {
  if (counts.size() != static_cast<size_t>(size())) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalMe() << ": " << what << " through CUDA IPC: " << name
                       << " has " << counts.size() << " entries, the group has " << size()
                       << " ranks");
  }
}

void IpcCollectives::checkPointer(const char* what, const char* name, const void* p,
                                  size_t count, DataType dtype) const {
  if (count > SIZE_MAX / elementSize(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalMe() << ": " << what << " through CUDA IPC: " << name
                       << " of " << count << " " << toString(dtype)
                       << " overflows the address space");
  }
  if (p == nullptr && count != 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "rank " << globalMe() << ": " << what
                                                    << " through CUDA IPC: null " << name
                                                    << " with " << count << " elements");
  }
}

std::pair<size_t, size_t> IpcCollectives::slice(size_t count, size_t elementBytes,
                                                int r) const {
  if (options_.oneWriter)
    return r == 0 ? std::pair<size_t, size_t>{0, count}
                  : std::pair<size_t, size_t>{count, count};
  const size_t n = static_cast<size_t>(size());
  const size_t align = kSliceBytes / elementBytes;
  auto start = [&](size_t k) -> size_t {
    if (k == 0) return 0;
    if (k == n) return count;
    const size_t even = (count / n) * k + std::min(k, count % n);
    return even / align * align;
  };
  return {start(r), start(r + 1)};
}

void IpcCollectives::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                               ReduceOp op, void* stream) {
  constexpr const char* kWhat = "allreduce";
  checkUsable();
  checkDtype(kWhat, dtype);
  if (!isValid(op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalMe() << ": " << kWhat
                       << " through CUDA IPC: unknown op value " << static_cast<int>(op));
  }
  checkPointer(kWhat, "send", send, count, dtype);
  checkPointer(kWhat, "recv", recv, count, dtype);
  if (count == 0) return;
  const size_t es = elementSize(dtype);
  const bool inPlace = send == recv;
  std::vector<IpcGroup::Buffer> buffers;
  if (inPlace) {
    buffers.push_back({recv, count * es, Use::kInOut});
  } else {
    buffers.push_back({const_cast<void*>(send), count * es, Use::kInput});
    buffers.push_back({recv, count * es, Use::kOutput});
  }
  guarded(kWhat, buffers, [&] {
    IpcGroup::Header h;
    h.kind = kAllreduce;
    h.dtype = static_cast<int32_t>(dtype);
    h.op = static_cast<int32_t>(op);
    h.count = count;
    h.root = options_.oneWriter ? 1 : 0;  // every rank must split the work alike
    group_->begin("allreduce", h, buffers, {}, stream);
    group_->await(stream);
    const auto [lo, hi] = slice(count, es, me());
    if (hi > lo) {
      const int n = size();
      std::vector<const void*> srcs(n);
      std::vector<void*> dsts(n);
      for (int r = 0; r < n; ++r) {
        srcs[r] = at(group_->buffer(r, 0), lo * es);
        dsts[r] = at(group_->buffer(r, inPlace ? 0 : 1), lo * es);
      }
      if (n == 1) {  // one rank: the values as they are (no round trip through float)
        if (dsts[0] != srcs[0])
          group_->device().copy(dsts[0], srcs[0], (hi - lo) * es, stream);
      } else {
        group_->device().reduce(dsts.data(), n, srcs.data(), n, hi - lo, dtype, op,
                                stream);
      }
    }
    group_->finish(stream);
  });
}

void IpcCollectives::broadcast(void* buffer, size_t count, DataType dtype, int root,
                               void* stream) {
  constexpr const char* kWhat = "broadcast";
  checkUsable();
  checkDtype(kWhat, dtype);
  if (root < 0 || root >= size()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalMe() << ": " << kWhat << " through CUDA IPC: root "
                       << root << " is not a rank of the group of " << size());
  }
  checkPointer(kWhat, "buffer", buffer, count, dtype);
  if (count == 0 || size() == 1) return;
  const size_t bytes = count * elementSize(dtype);
  const std::vector<IpcGroup::Buffer> buffers = {
      {buffer, bytes, me() == root ? Use::kInput : Use::kOutput}};
  guarded(kWhat, buffers, [&] {
    IpcGroup::Header h;
    h.kind = kBroadcast;
    h.dtype = static_cast<int32_t>(dtype);
    h.root = root;
    h.count = count;
    group_->begin("broadcast", h, buffers, {}, stream);
    group_->await(stream);
    if (me() != root) {
      group_->device().copy(group_->buffer(me(), 0), group_->buffer(root, 0), bytes,
                            stream);
    }
    group_->finish(stream);
  });
}

void IpcCollectives::allgather(const void* send, void* recv,
                               const std::vector<size_t>& counts, DataType dtype,
                               void* stream) {
  constexpr const char* kWhat = "allgather";
  checkUsable();
  checkDtype(kWhat, dtype);
  checkCounts(kWhat, "counts", counts);
  const std::vector<size_t> offsets = prefix(counts);
  const size_t total = offsets.back();
  checkPointer(kWhat, "send", send, counts[me()], dtype);
  checkPointer(kWhat, "recv", recv, total, dtype);
  if (total == 0) return;
  const size_t es = elementSize(dtype);
  const std::vector<IpcGroup::Buffer> buffers = {
      {const_cast<void*>(send), counts[me()] * es, Use::kInput},
      {recv, total * es, Use::kOutput}};
  guarded(kWhat, buffers, [&] {
    IpcGroup::Header h;
    h.kind = kAllgather;
    h.dtype = static_cast<int32_t>(dtype);
    h.count = total;
    h.countsDigest = digest(counts);
    group_->begin("allgather", h, buffers, {}, stream);
    group_->await(stream);
    for (int r = 0; r < size(); ++r) {
      void* dst = at(group_->buffer(me(), 1), offsets[r] * es);
      const void* src = group_->buffer(r, 0);
      if (counts[r] != 0 && dst != src)
        group_->device().copy(dst, src, counts[r] * es, stream);
    }
    group_->finish(stream);
  });
}

void IpcCollectives::reduceScatter(const void* send, void* recv,
                                   const std::vector<size_t>& counts, DataType dtype,
                                   ReduceOp op, void* stream) {
  constexpr const char* kWhat = "reduceScatter";
  checkUsable();
  checkDtype(kWhat, dtype);
  if (!isValid(op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalMe() << ": " << kWhat
                       << " through CUDA IPC: unknown op value " << static_cast<int>(op));
  }
  checkCounts(kWhat, "counts", counts);
  const std::vector<size_t> offsets = prefix(counts);
  const size_t total = offsets.back();
  checkPointer(kWhat, "send", send, total, dtype);
  checkPointer(kWhat, "recv", recv, counts[me()], dtype);
  if (total == 0) return;
  const size_t es = elementSize(dtype);
  const std::vector<IpcGroup::Buffer> buffers = {
      {const_cast<void*>(send), total * es, Use::kInput},
      {recv, counts[me()] * es, Use::kOutput}};
  guarded(kWhat, buffers, [&] {
    IpcGroup::Header h;
    h.kind = kReduceScatter;
    h.dtype = static_cast<int32_t>(dtype);
    h.op = static_cast<int32_t>(op);
    h.count = total;
    h.countsDigest = digest(counts);
    group_->begin("reduceScatter", h, buffers, {}, stream);
    group_->await(stream);
    if (counts[me()] != 0) {
      const int n = size();
      std::vector<const void*> srcs(n);
      for (int r = 0; r < n; ++r) srcs[r] = at(group_->buffer(r, 0), offsets[me()] * es);
      void* dst = group_->buffer(me(), 1);
      if (n == 1) {
        if (dst != srcs[0])
          group_->device().copy(dst, srcs[0], counts[me()] * es, stream);
      } else {
        group_->device().reduce(&dst, 1, srcs.data(), n, counts[me()], dtype, op, stream);
      }
    }
    group_->finish(stream);
  });
}

// Every rank's send counts and recv counts are in the step's values: rank
// i's sendCounts[j] must equal rank j's recvCounts[i], checked by every
// rank over the whole matrix so that all fail alike.
void IpcCollectives::checkAlltoallCounts() const {
  const int n = size();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const uint64_t sent = group_->value(i, j);
      const uint64_t expected = group_->value(j, n + i);
      if (sent == expected) continue;
      const int blamed = i == me() ? j : i;
      KOLO_THROW_PEER(ErrorCode::kMismatch, options_.globalRanks[blamed],
                      "rank " << globalMe() << ": alltoall through CUDA IPC: rank "
                              << options_.globalRanks[i] << " sends " << sent
                              << " elements to rank " << options_.globalRanks[j]
                              << ", which expects " << expected << " from it");
    }
  }
}

void IpcCollectives::alltoall(const void* send, const std::vector<size_t>& sendCounts,
                              void* recv, const std::vector<size_t>& recvCounts,
                              DataType dtype, void* stream) {
  constexpr const char* kWhat = "alltoall";
  checkUsable();
  checkDtype(kWhat, dtype);
  checkCounts(kWhat, "sendCounts", sendCounts);
  checkCounts(kWhat, "recvCounts", recvCounts);
  const std::vector<size_t> sendOffsets = prefix(sendCounts);
  const std::vector<size_t> recvOffsets = prefix(recvCounts);
  checkPointer(kWhat, "send", send, sendOffsets.back(), dtype);
  checkPointer(kWhat, "recv", recv, recvOffsets.back(), dtype);
  const size_t es = elementSize(dtype);
  const std::vector<IpcGroup::Buffer> buffers = {
      {const_cast<void*>(send), sendOffsets.back() * es, Use::kInput},
      {recv, recvOffsets.back() * es, Use::kOutput}};
  guarded(kWhat, buffers, [&] {
    std::vector<uint64_t> values(sendCounts.begin(), sendCounts.end());
    values.insert(values.end(), recvCounts.begin(), recvCounts.end());
    IpcGroup::Header h;
    h.kind = kAlltoall;
    h.dtype = static_cast<int32_t>(dtype);
    group_->begin("alltoall", h, buffers, values, stream);
    group_->await(stream);
    checkAlltoallCounts();
    for (int r = 0; r < size(); ++r) {
      if (recvCounts[r] == 0) continue;
      size_t from = 0;  // block me() of rank r's send
      for (int k = 0; k < me(); ++k) from += group_->value(r, k);
      group_->device().copy(at(group_->buffer(me(), 1), recvOffsets[r] * es),
                            at(group_->buffer(r, 0), from * es), recvCounts[r] * es,
                            stream);
    }
    group_->finish(stream);
  });
}

}  // namespace

std::unique_ptr<DeviceCollectives> makeIpcCollectives(
    const IpcOptions& options, rendezvous::Store& store,
    std::shared_ptr<cuda_ipc::IpcDevice> device) {
  if (options.localSize < 1 || options.localRank < 0 ||
      options.localRank >= options.localSize ||
      static_cast<int>(options.globalRanks.size()) != options.localSize) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "makeIpcCollectives: local rank "
                   << options.localRank << " of " << options.localSize << " with "
                   << options.globalRanks.size() << " global ranks");
  }
  if (options.localSize > kMaxSources) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "makeIpcCollectives: " << options.localSize
                                      << " ranks on one host; CUDA IPC serves at "
                                         "most "
                                      << kMaxSources);
  }
  cuda_ipc::IpcGroup::Options go;
  go.localRank = options.localRank;
  go.localSize = options.localSize;
  go.globalRanks = options.globalRanks;
  go.timeout = options.timeout;
  go.name = options.name;
  auto group = IpcGroup::create(go, store, std::move(device));
  return std::make_unique<IpcCollectives>(options, std::move(group));
}

std::unique_ptr<DeviceCollectives> makeIpcCollectives(const IpcOptions& options,
                                                      rendezvous::Store& store) {
  return makeIpcCollectives(options, store, makeCudaIpcDevice(options.device));
}

}  // namespace kolo::collectives::cuda

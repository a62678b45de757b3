// The hierarchical device path ("hier", docs/gpu.md): a DeviceCollectives
// over the ranks of several hosts, composed of an intra-host
// DeviceCollectives (CUDA IPC or NCCL over the host's ranks, device memory
// throughout) and kolo's host algorithms between hosts over the
// communicator's cross-host transport (tcp or mpi), as the CPU
// hierarchical allreduce (allreduce_hier.cc) composes shm and the network.
//
// What each collective does (hier_collectives.cc explains the steps):
//   allreduce      composed: intra reduce-scatter on the devices -> this
//                  rank's shard to host memory -> allreduce of the shard
//                  between hosts (one rank per host and shard) -> back to
//                  the device -> intra allgather;
//   broadcast      composed: the root host's data across hosts by one rank
//                  per host, then an intra broadcast;
//   reduceScatter  composed: the hierarchical allreduce into device scratch,
//                  then this rank's block;
//   allgather      staged: kolo's host allgather of every rank's block;
//   alltoall       staged: a host exchange with every rank.
//
// Contract (beyond DeviceCollectives')
// - HierHost is what the communicator lends: run(fn) calls fn with a fresh
//   Context (world, cross and local groups, layout, selector, a tag block
//   of its own) in the communicator's order of operations and under its
//   failure rules. Every rank calls run() the same number of times per
//   collective (once), so the tag blocks agree.
// - DeviceMemory moves bytes between the device and host memory and keeps
//   scratch buffers (reused; contents lost when they grow). toHost returns
//   once the bytes are on the host, after the work enqueued on `stream`
//   before it; toDevice and copy are stream-ordered and return once done.
//   cudaDeviceMemory(device) is the CUDA one (throws checkDevice's error in
//   a build without CUDA); HostDeviceMemory stands in with host memory for
//   tests (every "device" pointer is host memory).
// - hosts: the ranks of each host (the communicator's topology, rank order
//   within a host; hosts in the order of their lowest rank); `intra` serves
//   this rank's host, its rank() the local rank. Hosts may hold different
//   numbers of ranks: the allreduce shards over the first m local ranks, m
//   the smallest host's, whose cross groups span every host.
// - Used by one thread at a time; after an error the object is broken
//   (every later call throws the same error).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "collectives/context.h"
#include "collectives/cuda/device_collectives.h"

namespace kolo::collectives::cuda {

class HierHost {
 public:
  virtual ~HierHost() = default;
  virtual void run(const std::function<void(Context&)>& fn) = 0;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void toHost(void* host, const void* device, size_t bytes, void* stream) = 0;
  virtual void toDevice(void* device, const void* host, size_t bytes, void* stream) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes, void* stream) = 0;
  // Pinned host memory / device memory of at least `bytes` (never null);
  // `slot` (0 or 1) tells independent buffers apart.
  virtual uint8_t* hostScratch(size_t bytes, int slot) = 0;
  virtual void* deviceScratch(size_t bytes, int slot) = 0;
};

std::unique_ptr<DeviceMemory> cudaDeviceMemory(int device);

class HostDeviceMemory : public DeviceMemory {
 public:
  void toHost(void* host, const void* device, size_t bytes, void* stream) override;
  void toDevice(void* device, const void* host, size_t bytes, void* stream) override;
  void copy(void* dst, const void* src, size_t bytes, void* stream) override;
  uint8_t* hostScratch(size_t bytes, int slot) override;
  void* deviceScratch(size_t bytes, int slot) override;

 private:
  std::vector<uint8_t> host_[2];
  std::vector<uint8_t> device_[2];
};

class HierCollectives : public DeviceCollectives {
 public:
  HierCollectives(std::unique_ptr<DeviceCollectives> intra, HierHost& host,
                  std::unique_ptr<DeviceMemory> memory,
                  std::vector<std::vector<int>> hosts, int rank);

  std::string_view name() const override { return "hier"; }
  int device() const override { return intra_->device(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

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
  // Runs op; an error breaks the object (broken_, rethrown ever after).
  void guarded(const std::function<void()>& op);
  void doAllreduce(const void* send, void* recv, size_t count, DataType dtype,
                   ReduceOp op, void* stream);
  void doBroadcast(void* buffer, size_t count, DataType dtype, int root, void* stream);
  void doAllgather(const void* send, void* recv, const std::vector<size_t>& counts,
                   DataType dtype, void* stream);
  void doAlltoall(const void* send, const std::vector<size_t>& sendCounts, void* recv,
                  const std::vector<size_t>& recvCounts, DataType dtype, void* stream);

  std::unique_ptr<DeviceCollectives> intra_;
  HierHost& host_;
  std::unique_ptr<DeviceMemory> memory_;
  std::vector<std::vector<int>> hosts_;
  std::vector<int> hostOf_;   // rank -> host index
  std::vector<int> localOf_;  // rank -> local rank
  int rank_;
  int size_;
  int shards_;  // m: the smallest host's number of ranks
  std::exception_ptr broken_;
};

}  // namespace kolo::collectives::cuda

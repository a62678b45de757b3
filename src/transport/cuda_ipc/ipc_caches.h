// The two caches of CUDA IPC (ipc_group.h): exporting an allocation
// (cudaIpcGetMemHandle) and mapping a peer's (cudaIpcOpenMemHandle) cost
// tens of microseconds to milliseconds, while a training loop passes the
// same few allocations (a framework's caching allocator's segments, kolo's
// fusion buffer) in every step. Both are keyed by the allocation id the
// device gives (Allocation::id: unique for the life of the process, never
// reused), so an allocation freed and another made at the same address is
// a new entry, never a stale mapping.
//
// Contract
// - ExportCache: the handle of an allocation, or the reason it cannot be
//   exported (remembered too: an allocation that cannot be exported stays
//   so); at most `capacity` entries, the least recently used dropped.
// - MappingCache: a peer's allocation mapped once; at most `capacity`
//   mappings, the least recently used closed (IpcDevice::closeMemory) when
//   a new one is needed. The caller keeps `capacity` above the mappings
//   one collective uses (the entries of the current call are the most
//   recently used, so they are never the ones closed). The destructor
//   closes every mapping.
// - One thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

#include "transport/cuda_ipc/ipc_device.h"

namespace kolo::cuda_ipc {

class ExportCache {
 public:
  ExportCache(IpcDevice& device, size_t capacity);

  // Fills `out` and answers true, or answers false with `why`.
  bool handleFor(const Allocation& allocation, Handle* out, std::string* why);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    bool exportable = false;
    Handle handle{};
    std::string why;
    std::list<uint64_t>::iterator use;
  };
  IpcDevice& device_;
  size_t capacity_;
  std::list<uint64_t> order_;  // most recently used first
  std::unordered_map<uint64_t, Entry> entries_;
};

class MappingCache {
 public:
  MappingCache(IpcDevice& device, size_t capacity);
  ~MappingCache();
  MappingCache(const MappingCache&) = delete;
  MappingCache& operator=(const MappingCache&) = delete;

  // The base of peer `peer`'s allocation `id` in this process, mapped from
  // `handle` the first time.
  void* open(int peer, uint64_t id, const Handle& handle);
  size_t size() const { return entries_.size(); }
  // Mappings made and closed so far (tests).
  uint64_t opened() const { return opened_; }
  uint64_t closed() const { return closed_; }

 private:
  using Key = std::pair<int, uint64_t>;
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.second * 1000003u + static_cast<uint64_t>(k.first));
    }
  };
  struct Entry {
    void* base = nullptr;
    std::list<Key>::iterator use;
  };
  IpcDevice& device_;
  size_t capacity_;
  std::list<Key> order_;  // most recently used first
  std::unordered_map<Key, Entry, KeyHash> entries_;
  uint64_t opened_ = 0;
  uint64_t closed_ = 0;
};

}  // namespace kolo::cuda_ipc

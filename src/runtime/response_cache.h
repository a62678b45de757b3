// Names seen before, each given a slot: the bit it occupies in the
// negotiation's bit vector.
//
// Every rank holds an identical cache because every rank applies the same
// insertions and evictions in the same order, all decided from the cycle's
// gathered messages (negotiator.h). Nothing here talks to other ranks.
//
// Contract
// - find(name): the slot and spec of a cached name; atSlot(slot): the
//   entry in a slot, without hashing. An Entry pointer stays valid until
//   that entry is erased or evicted; its spec is shared (ready operations
//   keep it past an eviction).
// - insert(spec, firstDims): puts a name in the lowest free slot; when full,
//   evicts the least recently used entry first and returns its name in
//   `evicted`. The new entry is the most recently used. `firstDims` holds
//   each rank's first dimension for kinds where it may differ (allgather,
//   alltoall), so a rank's submission hits the cache only with its own
//   first dimension (matches()). `devices` holds each rank's CUDA device
//   of a device tensor (OpSpec::device; empty for host memory): a rank
//   hits the cache only with its own device.
// - touch(slot): marks use (an operation of that slot ran).
// - erase(name): drops an entry (its spec changed on some rank).
// - capacity() slots (at least 1), numbered 0..capacity-1.
// - Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/op_spec.h"

namespace kolo::runtime {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity);

  struct Entry {
    size_t slot;
    std::shared_ptr<const OpSpec> spec;
    std::vector<int64_t> firstDims;  // per rank, where the first dim may differ
    std::vector<int32_t> devices;    // per rank, for device memory (-1: none)
    // `spec` submitted by `rank` is this entry: same fields, and the first
    // dimension and the device are that rank's.
    bool matches(const OpSpec& spec, int rank) const;
  };
  struct Insertion {
    size_t slot;
    std::optional<std::string> evicted;  // the name evicted to make room
    const Entry* entry;                  // the new entry
  };

  const Entry* find(const std::string& name) const;
  const Entry* atSlot(size_t slot) const;  // null when free
  Insertion insert(OpSpec spec, std::vector<int64_t> firstDims = {},
                   std::vector<int32_t> devices = {});
  void touch(size_t slot);
  void erase(const std::string& name);
  size_t capacity() const { return capacity_; }
  size_t size() const { return byName_.size(); }

 private:
  size_t capacity_;
  std::unordered_map<std::string, Entry> byName_;
  std::vector<Entry*> bySlot_;  // null = free
  std::set<size_t> free_;       // free slots, lowest first
  std::list<size_t> lru_;       // front = most recently used
  std::vector<std::list<size_t>::iterator> lruPos_;
};

}  // namespace kolo::runtime

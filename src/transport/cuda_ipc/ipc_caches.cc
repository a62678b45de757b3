#include "transport/cuda_ipc/ipc_caches.h"

namespace kolo::cuda_ipc {

ExportCache::ExportCache(IpcDevice& device, size_t capacity)
    : device_(device), capacity_(capacity < 1 ? 1 : capacity) {}

bool ExportCache::handleFor(const Allocation& allocation, Handle* out, std::string* why) {
  auto it = entries_.find(allocation.id);
  if (it == entries_.end()) {
    Entry entry;
    entry.exportable = device_.exportMemory(allocation.base, &entry.handle, &entry.why);
    if (entries_.size() >= capacity_) {
      entries_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(allocation.id);
    entry.use = order_.begin();
    it = entries_.emplace(allocation.id, std::move(entry)).first;
  } else {
    order_.splice(order_.begin(), order_, it->second.use);
  }
  if (!it->second.exportable) {
    *why = it->second.why;
    return false;
  }
  *out = it->second.handle;
  return true;
}

MappingCache::MappingCache(IpcDevice& device, size_t capacity)
    : device_(device), capacity_(capacity < 1 ? 1 : capacity) {}

MappingCache::~MappingCache() {
  for (auto& [key, entry] : entries_) device_.closeMemory(entry.base);
}

void* MappingCache::open(int peer, uint64_t id, const Handle& handle) {
  const Key key{peer, id};
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    order_.splice(order_.begin(), order_, it->second.use);
    return it->second.base;
  }
  if (entries_.size() >= capacity_) {
    auto last = entries_.find(order_.back());
    device_.closeMemory(last->second.base);
    ++closed_;
    entries_.erase(last);
    order_.pop_back();
  }
  Entry entry;
  entry.base = device_.openMemory(handle);
  ++opened_;
  order_.push_front(key);
  entry.use = order_.begin();
  return entries_.emplace(key, entry).first->second.base;
}

}  // namespace kolo::cuda_ipc

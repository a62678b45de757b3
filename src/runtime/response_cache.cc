#include "runtime/response_cache.h"

#include "common/check.h"

namespace kolo::runtime {

bool ResponseCache::Entry::matches(const OpSpec& s, int rank) const {
  if (compareSpecs(*spec, s)) return false;
  if (s.onDevice) {
    if (rank < 0 || static_cast<size_t>(rank) >= devices.size()) return false;
    if (devices[rank] != s.device) return false;
  }
  if (!firstDimMayDiffer(spec->kind) || spec->shape.empty()) return true;
  if (rank < 0 || static_cast<size_t>(rank) >= firstDims.size()) return false;
  return firstDims[rank] == s.shape[0];
}

ResponseCache::ResponseCache(size_t capacity)
    : capacity_(capacity), bySlot_(capacity, nullptr), lruPos_(capacity) {
  KOLO_CHECK_GE(capacity, size_t{1});
  for (size_t i = 0; i < capacity; ++i) free_.insert(i);
}

const ResponseCache::Entry* ResponseCache::find(const std::string& name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &it->second;
}

const ResponseCache::Entry* ResponseCache::atSlot(size_t slot) const {
  return slot < capacity_ ? bySlot_[slot] : nullptr;
}

ResponseCache::Insertion ResponseCache::insert(OpSpec spec,
                                               std::vector<int64_t> firstDims,
                                               std::vector<int32_t> devices) {
  KOLO_CHECK(!spec.name.empty());
  Insertion result{0, std::nullopt, nullptr};
  erase(spec.name);  // a re-insert replaces the old entry
  if (free_.empty()) {
    const size_t victim = lru_.back();
    result.evicted = bySlot_[victim]->spec->name;
    erase(*result.evicted);
  }
  const size_t slot = *free_.begin();
  free_.erase(free_.begin());
  std::string name = spec.name;
  auto shared = std::make_shared<const OpSpec>(std::move(spec));
  auto [it, inserted] = byName_.emplace(
      std::move(name),
      Entry{slot, std::move(shared), std::move(firstDims), std::move(devices)});
  KOLO_CHECK(inserted);
  bySlot_[slot] = &it->second;
  lru_.push_front(slot);
  lruPos_[slot] = lru_.begin();
  result.slot = slot;
  result.entry = &it->second;
  return result;
}

void ResponseCache::touch(size_t slot) {
  if (slot >= capacity_ || !bySlot_[slot]) return;
  lru_.splice(lru_.begin(), lru_, lruPos_[slot]);
}

void ResponseCache::erase(const std::string& name) {
  auto it = byName_.find(name);
  if (it == byName_.end()) return;
  const size_t slot = it->second.slot;
  lru_.erase(lruPos_[slot]);
  bySlot_[slot] = nullptr;
  free_.insert(slot);
  byName_.erase(it);
}

}  // namespace kolo::runtime

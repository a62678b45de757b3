// The handle table (handle_table.h).
//
// Algorithm: slots in one vector, indexed by the low kIndexBits of a handle
// value; the bits above are a serial number, counted per process and never
// reset, so value = serial << kIndexBits | index is unique in the process.
// A look-up is an index and one comparison with the slot's live value: a
// released, stale (before close()) or invented value fails that
// comparison whatever slot it names. Free slots form a LIFO list threaded
// through `nextFree`, so a steady state of submit / wait_release reuses the
// same few (warm) slots and allocates nothing; the vector grows only when
// more handles are held at once than ever before.
#include "runtime/handle_table.h"

#include <utility>

namespace kolo::runtime {

void HandleTable::open() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = true;
}

std::vector<HandleEntry> HandleTable::close() {
  std::vector<HandleEntry> all;
  std::lock_guard<std::mutex> lock(mu_);
  open_ = false;
  for (Slot& s : slots_) {
    if (s.value != 0) all.push_back(std::move(s.entry));
  }
  for (HandleEntry& e : releasedPending_) all.push_back(std::move(e));
  slots_.clear();
  releasedPending_.clear();
  freeHead_ = kNoSlot;
  used_ = 0;
  return all;
}

HandleTable::Result HandleTable::add(HandleEntry entry, HandleValue* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return {Status::kClosed};
  if (nextSerial_ >= (int64_t{1} << (63 - kIndexBits))) return {Status::kExhausted};
  uint32_t index;
  if (freeHead_ != kNoSlot) {
    index = freeHead_;
    freeHead_ = slots_[index].nextFree;
  } else if (slots_.size() < kMaxSlots) {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    return {Status::kFull};
  }
  Slot& slot = slots_[index];
  slot.value = (nextSerial_++ << kIndexBits) | index;
  slot.entry = std::move(entry);
  ++used_;
  *out = slot.value;
  return {};
}

HandleTable::Slot* HandleTable::slotLocked(HandleValue h, Result* result) {
  if (!open_) {
    *result = {Status::kClosed};
    return nullptr;
  }
  const uint64_t index = static_cast<uint64_t>(h) & (kMaxSlots - 1);
  if (h > 0 && index < slots_.size() && slots_[index].value == h) {
    return &slots_[index];
  }
  const char* why = "never returned, or already released";
  if (h <= 0) {
    why = "handles are > 0";
  } else if (index < slots_.size() && slots_[index].lastReleased == h) {
    why = "already released";
  } else if ((h >> kIndexBits) >= nextSerial_) {
    why = "never returned";
  }
  *result = {Status::kUnknown, why};
  return nullptr;
}

void HandleTable::freeLocked(Slot* slot, uint32_t index) {
  slot->lastReleased = slot->value;
  slot->value = 0;
  slot->nextFree = freeHead_;
  freeHead_ = index;
  --used_;
}

HandleTable::Result HandleTable::find(HandleValue h, HandlePtr* handle, OpKind* kind,
                                      const std::vector<uint8_t>** owned,
                                      std::shared_ptr<Work>* work) {
  std::lock_guard<std::mutex> lock(mu_);
  Result result;
  Slot* slot = slotLocked(h, &result);
  if (slot == nullptr) return result;
  if (handle) *handle = slot->entry.handle;
  if (kind) *kind = slot->entry.kind;
  if (owned) *owned = slot->entry.owned.get();
  if (work) *work = slot->entry.work;
  return {};
}

HandleTable::Result HandleTable::take(HandleValue h, HandleEntry* out) {
  std::lock_guard<std::mutex> lock(mu_);
  Result result;
  Slot* slot = slotLocked(h, &result);
  if (slot == nullptr) return result;
  *out = std::move(slot->entry);
  freeLocked(slot, static_cast<uint32_t>(h & (kMaxSlots - 1)));
  return {};
}

HandleTable::Result HandleTable::release(HandleValue h) {
  std::vector<HandleEntry> finished;  // destroyed after the lock is let go
  HandleEntry entry;
  std::lock_guard<std::mutex> lock(mu_);
  Result result;
  Slot* slot = slotLocked(h, &result);
  if (slot == nullptr) return result;
  entry = std::move(slot->entry);
  freeLocked(slot, static_cast<uint32_t>(h & (kMaxSlots - 1)));
  if (!releasedPending_.empty()) {
    auto keep = releasedPending_.begin();
    for (auto it = releasedPending_.begin(); it != releasedPending_.end(); ++it) {
      if (it->handle->poll()) {
        finished.push_back(std::move(*it));
      } else {
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    releasedPending_.erase(keep, releasedPending_.end());
  }
  if (!entry.handle->poll()) releasedPending_.push_back(std::move(entry));
  return {};
}

size_t HandleTable::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace kolo::runtime

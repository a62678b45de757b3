// The runtime's callers' side (runtime.h): argument checks, the interned
// names and their pending flags, enqueue, groups and join. Runs on any
// thread; never blocks on other ranks.
#include <cmath>
#include <unordered_set>

#include "common/check.h"
#include "runtime/runtime.h"

namespace kolo::runtime {

HandlePtr Runtime::failed(HandlePtr handle, const std::exception_ptr& error) {
  handle->fail(error);
  return handle;
}

void Runtime::validate(const OpRequest& r) const {
  const OpSpec& s = r.spec;
  // Built only for an error message.
  auto what = [&s] { return std::string(toString(s.kind)) + " '" + s.name + "'"; };
  if (s.name.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument, toString(s.kind) << ": empty operation name");
  }
  if (s.kind == OpKind::kJoin ||
      static_cast<int>(s.kind) > static_cast<int>(OpKind::kJoin)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": invalid kind "
                                                   << static_cast<int>(s.kind)
                                                   << " (use join())");
  }
  if (s.kind == OpKind::kBarrier) return;
  if (s.onDevice != (r.device != nullptr)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << (s.onDevice ? ": on CUDA device memory without its device entry"
                                     : ": a device entry for host memory"));
  }
  if (!isValid(s.dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": unknown dtype value " << static_cast<int>(s.dtype));
  }
  const bool reduces = s.kind == OpKind::kAllreduce || s.kind == OpKind::kReduceScatter;
  if (reduces && !isValid(s.op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": unknown reduction value " << static_cast<int>(s.op));
  }
  for (int64_t d : s.shape) {
    if (d < 0) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what() << ": negative dimension in shape " << shapeString(s.shape));
    }
  }
  if (reduces && (!std::isfinite(s.prescale) || !std::isfinite(s.postscale))) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": scale factors must be finite (prescale " << s.prescale
                      << ", postscale " << s.postscale << ")");
  }
  const size_t bytes = s.bytes();
  if (bytes > 0 && r.input == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": null input buffer for " << bytes << " bytes");
  }
  const bool callerOutput = s.kind == OpKind::kAllreduce ||
                            s.kind == OpKind::kBroadcast ||
                            s.kind == OpKind::kReduceScatter;
  if (callerOutput && bytes > 0 && r.output == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": null output buffer for " << bytes << " bytes");
  }
  if (s.kind == OpKind::kBroadcast && (s.root < 0 || s.root >= size_)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": root " << s.root << " outside 0.." << size_ - 1);
  }
  validateRows(r);
}

// The checks of the kinds that split their first dimension: reducescatter
// (by the team's size), allgather (any) and alltoall (by the team's size
// or by the given splits).
void Runtime::validateRows(const OpRequest& r) const {
  const OpSpec& s = r.spec;
  auto what = [&s] { return std::string(toString(s.kind)) + " '" + s.name + "'"; };
  if (s.kind == OpKind::kReduceScatter || s.kind == OpKind::kAllgather ||
      s.kind == OpKind::kAlltoall) {
    if (s.shape.empty()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what() << ": needs at least one dimension (shape [])");
    }
  }
  if (s.kind == OpKind::kReduceScatter && s.shape[0] % size_ != 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": first dimension " << s.shape[0]
                                                   << " does not divide by the " << size_
                                                   << " ranks");
  }
  if (s.kind == OpKind::kAlltoall) validateSplits(r);
}

void Runtime::validateSplits(const OpRequest& r) const {
  const OpSpec& s = r.spec;
  auto what = [&s] { return std::string(toString(s.kind)) + " '" + s.name + "'"; };
  if (r.splits.empty()) {
    if (s.shape[0] % size_ != 0) {
      KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": first dimension " << s.shape[0]
                                                     << " does not divide by the "
                                                     << size_ << " ranks (give splits)");
    }
  } else {
    if (static_cast<int>(r.splits.size()) != size_) {
      KOLO_THROW(ErrorCode::kInvalidArgument, what()
                                                  << ": " << r.splits.size()
                                                  << " splits for " << size_ << " ranks");
    }
    int64_t sum = 0;
    for (int64_t v : r.splits) {
      if (v < 0)
        KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": negative split " << v);
      sum += v;
    }
    if (sum != s.shape[0]) {
      KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": splits sum to " << sum
                                                     << ", first dimension is "
                                                     << s.shape[0]);
    }
  }
}

HandlePtr Runtime::enqueue(const OpRequest& request) {
  try {
    validate(request);
  } catch (...) {
    return failed(std::make_shared<Handle>(request.spec.name, queue_),
                  std::current_exception());
  }
  if (request.spec.group != 0 || request.spec.groupSize != 0) {
    // Group ids belong to enqueueGroup: a lone operation has none.
    OpRequest lone = request;
    lone.spec.group = 0;
    lone.spec.groupSize = 0;
    return enqueue(lone);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_)
    return failed(std::make_shared<Handle>(request.spec.name, queue_), broken_);
  const uint32_t nameId = nameIdLocked(request.spec.name);
  auto handle = std::make_shared<Handle>(names_[nameId], queue_);
  handle->setDeviceEntry(request.device);
  if (namePending_[nameId]) {
    return failed(handle, errorPtr(ErrorCode::kInvalidArgument,
                                   std::string(toString(request.spec.kind)) + " '" +
                                       request.spec.name + "' on rank " +
                                       std::to_string(rank_) + ": name already pending"));
  }
  if (!queue_->push(request, handle, nameId)) {
    return failed(handle,
                  errorPtr(ErrorCode::kNotInitialized, "the runtime has stopped"));
  }
  namePending_[nameId] = 1;
  return handle;
}

uint32_t Runtime::nameIdLocked(const std::string& name) {
  if (auto it = nameIds_.find(name); it != nameIds_.end()) return it->second;
  if (nameIds_.size() >= nameSweepAt_) {
    // Names used once (e.g. with a step number in them) would pile up:
    // drop those not pending, then allow twice what is left before the next
    // sweep (amortized constant time per new name).
    for (auto it = nameIds_.begin(); it != nameIds_.end();) {
      if (namePending_[it->second]) {
        ++it;
      } else {
        freeNameIds_.push_back(it->second);
        names_[it->second].reset();
        it = nameIds_.erase(it);
      }
    }
    nameSweepAt_ = std::max<size_t>(4096, 2 * nameIds_.size());
  }
  uint32_t id;
  if (!freeNameIds_.empty()) {
    id = freeNameIds_.back();
    freeNameIds_.pop_back();
  } else {
    id = static_cast<uint32_t>(namePending_.size());
    namePending_.push_back(0);
    names_.emplace_back();
  }
  nameIds_.emplace(name, id);
  // On cache lines of its own: every handle of this name updates its
  // reference count on the caller's thread, so nothing the background
  // thread writes may share that line.
  struct alignas(64) Interned {
    explicit Interned(const std::string& n) : text(n) {}
    std::string text;
  };
  auto interned = std::make_shared<const Interned>(name);
  names_[id] = std::shared_ptr<const std::string>(interned, &interned->text);
  return id;
}

std::vector<HandlePtr> Runtime::enqueueGroup(std::vector<OpRequest> requests) {
  std::vector<HandlePtr> handles;
  std::vector<std::string> names;
  for (const auto& r : requests) {
    handles.push_back(std::make_shared<Handle>(r.spec.name, queue_));
    handles.back()->setDeviceEntry(r.device);
    names.push_back(r.spec.name);
  }
  auto failAll = [&](const std::exception_ptr& e) {
    for (auto& h : handles) h->fail(e);
    return handles;
  };
  if (requests.empty()) return handles;
  try {
    // A group occupies one cache slot per member until it runs: more members
    // than slots would evict each other for ever.
    if (requests.size() > options_.cacheCapacity) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "group of " << requests.size() << " operations (first '"
                             << requests.front().spec.name << "') exceeds "
                             << "KOLO_CACHE_CAPACITY=" << options_.cacheCapacity
                             << "; split the group or raise the capacity");
    }
    std::unordered_set<std::string> unique;
    for (const auto& r : requests) {
      validate(r);
      if (!unique.insert(r.spec.name).second) {
        KOLO_THROW(ErrorCode::kInvalidArgument,
                   "group: the name '" << r.spec.name << "' appears twice");
      }
    }
  } catch (...) {
    return failAll(std::current_exception());
  }
  const uint64_t group = groupId(names);
  std::vector<Submission> items;
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].spec.group = group;
    requests[i].spec.groupSize = static_cast<uint32_t>(requests.size());
    items.push_back(Submission{std::move(requests[i]), handles[i], false});
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return failAll(broken_);
  for (size_t i = 0; i < names.size(); ++i) {
    items[i].nameId = nameIdLocked(names[i]);
    if (namePending_[items[i].nameId]) {
      return failAll(errorPtr(ErrorCode::kInvalidArgument,
                              "group member '" + names[i] + "' on rank " +
                                  std::to_string(rank_) + ": name already pending"));
    }
  }
  std::vector<uint32_t> ids;
  for (const auto& item : items) ids.push_back(item.nameId);
  if (!queue_->pushAll(std::move(items))) {
    return failAll(errorPtr(ErrorCode::kNotInitialized, "the runtime has stopped"));
  }
  for (uint32_t id : ids) namePending_[id] = 1;
  return handles;
}

HandlePtr Runtime::join() {
  auto handle = std::make_shared<Handle>("join");
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return failed(handle, broken_);
  Submission s;
  s.handle = handle;
  s.join = true;
  if (!queue_->push(std::move(s))) {
    return failed(handle,
                  errorPtr(ErrorCode::kNotInitialized, "the runtime has stopped"));
  }
  queue_->wake();
  return handle;
}

}  // namespace kolo::runtime

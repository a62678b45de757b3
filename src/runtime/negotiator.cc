// The negotiation cycle of docs/runtime.md ("One cycle").
//
// Nomenclature
// - pending: this rank's operations not yet decided, each in one state:
//   kUnsent (its spec goes into the next variable part), kSent (every rank
//   holds its spec in sent_), both kept by name in pending_; kCached (it is
//   in the response cache with this rank's spec: only its slot bit
//   travels), kept at its slot in cached_, so that a cycle of cached
//   operations hashes no name to find them.
// - holders of a slot: the ranks whose fixed part has the slot's bit set.
// - live rank: one that has not joined. A candidate is a name submitted by
//   at least one rank and by every live rank.
//
// process() runs the same steps on every rank over the same gathered bytes,
// so every decision (readiness, errors, cache insertions and evictions, the
// order) is the same everywhere:
//   1. read the bits against the cache as it was when the messages were
//      built: per cached name, its holders;
//   2. read the new specs: a spec for a cached name evicts the entry (the
//      spec changed on that rank, or its first dimension did), so the
//      holders' bits of that slot no longer count and they resend; the spec
//      joins sent_[name];
//   3. cached names held by every live rank are candidates; names of sent_
//      sent by every live rank are compared: equal -> inserted in the cache
//      (in name order) and candidates; different -> a mismatch error;
//   4. a grouped candidate waits until its whole group is a candidate; a
//      member of a group that had a failure fails;
//   5. order: cached candidates by slot, then new ones by name, each group
//      gathered at its first member's place;
//   6. pending states follow the cache (kCached <-> kUnsent).
#include "runtime/negotiator.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/byte_codec.h"
#include "common/check.h"
#include "common/rank_text.h"

namespace kolo::runtime {

namespace {

constexpr uint8_t kWireVersion = 1;
constexpr size_t kHeaderBytes = 24;
constexpr uint8_t kFlagShutdown = 1;
constexpr uint8_t kFlagJoined = 2;
constexpr uint8_t kFlagStall = 4;

// Both ends of a negotiation are one build of kolo: host byte order.
constexpr ByteOrder kOrder = kHostOrder;

template <typename T>
void putAt(std::vector<uint8_t>& out, size_t at, T v) {
  KOLO_CHECK_LE(at + sizeof(T), out.size());
  storeBytes<T>(out.data() + at, v, kOrder);
}

// The header field at `at` of a message the caller checked is a whole
// header.
template <typename T>
T getAt(const std::vector<uint8_t>& in, size_t at) {
  KOLO_CHECK_LE(at + sizeof(T), in.size());
  return loadBytes<T>(in.data() + at, kOrder);
}

// "allreduce 'w': shape differs: ranks 0,2 have [128, 64], rank 1 has
// [128, 65]": the field is the first one on which some rank differs from
// the lowest submitting rank; the ranks are grouped by their value.
std::string mismatchText(const std::vector<std::optional<OpSpec>>& specs) {
  const OpSpec* ref = nullptr;
  std::string field;
  for (const auto& s : specs) {
    if (!s) continue;
    if (!ref) {
      ref = &*s;
      continue;
    }
    if (auto d = compareSpecs(*ref, *s)) {
      field = d->field;
      break;
    }
  }
  KOLO_CHECK(ref != nullptr && !field.empty());
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < specs.size(); ++r) {
    if (!specs[r]) continue;
    const std::string v = fieldValue(*specs[r], field);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {static_cast<int>(r)}});
    } else {
      it->second.push_back(static_cast<int>(r));
    }
  }
  std::string text =
      std::string(toString(ref->kind)) + " '" + ref->name + "': " + field + " differs: ";
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i) text += ", ";
    text += rankList(groups[i].second) +
            (groups[i].second.size() == 1 ? " has " : " have ") + groups[i].first;
  }
  return text;
}

}  // namespace

int ReadyOp::contributors() const {
  int n = 0;
  for (uint8_t b : submitted) n += b != 0;
  return n;
}

struct Negotiator::Candidate {
  std::shared_ptr<const OpSpec> spec;
  size_t bitsAt;  // its per-rank bits in bits_ (1: submitted)
  std::vector<int64_t> firstDims;
  size_t slot;
  bool held;
  std::vector<int32_t>
      devices;  // spec->onDevice: per rank (-1: did not submit)  // from the slot bits:
                // this rank's operation (if any) is cached_[slot]
};

Negotiator::Negotiator(int rank, int size, size_t cacheCapacity)
    : rank_(rank), size_(size), cache_(cacheCapacity) {
  KOLO_CHECK_GE(size, 1);
  KOLO_CHECK(rank >= 0 && rank < size);
  cached_.resize(cache_.capacity());
  cachedUsed_.assign(cache_.capacity(), 0);
}

size_t Negotiator::fixedBytes() const {
  return kHeaderBytes + (cache_.capacity() + 7) / 8;
}

size_t Negotiator::variableBytes(const std::vector<uint8_t>& fixed) {
  if (fixed.size() < kHeaderBytes) return 0;
  return getAt<uint32_t>(fixed, 4);
}

// A decided operation's map node is kept (spareNodes_) and reused by a
// later submission: assigning the new name and shape into the node's
// strings and vectors reuses their memory, and so does a cached_ element,
// so a steady stream of operations allocates (and frees) nothing here.
void Negotiator::submit(OpId id, const OpSpec& spec, size_t* slotHint) {
  auto duplicate = [&] {
    KOLO_THROW(ErrorCode::kInvalidArgument, toString(spec.kind)
                                                << " '" << spec.name << "' on rank "
                                                << rank_ << ": name already pending");
  };
  const ResponseCache::Entry* e = nullptr;
  if (slotHint && *slotHint < cache_.capacity()) {
    e = cache_.atSlot(*slotHint);
    if (e && e->spec->name != spec.name) e = nullptr;
  }
  if (!e) e = cache_.find(spec.name);
  if (slotHint) *slotHint = e ? e->slot : kNoSlot;
  if (e && cachedUsed_[e->slot] && cached_[e->slot].spec.name == spec.name) duplicate();
  if (e && e->matches(spec, rank_)) {
    if (!pending_.empty() && pending_.count(spec.name)) duplicate();
    placeCached(e->slot, id, spec);
    return;
  }
  if (!placeUnsent(id, spec)) duplicate();
}

void Negotiator::placeCached(size_t slot, OpId id, const OpSpec& spec) {
  KOLO_CHECK(!cachedUsed_[slot]);
  Local& local = cached_[slot];
  local.id = id;
  local.spec = spec;  // a copy, into the old spec's memory
  local.state = Local::State::kCached;
  local.slot = slot;
  cachedUsed_[slot] = 1;
  ++cachedCount_;
}

bool Negotiator::placeUnsent(OpId id, const OpSpec& spec) {
  Local* local;
  if (!spareNodes_.empty()) {
    Pending::node_type& spare = spareNodes_.back();
    spare.key() = spec.name;  // into the old key's memory
    auto result = pending_.insert(std::move(spare));
    if (!result.inserted) {
      spare = std::move(result.node);
      return false;
    }
    spareNodes_.pop_back();
    local = &result.position->second;
  } else {
    auto [it, inserted] = pending_.try_emplace(spec.name);
    if (!inserted) return false;
    local = &it->second;
  }
  local->id = id;
  local->spec = spec;  // a copy, into the old spec's memory
  local->state = Local::State::kUnsent;
  local->slot = 0;
  return true;
}

void Negotiator::release(Pending::iterator it) {
  if (spareNodes_.size() < kSpareNodes) {
    spareNodes_.push_back(pending_.extract(it));
  } else {
    pending_.erase(it);
  }
}

void Negotiator::releaseCached(size_t slot) {
  cachedUsed_[slot] = 0;
  --cachedCount_;
}

Message Negotiator::prepare(const CycleFlags& flags) {
  Message m;
  std::vector<uint8_t> specs;
  uint32_t count = 0;
  m.fixed.assign(fixedBytes(), 0);
  for (size_t slot = 0; cachedCount_ > 0 && slot < cachedUsed_.size(); ++slot) {
    if (cachedUsed_[slot]) m.fixed[kHeaderBytes + slot / 8] |= uint8_t(1u << (slot % 8));
  }
  for (auto& [name, local] : pending_) {
    if (local.state == Local::State::kUnsent) {
      local.spec.encode(specs);
      local.state = Local::State::kSent;
      ++count;
    }
  }
  if (count > 0 || !flags.stallShutdown.empty()) {
    ByteWriter(m.variable, kOrder)
        .put<uint32_t>(count)
        .bytes(specs.data(), specs.size())
        .put<uint32_t>(static_cast<uint32_t>(flags.stallShutdown.size()))
        .bytes(flags.stallShutdown);
  }
  uint8_t f = 0;
  if (flags.shutdown) f |= kFlagShutdown;
  if (flags.joined) f |= kFlagJoined;
  if (!flags.stallShutdown.empty()) f |= kFlagStall;
  putAt<uint8_t>(m.fixed, 0, kWireVersion);
  putAt<uint8_t>(m.fixed, 1, f);
  putAt<uint32_t>(m.fixed, 4, static_cast<uint32_t>(m.variable.size()));
  putAt<int64_t>(m.fixed, 8, flags.fusionThresholdBytes);
  putAt<double>(m.fixed, 16, flags.cycleTimeMs);
  return m;
}

// process()'s state for one cycle, handed from step to step.
struct Negotiator::Cycle {
  // A cached slot that some rank holds. Entries point into the cache: every
  // use comes before this cycle's insertions (which may evict).
  struct Held {
    size_t slot;
    const ResponseCache::Entry* entry;  // null: evicted by a new spec (step 2)
    size_t bitsAt;                      // its holders' bits in bits_
  };
  Clock::time_point now;
  Outcome out;
  std::vector<bool> live;                       // per rank: not joined
  std::vector<std::vector<OpSpec>> newSpecs;    // per rank: its variable part's specs
  std::vector<Held> holders;                    // step 1, in slot order
  std::vector<Candidate> candidates;            // step 3
  std::vector<Outcome::Waiting> waitingCached;  // step 3: cached, not ready
  std::vector<Candidate*> ready;                // step 4
  std::vector<const Candidate*> heldSeen;       // step 4: held for their group
};

Outcome Negotiator::process(const std::vector<std::vector<uint8_t>>& fixed,
                            const std::vector<std::vector<uint8_t>>& variable,
                            Clock::time_point now) {
  KOLO_CHECK_EQ(fixed.size(), static_cast<size_t>(size_));
  Cycle c;
  c.now = now;
  c.live.assign(size_, true);
  c.newSpecs.resize(size_);
  readMessages(c, fixed, variable);
  collectHolders(c, fixed);
  readNewSpecs(c);
  cachedCandidates(c);
  c.holders.clear();  // its entries may be evicted from here on
  sentCandidates(c);
  resolveGroups(c);
  emitReady(c);
  followCache();
  reportWaiting(c);
  return std::move(c.out);
}

// Every rank's header (flags, rank 0's tuning values) and new specs.
void Negotiator::readMessages(Cycle& c, const std::vector<std::vector<uint8_t>>& fixed,
                              const std::vector<std::vector<uint8_t>>& variable) {
  const int n = size_;
  Outcome& out = c.out;
  for (int r = 0; r < n; ++r) {
    if (fixed[r].size() != fixedBytes() || fixed[r][0] != kWireVersion) {
      KOLO_THROW_PEER(
          ErrorCode::kMismatch, r,
          "runtime negotiation: rank "
              << r << " sent a " << fixed[r].size() << "-byte header (version "
              << (fixed[r].empty() ? -1 : int(fixed[r][0])) << "), rank " << rank_
              << " expects " << fixedBytes() << " bytes (version " << int(kWireVersion)
              << "): KOLO_CACHE_CAPACITY must be the same on every rank");
    }
    const uint8_t f = fixed[r][1];
    if (f & kFlagShutdown) out.shutdownRanks.push_back(r);
    if (f & kFlagJoined) {
      out.joinedRanks.push_back(r);
      c.live[r] = false;
    }
    if (r == 0) {
      out.fusionThresholdBytes = getAt<int64_t>(fixed[r], 8);
      out.cycleTimeMs = getAt<double>(fixed[r], 16);
    }
    const size_t vbytes = variableBytes(fixed[r]);
    if (vbytes == 0) continue;
    if (variable.size() != static_cast<size_t>(n) || variable[r].size() != vbytes) {
      KOLO_THROW_PEER(ErrorCode::kInternal, r,
                      "runtime negotiation: rank "
                          << r << " announced " << vbytes << " bytes of requests, "
                          << (variable.size() == size_t(n) ? variable[r].size() : 0)
                          << " arrived");
    }
    readVariable(c, r, variable[r], (f & kFlagStall) != 0);
  }
}

// Rank r's variable part: its new specs, and the stall shutdown message
// when its flags announce one (the first such rank's wins).
void Negotiator::readVariable(Cycle& c, int r, const std::vector<uint8_t>& part,
                              bool stall) {
  ByteReader in(part.data(), part.size(), kOrder);
  const uint32_t count = in.get<uint32_t>();
  if (!in.ok()) KOLO_THROW(ErrorCode::kInvalidArgument, "malformed request list");
  for (uint32_t i = 0; i < count; ++i) c.newSpecs[r].push_back(OpSpec::decode(in));
  const uint32_t stallBytes = in.remaining() >= 4 ? in.get<uint32_t>() : 0;
  if (stall && c.out.stallShutdown.empty() && in.remaining() >= stallBytes) {
    c.out.stallShutdown.assign(in.bytes(stallBytes));
  }
}

// 1. Holders of each cached slot, against the cache the messages used, in
// slot order.
void Negotiator::collectHolders(Cycle& c,
                                const std::vector<std::vector<uint8_t>>& fixed) {
  const int n = size_;
  bits_.clear();
  const size_t bitsAt = kHeaderBytes;
  const size_t bitBytes = (cache_.capacity() + 7) / 8;
  for (size_t byte = 0; byte < bitBytes; ++byte) {
    uint8_t any = 0;
    for (int r = 0; r < n; ++r) any |= fixed[r][bitsAt + byte];
    if (any == 0) continue;
    for (size_t s = byte * 8; s < byte * 8 + 8 && s < cache_.capacity(); ++s) {
      if (!(any & (1u << (s % 8)))) continue;
      const auto* e = cache_.atSlot(s);
      if (!e) continue;  // cannot happen with identical caches
      c.holders.push_back(Cycle::Held{s, e, bits_.size()});
      for (int r = 0; r < n; ++r)
        bits_.push_back((fixed[r][bitsAt + byte] >> (s % 8)) & 1u);
    }
  }
}

// 2. New specs; each evicts a cached entry of its name.
void Negotiator::readNewSpecs(Cycle& c) {
  for (int r = 0; r < size_; ++r) {
    for (auto& spec : c.newSpecs[r]) {
      if (const auto* e = cache_.find(spec.name)) {
        auto h = std::lower_bound(
            c.holders.begin(), c.holders.end(), e->slot,
            [](const Cycle::Held& x, size_t slot) { return x.slot < slot; });
        if (h != c.holders.end() && h->slot == e->slot) h->entry = nullptr;
        cache_.erase(spec.name);
      }
      auto& v = sent_[spec.name];
      if (v.empty()) v.resize(size_);
      v[r] = std::move(spec);
    }
  }
}

bool Negotiator::allLiveHave(const Cycle& c, const uint8_t* has) const {
  bool any = false;
  for (int r = 0; r < size_; ++r) {
    if (has[r]) any = true;
    if (c.live[r] && !has[r]) return false;
  }
  return any;
}

// This rank's operation `name` fails; `held`: a candidate from the slot
// bits, whose operation here (if any) is cached_[slot].
void Negotiator::failLocal(Cycle& c, const std::string& name, const std::string& message,
                           const Candidate* held) {
  if (held && held->held && cachedUsed_[held->slot] &&
      cached_[held->slot].spec.name == name) {
    c.out.errors.push_back({cached_[held->slot].id, name, message});
    releaseCached(held->slot);
  } else if (auto it = pending_.find(name); it != pending_.end()) {
    c.out.errors.push_back({it->second.id, name, message});
    release(it);
  }
  firstSeen_.erase(name);
}

// 3a. Cached names held by every live rank are candidates; the other
// holders are waiting.
void Negotiator::cachedCandidates(Cycle& c) {
  const int n = size_;
  c.candidates.reserve(c.holders.size());
  for (auto& h : c.holders) {
    if (!h.entry) continue;
    const OpSpec& spec = *h.entry->spec;
    const uint8_t* has = bits_.data() + h.bitsAt;
    if (!allLiveHave(c, has)) {
      c.waitingCached.push_back({spec.name, spec.kind, std::vector<bool>(has, has + n)});
      continue;
    }
    Candidate cand{h.entry->spec, h.bitsAt, {}, h.slot, true, {}};
    if (firstDimMayDiffer(spec.kind) && !spec.shape.empty()) {
      cand.firstDims.assign(n, 0);
      for (int r = 0; r < n; ++r) {
        if (has[r] && r < static_cast<int>(h.entry->firstDims.size())) {
          cand.firstDims[r] = h.entry->firstDims[r];
        }
      }
    }
    if (spec.onDevice) {
      cand.devices.assign(n, -1);
      for (int r = 0; r < n; ++r) {
        if (has[r] && r < static_cast<int>(h.entry->devices.size())) {
          cand.devices[r] = h.entry->devices[r];
        }
      }
    }
    c.candidates.push_back(std::move(cand));
  }
}

// 3b. Names of sent_ sent by every live rank are compared: equal ->
// inserted in the cache (in name order) and candidates; different -> a
// mismatch error (which also fails the rest of the name's group).
void Negotiator::sentCandidates(Cycle& c) {
  const int n = size_;
  for (auto it = sent_.begin(); it != sent_.end();) {
    auto& specs = it->second;
    const size_t at = bits_.size();
    for (int r = 0; r < n; ++r) bits_.push_back(specs[r].has_value());
    if (!allLiveHave(c, bits_.data() + at)) {
      bits_.resize(at);
      ++it;
      continue;
    }
    const OpSpec* ref = nullptr;
    bool equal = true;
    for (const auto& s : specs) {
      if (!s) continue;
      if (!ref) {
        ref = &*s;
      } else if (compareSpecs(*ref, *s)) {
        equal = false;
      }
    }
    if (!equal) {
      const std::string message = mismatchText(specs);
      for (const auto& s : specs) {
        if (s && s->group != 0 && !failedGroups_.count(s->group)) {
          failedGroups_[s->group] = {s->groupSize > 0 ? s->groupSize - 1 : 0, message};
        }
      }
      failLocal(c, it->first, message);
      it = sent_.erase(it);
      continue;
    }
    std::vector<int64_t> firstDims;
    if (firstDimMayDiffer(ref->kind) && !ref->shape.empty()) {
      firstDims.assign(n, 0);
      for (int r = 0; r < n; ++r) {
        if (specs[r]) firstDims[r] = specs[r]->shape[0];
      }
    }
    std::vector<int32_t> devices;
    if (ref->onDevice) {
      devices.assign(n, -1);
      for (int r = 0; r < n; ++r) {
        if (specs[r]) devices[r] = specs[r]->device;
      }
    }
    OpSpec spec = std::move(*const_cast<OpSpec*>(ref));
    const auto ins = cache_.insert(std::move(spec), firstDims, devices);
    c.candidates.push_back(Candidate{ins.entry->spec, at, std::move(firstDims), ins.slot,
                                     false, std::move(devices)});
    it = sent_.erase(it);
  }
}

// 4. Groups: complete ones go, failed ones fail, others wait.
void Negotiator::resolveGroups(Cycle& c) {
  std::map<uint64_t, uint32_t> groupCount;
  for (const auto& cand : c.candidates) {
    if (cand.spec->group != 0) ++groupCount[cand.spec->group];
  }
  c.ready.reserve(c.candidates.size());
  for (auto& cand : c.candidates) {
    const uint64_t g = cand.spec->group;
    if (g != 0) {
      if (auto f = failedGroups_.find(g); f != failedGroups_.end()) {
        failLocal(c, cand.spec->name,
                  std::string(toString(cand.spec->kind)) + " '" + cand.spec->name +
                      "': another member of its group failed: " + f->second.message,
                  &cand);
        if (f->second.remaining <= 1) {
          failedGroups_.erase(f);
        } else {
          --f->second.remaining;
        }
        continue;
      }
      if (groupCount[g] < cand.spec->groupSize) {  // held: not waiting
        c.heldSeen.push_back(&cand);
        continue;
      }
    }
    c.ready.push_back(&cand);
  }
}

// 5. Order: cached by slot, then new by name (the candidates' order
// already), each group gathered at its first member. The ready operations'
// views go into two buffers sized here once.
void Negotiator::emitReady(Cycle& c) {
  const int n = size_;
  std::vector<Candidate*> order;
  order.reserve(c.ready.size());
  std::set<uint64_t> placed;
  for (Candidate* cand : c.ready) {
    if (cand->spec->group == 0) {
      order.push_back(cand);
      continue;
    }
    if (!placed.insert(cand->spec->group).second) continue;
    for (Candidate* m : c.ready) {
      if (m->spec->group == cand->spec->group) order.push_back(m);
    }
  }
  Outcome& out = c.out;
  out.ready.reserve(order.size());
  out.submittedBits.resize(order.size() * n);
  out.arrivalTimes.resize(order.size() * n);
  for (size_t k = 0; k < order.size(); ++k) {
    Candidate* cand = order[k];
    uint8_t* submitted = out.submittedBits.data() + k * n;
    Clock::time_point* arrivals = out.arrivalTimes.data() + k * n;
    std::memcpy(submitted, bits_.data() + cand->bitsAt, n);
    arrivalsInto(c, cand->spec->name, submitted, arrivals);
    ReadyOp op;
    if (submitted[rank_]) op.localId = takeLocal(*cand);
    // In ready order; an entry that a later insertion of this cycle evicted
    // is no longer in its slot.
    if (const auto* e = cache_.atSlot(cand->slot); e && e->spec == cand->spec) {
      cache_.touch(cand->slot);
    }
    op.spec = std::move(cand->spec);
    op.firstDims = std::move(cand->firstDims);
    op.devices = std::move(cand->devices);
    op.submitted = {submitted, static_cast<size_t>(n)};
    op.arrivals = {arrivals, static_cast<size_t>(n)};
    out.ready.push_back(std::move(op));
  }
}

// This rank's operation of a ready candidate, out of the pending set.
OpId Negotiator::takeLocal(const Candidate& cand) {
  if (cand.held) {
    // This rank's bit for the slot came from cached_[slot] (prepare).
    KOLO_CHECK(cachedUsed_[cand.slot]);
    const OpId id = cached_[cand.slot].id;
    releaseCached(cand.slot);
    return id;
  }
  auto it = pending_.find(cand.spec->name);
  KOLO_CHECK(it != pending_.end());
  const OpId id = it->second.id;
  release(it);
  return id;
}

// Per-rank first-seen times (the straggler tracker's input) are kept only
// for names that stay undecided past a cycle: a name decided in the cycle
// that first saw a rank's submission gets `now` for that rank.
void Negotiator::arrivalsInto(const Cycle& c, const std::string& name,
                              const uint8_t* submitted, Clock::time_point* a) {
  const auto f = firstSeen_.empty() ? firstSeen_.end() : firstSeen_.find(name);
  for (int r = 0; r < size_; ++r) {
    a[r] = !submitted[r] ? Clock::time_point::min()
           : f != firstSeen_.end() && f->second[r] != Clock::time_point::min()
               ? f->second[r]
               : c.now;
  }
  if (f != firstSeen_.end()) firstSeen_.erase(f);
}

// 6. Pending states follow the cache. First the cached operations whose
// entry is gone or changed (evicted, replaced by a new spec, or its slot
// reused this cycle) go back to pending_, to be sent; then the operations
// of pending_ that now hit the cache move to their slot.
void Negotiator::followCache() {
  for (size_t slot = 0; cachedCount_ > 0 && slot < cachedUsed_.size(); ++slot) {
    if (!cachedUsed_[slot]) continue;
    Local& local = cached_[slot];
    const auto* e = cache_.atSlot(slot);
    if (e && e->spec->name == local.spec.name && e->matches(local.spec, rank_)) continue;
    KOLO_CHECK(placeUnsent(local.id, local.spec));
    releaseCached(slot);
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    Local& local = it->second;
    const auto* e = cache_.find(it->first);
    if (e && e->matches(local.spec, rank_)) {
      placeCached(e->slot, local.id, local.spec);
      auto next = std::next(it);
      release(it);
      it = next;
      continue;
    }
    if (local.state == Local::State::kSent) {
      auto s = sent_.find(it->first);
      if (s == sent_.end() || !s->second[rank_]) local.state = Local::State::kUnsent;
    }
    ++it;
  }
}

// Waiting: pending somewhere, not ready, not merely held for its group; and
// the first-seen times of what still waits (or is held for its group).
void Negotiator::reportWaiting(Cycle& c) {
  const int n = size_;
  Outcome& out = c.out;
  out.waiting = std::move(c.waitingCached);
  for (const auto& [name, specs] : sent_) {
    Outcome::Waiting w{name, OpKind::kAllreduce, std::vector<bool>(n)};
    for (int r = 0; r < n; ++r) {
      if (!specs[r]) continue;
      w.submitted[r] = true;
      w.kind = specs[r]->kind;
    }
    out.waiting.push_back(std::move(w));
  }
  for (const auto& w : out.waiting) keepSeen(c, w.name, w.submitted);
  for (const Candidate* cand : c.heldSeen) {
    const uint8_t* has = bits_.data() + cand->bitsAt;
    keepSeen(c, cand->spec->name, std::vector<bool>(has, has + n));
  }
}

void Negotiator::keepSeen(const Cycle& c, const std::string& name,
                          const std::vector<bool>& submitted) {
  auto& v = firstSeen_[name];
  if (v.empty()) v.assign(size_, Clock::time_point::min());
  for (int r = 0; r < size_; ++r) {
    if (submitted[r] && v[r] == Clock::time_point::min()) v[r] = c.now;
  }
}

std::vector<OpId> Negotiator::pendingIds() const {
  std::vector<OpId> ids;
  for (const auto& [name, local] : pending_) ids.push_back(local.id);
  for (size_t slot = 0; slot < cachedUsed_.size(); ++slot) {
    if (cachedUsed_[slot]) ids.push_back(cached_[slot].id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

size_t Negotiator::pendingCount() const {
  return pending_.size() + cachedCount_;
}

}  // namespace kolo::runtime

// The negotiation cycle of docs/runtime.md ("One cycle").
//
// Nomenclature
// - pending: this rank's operations not yet decided, by name, each in one
//   state: kUnsent (its spec goes into the next variable part), kSent (every
//   rank holds its spec in sent_), kCached (it is in the response cache with
//   this rank's spec: only its slot bit travels).
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

#include "common/check.h"

namespace kolo::runtime {

namespace {

constexpr uint8_t kWireVersion = 1;
constexpr size_t kHeaderBytes = 24;
constexpr uint8_t kFlagShutdown = 1;
constexpr uint8_t kFlagJoined = 2;
constexpr uint8_t kFlagStall = 4;

template <typename T>
void putAt(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
T getAt(const std::vector<uint8_t>& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

template <typename T>
void append(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(ranks[i]);
  }
  return s;
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
  return static_cast<int>(std::count(submitted.begin(), submitted.end(), true));
}

struct Negotiator::Candidate {
  std::string name;
  OpSpec spec;
  std::vector<bool> submitted;
  std::vector<int64_t> firstDims;
  bool cached;  // was in the cache at the start of the cycle
  size_t slot;
};

Negotiator::Negotiator(int rank, int size, size_t cacheCapacity)
    : rank_(rank), size_(size), cache_(cacheCapacity) {
  KOLO_CHECK_GE(size, 1);
  KOLO_CHECK(rank >= 0 && rank < size);
}

size_t Negotiator::fixedBytes() const {
  return kHeaderBytes + (cache_.capacity() + 7) / 8;
}

size_t Negotiator::variableBytes(const std::vector<uint8_t>& fixed) {
  if (fixed.size() < kHeaderBytes) return 0;
  return getAt<uint32_t>(fixed, 4);
}

void Negotiator::submit(OpId id, const OpSpec& spec) {
  if (pending_.count(spec.name)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, toString(spec.kind)
                                                << " '" << spec.name << "' on rank "
                                                << rank_ << ": name already pending");
  }
  Local local{id, spec, Local::State::kUnsent, 0};
  if (const auto* e = cache_.find(spec.name); e && e->matches(spec, rank_)) {
    local.state = Local::State::kCached;
    local.slot = e->slot;
  }
  pending_.emplace(spec.name, std::move(local));
}

Message Negotiator::prepare(const CycleFlags& flags) {
  Message m;
  std::vector<uint8_t> specs;
  uint32_t count = 0;
  m.fixed.assign(fixedBytes(), 0);
  for (auto& [name, local] : pending_) {
    if (local.state == Local::State::kCached) {
      m.fixed[kHeaderBytes + local.slot / 8] |= uint8_t(1u << (local.slot % 8));
    } else if (local.state == Local::State::kUnsent) {
      local.spec.encode(specs);
      local.state = Local::State::kSent;
      ++count;
    }
  }
  if (count > 0 || !flags.stallShutdown.empty()) {
    append<uint32_t>(m.variable, count);
    m.variable.insert(m.variable.end(), specs.begin(), specs.end());
    append<uint32_t>(m.variable, static_cast<uint32_t>(flags.stallShutdown.size()));
    m.variable.insert(m.variable.end(), flags.stallShutdown.begin(),
                      flags.stallShutdown.end());
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

Outcome Negotiator::process(const std::vector<std::vector<uint8_t>>& fixed,
                            const std::vector<std::vector<uint8_t>>& variable,
                            Clock::time_point now) {
  const int n = size_;
  KOLO_CHECK_EQ(fixed.size(), static_cast<size_t>(n));
  Outcome out;
  std::vector<bool> live(n, true);
  std::vector<std::vector<OpSpec>> newSpecs(n);
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
      live[r] = false;
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
    const uint8_t* p = variable[r].data();
    const uint8_t* end = p + variable[r].size();
    uint32_t count;
    if (end - p < 4) KOLO_THROW(ErrorCode::kInvalidArgument, "malformed request list");
    std::memcpy(&count, p, 4);
    p += 4;
    for (uint32_t i = 0; i < count; ++i) newSpecs[r].push_back(OpSpec::decode(p, end));
    uint32_t stallBytes = 0;
    if (end - p >= 4) {
      std::memcpy(&stallBytes, p, 4);
      p += 4;
    }
    if ((f & kFlagStall) && out.stallShutdown.empty() && end - p >= stallBytes) {
      out.stallShutdown.assign(reinterpret_cast<const char*>(p), stallBytes);
    }
  }

  auto seen = [&](const std::string& name, int r) {
    auto& v = firstSeen_[name];
    if (v.empty()) v.assign(n, Clock::time_point::min());
    if (v[r] == Clock::time_point::min()) v[r] = now;
  };

  // 1. Holders of each cached slot, against the cache the messages used.
  struct Held {
    OpSpec spec;
    std::vector<int64_t> firstDims;
    std::vector<bool> has;
  };
  std::map<size_t, Held> holders;
  const size_t bitsAt = kHeaderBytes;
  for (size_t s = 0; s < cache_.capacity(); ++s) {
    const auto* e = cache_.atSlot(s);
    for (int r = 0; r < n; ++r) {
      if (!(fixed[r][bitsAt + s / 8] & (1u << (s % 8)))) continue;
      if (!e) continue;  // cannot happen with identical caches
      auto& h = holders[s];
      if (h.has.empty()) h = Held{e->spec, e->firstDims, std::vector<bool>(n, false)};
      h.has[r] = true;
      seen(e->spec.name, r);
    }
  }

  // 2. New specs; each evicts a cached entry of its name.
  for (int r = 0; r < n; ++r) {
    for (auto& spec : newSpecs[r]) {
      if (const auto* e = cache_.find(spec.name)) {
        holders.erase(e->slot);
        cache_.erase(spec.name);
      }
      seen(spec.name, r);
      auto& v = sent_[spec.name];
      if (v.empty()) v.resize(n);
      v[r] = std::move(spec);
    }
  }

  auto allLiveHave = [&](const std::vector<bool>& has) {
    bool any = false;
    for (int r = 0; r < n; ++r) {
      if (has[r]) any = true;
      if (live[r] && !has[r]) return false;
    }
    return any;
  };

  // 3. Candidates.
  std::vector<Candidate> candidates;
  std::set<std::string> decided;  // ready or failed this cycle
  auto failLocal = [&](const std::string& name, const std::string& message) {
    auto it = pending_.find(name);
    if (it != pending_.end()) {
      out.errors.push_back({it->second.id, name, message});
      pending_.erase(it);
    }
    decided.insert(name);
  };
  for (auto& [slot, h] : holders) {
    if (!allLiveHave(h.has)) continue;
    Candidate c{h.spec.name, h.spec, h.has, {}, true, slot};
    if (firstDimMayDiffer(h.spec.kind) && !h.spec.shape.empty()) {
      c.firstDims.assign(n, 0);
      for (int r = 0; r < n; ++r) {
        if (h.has[r] && r < static_cast<int>(h.firstDims.size())) {
          c.firstDims[r] = h.firstDims[r];
        }
      }
    }
    candidates.push_back(std::move(c));
  }
  for (auto it = sent_.begin(); it != sent_.end();) {
    const auto& specs = it->second;
    std::vector<bool> has(n);
    for (int r = 0; r < n; ++r) has[r] = specs[r].has_value();
    if (!allLiveHave(has)) {
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
      failLocal(it->first, message);
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
    OpSpec spec = *ref;
    const auto ins = cache_.insert(spec, firstDims);
    candidates.push_back(Candidate{spec.name, std::move(spec), has, std::move(firstDims),
                                   false, ins.slot});
    it = sent_.erase(it);
  }

  // 4. Groups: complete ones go, failed ones fail, others wait.
  std::map<uint64_t, uint32_t> groupCount;
  for (const auto& c : candidates) {
    if (c.spec.group != 0) ++groupCount[c.spec.group];
  }
  std::vector<Candidate> ready;
  std::set<std::string> held;
  for (auto& c : candidates) {
    const uint64_t g = c.spec.group;
    if (g != 0) {
      if (auto f = failedGroups_.find(g); f != failedGroups_.end()) {
        failLocal(c.name,
                  std::string(toString(c.spec.kind)) + " '" + c.name +
                      "': another member of its group failed: " + f->second.message);
        if (f->second.remaining <= 1) {
          failedGroups_.erase(f);
        } else {
          --f->second.remaining;
        }
        continue;
      }
      if (groupCount[g] < c.spec.groupSize) {
        held.insert(c.name);
        continue;
      }
    }
    ready.push_back(std::move(c));
  }

  // 5. Order: cached by slot, then new by name (the candidates' order
  // already), each group gathered at its first member.
  std::vector<const Candidate*> order;
  std::set<uint64_t> placed;
  for (const auto& c : ready) {
    if (c.spec.group == 0) {
      order.push_back(&c);
      continue;
    }
    if (!placed.insert(c.spec.group).second) continue;
    for (const auto& m : ready) {
      if (m.spec.group == c.spec.group) order.push_back(&m);
    }
  }
  for (const Candidate* c : order) {
    ReadyOp op;
    op.spec = c->spec;
    op.firstDims = c->firstDims;
    op.submitted = c->submitted;
    op.arrivals.assign(n, Clock::time_point::min());
    if (auto f = firstSeen_.find(c->name); f != firstSeen_.end()) {
      for (int r = 0; r < n; ++r) {
        if (c->submitted[r]) op.arrivals[r] = f->second[r];
      }
    }
    if (c->submitted[rank_]) {
      auto it = pending_.find(c->name);
      KOLO_CHECK(it != pending_.end());
      op.localId = it->second.id;
      pending_.erase(it);
    }
    if (const auto* e = cache_.find(c->name)) cache_.touch(e->slot);  // in ready order
    decided.insert(c->name);
    out.ready.push_back(std::move(op));
  }
  for (const auto& name : decided) firstSeen_.erase(name);

  // 6. Pending states follow the cache.
  for (auto& [name, local] : pending_) {
    const auto* e = cache_.find(name);
    if (e && e->matches(local.spec, rank_)) {
      local.state = Local::State::kCached;
      local.slot = e->slot;
      continue;
    }
    if (local.state == Local::State::kCached) {
      local.state = Local::State::kUnsent;
    } else if (local.state == Local::State::kSent) {
      auto s = sent_.find(name);
      if (s == sent_.end() || !s->second[rank_]) local.state = Local::State::kUnsent;
    }
  }

  // Waiting: pending somewhere, not ready, not merely held for its group.
  for (const auto& [slot, h] : holders) {
    if (decided.count(h.spec.name) || held.count(h.spec.name)) continue;
    out.waiting.push_back({h.spec.name, h.spec.kind, h.has});
  }
  for (const auto& [name, specs] : sent_) {
    Outcome::Waiting w{name, OpKind::kAllreduce, std::vector<bool>(n)};
    for (int r = 0; r < n; ++r) {
      if (!specs[r]) continue;
      w.submitted[r] = true;
      w.kind = specs[r]->kind;
    }
    out.waiting.push_back(std::move(w));
  }
  return out;
}

std::vector<OpId> Negotiator::pendingIds() const {
  std::vector<OpId> ids;
  for (const auto& [name, local] : pending_) ids.push_back(local.id);
  return ids;
}

size_t Negotiator::pendingCount() const {
  return pending_.size();
}

}  // namespace kolo::runtime

// The store side of making an NCCL communicator (nccl_rendezvous.h).
//
// Order: every member publishes member/<r> = "joined" and counts itself in
// `joined`; all wait until the counter reaches the group's size (a barrier
// through the store, so a missing rank is found here, by name, before NCCL
// is asked for anything that could wait on it). Only then does rank 0 make
// the unique id: making it starts NCCL's bootstrap root, which would wait
// for members that are not coming. A member that fails anywhere publishes
// "failed: ..." and counts itself in `failed`; the others see the counter
// at their next poll and read who it was.
#include "collectives/cuda/nccl_rendezvous.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/check.h"
#include "common/rank_text.h"
#include "rendezvous/store.h"

namespace kolo::collectives::cuda {
namespace {

constexpr const char* kJoined = "joined";
constexpr const char* kFailedPrefix = "failed: ";

std::string seconds(std::chrono::milliseconds timeout) {
  std::ostringstream os;
  os << timeout.count() / 1000.0 << " s";
  return os.str();
}

// The value under `key`, or false when it does not exist (yet).
bool tryGet(rendezvous::Store& store, const std::string& key, std::string* value) {
  try {
    *value = store.getString(key, std::chrono::milliseconds(0));
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kTimeout) return false;
    throw;
  }
}

}  // namespace

int NcclGroup::globalRank(int member) const {
  if (globalRanks.empty()) return member;
  return globalRanks.at(static_cast<size_t>(member));
}

std::string NcclGroup::self() const {
  return rankText(globalRank(rank));
}

NcclRendezvous::NcclRendezvous(rendezvous::Store& store, NcclGroup group,
                               Clock::time_point deadline)
    : store_(store), group_(std::move(group)), deadline_(deadline) {
  if (group_.size < 1 || group_.rank < 0 || group_.rank >= group_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "NCCL communicator: rank "
                                                << group_.rank << " is not in a group of "
                                                << group_.size << " ranks");
  }
  if (group_.key.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               group_.self() << ": NCCL communicator: the store key is empty (it must be "
                                "unique per communicator)");
  }
  if (!group_.globalRanks.empty() &&
      group_.globalRanks.size() != static_cast<size_t>(group_.size)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "NCCL communicator '" << group_.key << "': " << group_.globalRanks.size()
                                     << " global ranks given for a group of "
                                     << group_.size);
  }
  const int64_t uses = store_.add(group_.key + "/nccl/uses", 1);
  prefix_ = group_.key + "/nccl/" + std::to_string((uses - 1) / group_.size) + "/";
}

std::string NcclRendezvous::keyOf(const std::string& name) const {
  return prefix_ + name;
}

void NcclRendezvous::join() {
  store_.setString(keyOf("member/" + std::to_string(group_.rank)), kJoined);
  store_.add(keyOf("joined"), 1);
  const bool all =
      pollUntil([&] { return store_.add(keyOf("joined"), 0) >= group_.size; });
  if (!all) throwMissing(false);
}

NcclLibrary::UniqueId NcclRendezvous::exchangeId(const MakeId& makeId) {
  NcclLibrary::UniqueId id{};
  const std::string key = keyOf("id");
  if (group_.rank == 0) {
    id = makeId();
    store_.set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    return id;
  }
  std::vector<uint8_t> bytes;
  // The store's own wait, in slices, so that a failure published meanwhile
  // ends the wait early.
  const bool got = pollUntil([&] {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    const auto slice =
        std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(200));
    try {
      bytes = store_.get(key, slice);
      return true;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kTimeout) return false;
      throw;
    }
  });
  if (!got) throwMissing(true);
  if (bytes.size() != sizeof(id.internal)) {
    KOLO_THROW(ErrorCode::kInternal,
               group_.self() << ": NCCL communicator '" << group_.key
                             << "': the unique id in the store has " << bytes.size()
                             << " bytes, not " << sizeof(id.internal));
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

void NcclRendezvous::checkPeers(std::chrono::milliseconds every) {
  const auto now = Clock::now();
  if (now - lastCheck_ < every) return;
  lastCheck_ = now;
  if (store_.add(keyOf("failed"), 0) > 0) throwPeerFailure();
}

void NcclRendezvous::fail(const std::string& message) noexcept {
  if (failed_) return;
  failed_ = true;
  try {
    store_.setString(keyOf("member/" + std::to_string(group_.rank)),
                     kFailedPrefix + message);
    store_.add(keyOf("failed"), 1);
  } catch (...) {
    // The others time out instead (nccl_rendezvous.h).
  }
}

bool NcclRendezvous::pollUntil(const std::function<bool()>& done) {
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    checkPeers(std::chrono::milliseconds(0));
    if (done()) return true;
    const auto now = Clock::now();
    if (now >= deadline_) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline_ - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void NcclRendezvous::throwPeerFailure() {
  for (int r = 0; r < group_.size; ++r) {
    if (r == group_.rank) continue;
    std::string value;
    if (!tryGet(store_, keyOf("member/" + std::to_string(r)), &value)) continue;
    if (value.rfind(kFailedPrefix, 0) != 0) continue;
    const int peer = group_.globalRank(r);
    KOLO_THROW_PEER(
        ErrorCode::kPeerLost, peer,
        group_.self() << ": NCCL communicator '" << group_.key << "': " << rankText(peer)
                      << " failed to join: " << value.substr(std::strlen(kFailedPrefix)));
  }
  KOLO_THROW(ErrorCode::kPeerLost, group_.self() << ": NCCL communicator '" << group_.key
                                                 << "': a member failed to join");
}

void NcclRendezvous::throwMissing(bool forId) {
  std::vector<int> missing;
  if (forId) {
    missing.push_back(group_.globalRank(0));
  } else {
    for (int r = 0; r < group_.size; ++r) {
      std::string value;
      if (!tryGet(store_, keyOf("member/" + std::to_string(r)), &value)) {
        missing.push_back(group_.globalRank(r));
      }
    }
  }
  const int peer = missing.empty() ? -1 : missing.front();
  KOLO_THROW_PEER(ErrorCode::kTimeout, peer,
                  group_.self()
                      << ": NCCL communicator '" << group_.key << "' (" << group_.size
                      << " ranks): "
                      << (missing.empty() ? "a member" : rankList(missing, 16))
                      << (forId ? " never published the NCCL unique id" : " never joined")
                      << " within " << seconds(group_.timeout) << " (KOLO_TIMEOUT)");
}

}  // namespace kolo::collectives::cuda

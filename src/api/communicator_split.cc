// CommunicatorImpl::split: a team over some of the ranks, its arguments
// checked here and against the other members' through the store.
#include <sstream>

#include "api/communicator_impl.h"
#include "common/check.h"

namespace kolo {
namespace api {

// ---- split (teams) -----------------------------------------------------------

namespace {

using std::chrono::milliseconds;

milliseconds toMillis(double seconds) {
  return milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

std::string listText(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i > 0 ? "," : "") << ranks[i];
  os << "]";
  return os.str();
}

std::vector<uint8_t> encodeRanks(const std::vector<int>& ranks) {
  const std::string text = listText(ranks);
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace

// A team is a new CommunicatorImpl over the members, meeting through the
// parent's store under "<parent name>/split/<name>/". Before building it the
// members check, through the store, that the name is fresh (a counter that
// only the first use brings to the team's size) and that they all passed
// the same list. Nothing here touches the parent's transports, so split()
// may run while the parent is busy on another thread.
std::shared_ptr<Communicator> CommunicatorImpl::split(const std::vector<int>& ranks,
                                                      const std::string& name) {
  const int n = size();
  const int me = rank();
  if (name.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "split on rank " << me << ": empty team name");
  }
  if (ranks.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "split '" << name << "' on rank " << me << ": empty rank list");
  }
  std::vector<bool> seen(n, false);
  int teamRank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= n) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "split '" << name << "' on rank " << me << ": rank " << r << " in "
                           << listText(ranks) << " is not a rank of a communicator of "
                           << n);
    }
    if (seen[r]) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "split '" << name << "' on rank " << me << ": rank " << r
                           << " is listed twice in " << listText(ranks));
    }
    seen[r] = true;
    if (r == me) teamRank = static_cast<int>(i);
  }
  if (teamRank < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "split '" << name << "' called on rank " << me << ", which is not in "
                         << listText(ranks) << " (only members call it)");
  }

  CommunicatorConfig config;
  config.rank = teamRank;
  config.size = static_cast<int>(ranks.size());
  config.rendezvous = config_.rendezvous;
  config.hostStore = false;
  config.hostId = layout().hostId;
  config.name = config_.name + "/split/" + name;
  Settings settings = settings_;
  // MPI transports are created over MPI_COMM_WORLD, collectively: a subset
  // of ranks cannot make one. A team uses shm within a host, tcp between.
  if (settings.transport == "mpi") settings.transport = "auto";

  if (config.size > 1) {
    KOLO_CHECK(store_ != nullptr);
    rendezvous::PrefixStore store(config.name, *store_);
    const auto timeout = toMillis(settings_.connectTimeoutSeconds);
    if (store.add("split/uses", 1) > config.size) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "split '" << name << "' on rank " << me
                           << ": the team name was used before in this job (names "
                              "must be unique)");
    }
    const std::vector<uint8_t> mine = encodeRanks(ranks);
    // Keyed by this communicator's ranks: members with different lists
    // still read each other's.
    store.set("split/ranks/" + std::to_string(me), mine);
    for (int i = 0; i < config.size; ++i) {
      if (i == teamRank) continue;
      const std::vector<uint8_t> theirs =
          store.get("split/ranks/" + std::to_string(ranks[i]), timeout);
      if (theirs != mine) {
        KOLO_THROW(ErrorCode::kMismatch,
                   "split '" << name << "': rank " << me << " lists ranks "
                             << listText(ranks) << " but rank " << ranks[i] << " lists "
                             << std::string(theirs.begin(), theirs.end()));
      }
    }
  }
  auto team = std::make_shared<CommunicatorImpl>(config, settings, store_, familyLost_);
  team->elastic_ = elastic_;
  return team;
}

}  // namespace api
}  // namespace kolo

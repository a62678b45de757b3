#include "rendezvous/elastic_membership.h"

#include <sstream>

#include "common/check.h"

namespace kolo::rendezvous::elastic {

std::string wantKey(int64_t worker) {
  return "elastic/want/" + std::to_string(worker);
}

std::string assignKey(int64_t worker, int64_t request) {
  return "elastic/assign/" + std::to_string(worker) + "/" + std::to_string(request);
}

std::string encode(const Assignment& a) {
  return std::to_string(a.generation) + " " + std::to_string(a.rank) + " " +
         std::to_string(a.size) + " " + std::to_string(a.hostUpdates) + " " +
         std::to_string(a.hostAdditions);
}

std::string encodeRefusal(const std::string& reason) {
  return "refused " + reason;
}

std::optional<Assignment> decode(const std::string& value, std::string& refusal) {
  if (value.rfind("refused ", 0) == 0) {
    refusal = value.substr(8);
    return std::nullopt;
  }
  std::istringstream in(value);
  Assignment a;
  std::string rest;
  if (!(in >> a.generation >> a.rank >> a.size >> a.hostUpdates >> a.hostAdditions) ||
      (in >> rest) || a.generation < 1 || a.size < 1 || a.rank < 0 || a.rank >= a.size ||
      a.hostUpdates < 0 || a.hostAdditions < 0 || a.hostAdditions > a.hostUpdates) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "elastic membership: malformed assignment '" << value << "'");
  }
  return a;
}

std::string worldName(int64_t generation) {
  return "world/e" + std::to_string(generation);
}

Assignment joinGeneration(Store& store, int64_t worker,
                          std::chrono::milliseconds timeout) {
  const int64_t request = store.add(wantKey(worker), 1);
  store.add(kWantTotalKey, 1);
  const std::string key = assignKey(worker, request);
  std::string value;
  try {
    value = store.getString(key, timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout) throw;
    KOLO_THROW(ErrorCode::kTimeout, "elastic worker "
                                        << worker << " waited " << timeout.count() / 1000
                                        << " s for its place in the next world (" << key
                                        << "); the launcher did not answer");
  }
  std::string refusal;
  auto a = decode(value, refusal);
  if (!a) {
    KOLO_THROW(
        ErrorCode::kInvalidArgument,
        "elastic worker " << worker << " was not taken into the next world: " << refusal);
  }
  return *a;
}

}  // namespace kolo::rendezvous::elastic

// Errors of a process set in global ranks (set_rank_names.h).
//
// The text is scanned once for "rank N" and "ranks A,B,..." (whole words,
// not after "local "); a match whose numbers are all indices of the set is
// replaced by the global ranks followed by "(rank N of process set S)",
// anything else is copied as it is.
#include "runtime/set_rank_names.h"

#include <kolo/error.h>

#include <regex>
#include <sstream>

namespace kolo::runtime {
namespace {

bool identity(const SetRankNames& names) {
  for (size_t i = 0; i < names.globalRanks.size(); ++i) {
    if (names.globalRanks[i] != static_cast<int>(i)) return false;
  }
  return true;
}

// The numbers of "A,B,C", or false when one is not an index of the set.
bool parseIndices(const std::string& list, size_t size, std::vector<int>* out) {
  std::istringstream is(list);
  std::string item;
  while (std::getline(is, item, ',')) {
    if (item.empty() || item.size() > 9) return false;
    const int v = std::stoi(item);
    if (v < 0 || static_cast<size_t>(v) >= size) return false;
    out->push_back(v);
  }
  return !out->empty();
}

}  // namespace

std::string globalRankText(std::string_view text, const SetRankNames& names) {
  if (identity(names)) return std::string(text);
  static const std::regex kRanks(R"(\b(ranks?) ([0-9]+(?:,[0-9]+)*)\b)");
  const std::string s(text);
  std::string out;
  size_t copied = 0;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), kRanks);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const size_t at = static_cast<size_t>(m.position(0));
    std::vector<int> indices;
    const bool local = at >= 6 && s.compare(at - 6, 6, "local ") == 0;
    if (local || !parseIndices(m[2].str(), names.globalRanks.size(), &indices)) continue;
    out.append(s, copied, at - copied);
    out += m[1].str() + " ";
    for (size_t i = 0; i < indices.size(); ++i) {
      out += (i > 0 ? "," : "") + std::to_string(names.globalRanks[indices[i]]);
    }
    out += " (" + m[0].str() + " of process set " + std::to_string(names.set) + ")";
    copied = at + static_cast<size_t>(m.length(0));
  }
  out.append(s, copied, std::string::npos);
  return out;
}

std::exception_ptr inGlobalRanks(std::exception_ptr error, const SetRankNames& names) {
  if (!error || identity(names)) return error;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kPeerLost && e.code() != ErrorCode::kTimeout) return error;
    const int peer = e.peer();
    const int global = peer >= 0 && static_cast<size_t>(peer) < names.globalRanks.size()
                           ? names.globalRanks[peer]
                           : peer;
    return std::make_exception_ptr(
        Error(e.code(), globalRankText(e.what(), names), global));
  } catch (...) {
  }
  return error;
}

}  // namespace kolo::runtime

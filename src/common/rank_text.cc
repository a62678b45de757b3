#include "common/rank_text.h"

namespace kolo {

std::string rankNumbers(const std::vector<int>& ranks, size_t maxListed) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < maxListed; ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ranks[i]);
  }
  if (ranks.size() > maxListed) {
    s += ",... (" + std::to_string(ranks.size()) + " ranks)";
  }
  return s;
}

std::string rankList(const std::vector<int>& ranks, size_t maxListed) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankNumbers(ranks, maxListed);
}

std::string rankText(int rank, std::string_view host, int64_t pid) {
  std::string s = "rank " + std::to_string(rank);
  if (!host.empty()) {
    s += " on host ";
    s += host;
  }
  if (pid > 0) s += " (pid " + std::to_string(pid) + ")";
  return s;
}

}  // namespace kolo

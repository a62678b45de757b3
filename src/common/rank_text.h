// How a message names ranks, the same way everywhere:
//   rankNumbers({1, 3})          "1,3"
//   rankList({3})                "rank 3"
//   rankList({0, 2, 5})          "ranks 0,2,5"
//   rankList(40 ranks, 16)       "ranks 0,1,...,15,... (40 ranks)"
//   rankText(3)                  "rank 3"
//   rankText(3, "", 1234)        "rank 3 (pid 1234)"
//   rankText(3, "node7")         "rank 3 on host node7"
//   rankText(3, "node7", 1234)   "rank 3 on host node7 (pid 1234)"
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kolo {

// Every rank of the list, in its order.
inline constexpr size_t kAllRanks = static_cast<size_t>(-1);

// The numbers, comma-separated; past `maxListed` of them, ",... (N ranks)".
std::string rankNumbers(const std::vector<int>& ranks, size_t maxListed = kAllRanks);

// "rank N" for one rank, "ranks A,B,..." for several (rankNumbers' list).
std::string rankList(const std::vector<int>& ranks, size_t maxListed = kAllRanks);

// One rank, with where it runs when known: an empty host and a pid <= 0
// are left out.
std::string rankText(int rank, std::string_view host = {}, int64_t pid = 0);

}  // namespace kolo

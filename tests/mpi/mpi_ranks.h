// What the modes of kolo-mpi-ranks (mpi_ranks.cc, mpi_ranks_p2p.cc) share:
// the failure count every mode reports through, and the checks that add to
// it. A failed check prints "FAIL rank R: ..." and counts; modes print
// "<mode> ok" only when nothing failed.
#pragma once

#include <kolo/error.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kolo_mpi_ranks {

extern int gRank;      // this rank, for messages (-1 until known)
extern int gFailures;  // failed checks so far

void fail(const std::string& what);

#define EXPECT(cond, what)                      \
  do {                                          \
    if (!(cond)) {                              \
      fail(std::string(#cond) + ": " + (what)); \
    }                                           \
  } while (0)

// The first differing element of a check, or nothing.
template <typename T>
bool sameAs(const std::vector<T>& got, const std::function<T(size_t)>& want,
            const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      fail(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
           ", expected " + std::to_string(want(i)));
      return false;
    }
  }
  return true;
}

// fn() must throw kolo::Error with `code` and a message holding every part.
template <typename Fn>
void expectError(kolo::ErrorCode code, const std::vector<std::string>& parts, Fn&& fn,
                 const std::string& what) {
  try {
    fn();
    fail(what + ": no error");
  } catch (const kolo::Error& e) {
    if (e.code() != code) {
      fail(what + ": code " + std::to_string(int(e.code())) + ": " + e.what());
      return;
    }
    for (const auto& p : parts) {
      if (std::string(e.what()).find(p) == std::string::npos) {
        fail(what + ": message lacks '" + p + "': " + e.what());
      }
    }
  }
}

// Modes of mpi_ranks_p2p.cc (see there).
int modePointToPoint();
int modePointToPointLost(const std::string& how);

}  // namespace kolo_mpi_ranks

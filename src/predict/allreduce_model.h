// The cost of one allreduce of each of kolo's algorithms, from the
// constants (constants.h) and the job's shape: the model behind
// `kolo-predict allreduce`, the training model and kolo's own selection
// (src/collectives/selection.cc).
//
// Each algorithm's cost counts the steps, bytes, messages and reductions
// that its implementation in src/collectives/ performs on its critical path
// (allreduce_model.cc explains each). A cost is a LinearCost: seconds as a
// fixed part (link wire time and latency, known from the shape) plus a
// coefficient on each constant, so that the calibration fit (fit.h) can
// solve for the constants by least squares.
//
// Everything here is a pure function of its arguments: two ranks with the
// same shape and constants get the same answer.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "predict/constants.h"

namespace kolo::predict {

enum class Algorithm { kRing, kRhd, kTree, kHier, kShm };
inline constexpr int kAlgorithms = 5;
std::string_view toString(Algorithm a);  // kolo's names: ring, rhd, tree, hier, shm
std::optional<Algorithm> algorithmFromName(std::string_view name);

// Where the ranks are and what joins them. Ranks are placed in blocks:
// host h holds ranks [h*k, (h+1)*k) (kolorun -H a:k,b:k), the last host
// possibly fewer.
struct JobShape {
  int ranks = 1;
  int ranksPerHost = 1;
  double linkBps = 0;      // each host's link, each direction; 0: not limited
  double linkLatency = 0;  // seconds added to each step that crosses hosts
  // The link's token-bucket depth in bytes (tc tbf's burst; 0: none): a
  // link idle long enough to refill its bucket passes that many bytes at
  // once, so a short message on a shaped link costs less than its wire
  // time (allreduce_model.cc). Real links: 0.
  double linkBurst = 0;
  // The link's MTU: every segment of MTU - 52 payload bytes (TCP/IP
  // headers with timestamps) takes MTU + 14 bytes (Ethernet header) of the
  // link's rate, so the payload moves at (MTU - 52) / (MTU + 14) of it
  // (1500: 95.6%). 0: the rate is the payload's.
  int linkMtu = 1500;
  Path intra = Path::kShm;  // between ranks of one host (KOLO_TRANSPORT=tcp: kTcp)
  Path inter = Path::kTcp;  // between hosts (kMpi under the MPI engine)
  // Every rank on one host with a shared-memory arena: the shm algorithm
  // runs (and kolo's selection uses only it).
  bool shmArena = false;
  // Cores the ranks of a host share; 0: at least one per rank. With fewer
  // cores than ranks, every term that is work of a rank (all but the
  // link's wire time and latency) grows by ranks/cores.
  int coresPerHost = 0;
  bool hostsShareCores = false;  // all hosts on one machine (netns emulation)
  // KOLO_SPIN_US in seconds: how long a waiting rank polls before it gives
  // up its core. With more ranks than cores, a step whose ranks wait in the
  // kernel (one rank per host, sockets only) waits this long for a core
  // held by a polling rank; ranks with a host-mate keep yielding and pay
  // the fitted `wake` instead (constants.h).
  double spinSeconds = 100e-6;
  size_t shmChunkBytes = 128 * 1024;  // KOLO_SHM_CHUNK_BYTES
  // The host of each rank when the placement is not in blocks (kolo's
  // selection passes the job's real one); empty: blocks of ranksPerHost.
  std::vector<int> hostOf;

  int hosts() const;
};

// What else a call pays besides the algorithm.
struct CostOptions {
  // The descriptor exchange of Communicator::allreduce (kolo-bench's
  // calls): one shared-memory step on one host, else a ring allgather of
  // 32 bytes (n-1 steps). The runtime's negotiated calls skip it.
  bool agreement = false;
};

// seconds = fixed + sum over paths and terms of coef * constant.
struct LinearCost {
  double fixed = 0;
  std::array<std::array<double, kTerms>, kPaths> coef{};

  void add(Path p, Term t, double count) {
    coef[static_cast<int>(p)][static_cast<int>(t)] += count;
  }
  double seconds(const Constants& c) const;
  LinearCost& operator+=(const LinearCost& o);
};

// Whether kolo could run `a` in this shape (shm: one host with an arena;
// hier: several hosts with several ranks each).
bool usable(Algorithm a, const JobShape& shape);

// The cost of one allreduce of `bytes` (float32 sum) with `a`. For hier,
// the cross-host step uses the flat algorithm kolo's selection picks.
LinearCost allreduceCost(Algorithm a, size_t bytes, const JobShape& shape,
                         const Constants& c, const CostOptions& options = {});
double allreduceSeconds(Algorithm a, size_t bytes, const JobShape& shape,
                        const Constants& c, const CostOptions& options = {});

// ---- kolo's selection -------------------------------------------------------

// The algorithms kolo's selection chooses among in this shape: shm alone
// on one host with an arena (it checks the call's arguments in its own
// first step, so no other may be chosen there for some sizes: ranks whose
// sizes disagree would run different protocols); ring, rhd, tree elsewhere,
// and hier too across hosts with several ranks each.
std::vector<Algorithm> selectionCandidates(const JobShape& shape);

// Sizes are decided in classes, four per power of two: the decision for a
// class is the model's at the class's middle size, so it depends on the
// class only (any size of the class gets the same answer on every rank,
// and a per-class cache holds it). sizeClass(b) < kSizeClasses.
inline constexpr int kSizeClasses = 4 * 65;
int sizeClass(size_t bytes);
size_t sizeClassBytes(int sizeClass);

// The cheapest candidate for the class of `bytes` (ties: the earlier of
// tree, rhd, ring, hier).
Algorithm selectAllreduce(size_t bytes, const JobShape& shape, const Constants& c);

// The seconds of one allreduce of `bytes` with the algorithm kolo's
// selection picks: what the training model charges a fused buffer.
double selectedAllreduceSeconds(size_t bytes, const JobShape& shape, const Constants& c,
                                const CostOptions& options = {});

}  // namespace kolo::predict

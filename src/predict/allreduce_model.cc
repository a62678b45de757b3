// The allreduce cost model: each algorithm of src/collectives/ as the
// sequence of steps it runs.
//
// Notation: n ranks, k ranks per host, H hosts, b bytes (float32, 4-byte
// elements), p = the largest power of two <= n, e = n - p ("extra" ranks of
// the fold, partition.h). For a path P (constants.h) alpha_P, beta_P,
// gamma_P, message_P, call_P; for the host link, rate R bits/s and latency
// L seconds; c = the oversubscription of the cores (ranks sharing the
// cores of a host / cores, at least 1), which multiplies every term that is
// a rank's own work and none of the wire's.
//
// One step: every active rank sends m bytes to its partner in g messages
// and receives as much (the transports are full duplex), then reduces r
// bytes. It costs
//     latency + max(wire, work) + tail
// latency: c*alpha of the slower kind of pair (inside a host or across),
//     plus L when some pair crosses hosts; with more ranks sharing the
//     cores than cores, plus the wait for a core: `wake` of the path when
//     the ranks have host-mates (their transports yield instead of
//     sleeping, so the waiting ranks stay runnable), else the spin
//     (JobShape::spinSeconds) of the rank still polling on the core
//     (see excess waits below: oversubscribed(), yielding());
// wire: m*s*8/R' when some pair crosses a shaped link, where s is the
//     contention: the number of ranks of one host that send across the
//     host's link in this step (the most loaded host counts; they share
//     its R), and R' the payload's share of R (headers: payloadBps());
//     with a token bucket (JobShape::linkBurst) the bytes of each link
//     direction beyond what its bucket holds (bucketWire, refill); in
//     the folded schedules of tree and rhd, plus the queueing behind
//     bytes sent early (eagerExtra, eager_schedule.h: the ranks that sit
//     out the fold-in send their first steps at once, into the links of
//     the ranks still receiving the fold-in);
// work: the transport's own work, which runs while the link drains:
//     m*beta + (g-1)*message of the pair's path, plus for a pipelined step
//     (the ring's chunks) the reduction of all chunks but the last;
// tail: the reduction that follows the last byte (r*gamma; a pipelined
//     step only its last chunk's).
// work and tail: with a core per rank the slower kind of pair's; when the
// ranks that work in this step (send or receive: the fold's idle ranks do
// not) outnumber the cores, w = working / cores times the mean over those
// ranks (the cores do all of it). The contention and the working ranks are
// counted by walking the step's pairs over the placement, so the fold's
// pairs and the halving's far partners are what they are in the
// implementation, not an average.
//
// The algorithms (see each file's comment for the schedule):
//   tree  (allreduce_tree.cc, recursive doubling): with e > 0 the fold-in
//         (ranks 2i send b to 2i+1, which reduce b), log2 p steps of
//         (m = b, r = b) with partner q XOR 2^j, then the fold-back (b).
//         ~ log2(p) alpha + log2(p) b (beta + gamma).
//   rhd   (allreduce_rhd.cc, Rabenseifner): the same fold, then log2 p
//         halving steps of (b/2, b/4, .., b/p) reduced, then log2 p
//         doubling steps of (b/p, .., b/2), partners from the far end
//         (mask p/2 first): ~ 2 log2(p) alpha + 2(p-1)/p b beta + (p-1)/p b gamma.
//   ring  (allreduce_ring.cc, ring_pipeline.cc): 2(n-1) steps of
//         m = ceil(b/n) (whole elements) in ceil(m / 128 KiB) chunk messages,
//         the first n-1 reduced; neighbours r -> r+1, so a host's link
//         carries one flow (s = 1): ~ 2(n-1) alpha + 2(n-1)/n b beta +
//         (n-1)/n b gamma.
//   hier  (allreduce_hier.cc): (1) reduce to local rank 0: up to 64 KiB a
//         binomial tree of ceil(log2 k) steps (b, reduced), above a ring
//         reduce-scatter of k-1 steps of b/k and a gather of (k-1) b/k
//         bytes into local rank 0; (2) among the H local rank 0s (one per
//         host, s = 1) the flat algorithm kolo's selection picks for b;
//         (3) a pipelined binomial broadcast in 256 KiB chunks: the root
//         sends b to each of its ceil(log2 k) children, and the last chunk
//         takes ceil(log2 k) hops.
//   shm   (allreduce_shm.cc, one host): up to 24 bytes the inline path, one
//         synchronisation and n*b reduced; else per chunk C of
//         KOLO_SHM_CHUNK_BYTES: up to 16 KiB one synchronisation, C staged
//         (beta) and (n-1) C reduced by every rank; above, two
//         synchronisations, (n-1)/n C staged in, C/n of own reduced slice
//         staged, (n-1)/n C copied out (beta on each) and (n-1)/n C reduced.
//
// Every call adds call_P of its main path (the arena for shm, the link for
// several hosts, else the host's path); CostOptions::agreement adds the
// descriptor exchange.
#include "predict/allreduce_model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "predict/eager_schedule.h"

namespace kolo::predict {
namespace {

constexpr double kElementBytes = 4;                  // float32
constexpr double kRingChunkBytes = 128 * 1024;       // RingPlan::chunkBytes
constexpr double kBroadcastChunkBytes = 256 * 1024;  // broadcast_binomial.cc
constexpr size_t kLocalTreeBytes = 64 * 1024;        // allreduce_hier.cc
constexpr double kShmInlineBytes = 24;               // 56-byte line - 32-byte descriptor
constexpr double kShmReduceAllBytes = 16 * 1024;     // allreduce_shm.cc
constexpr double kDescriptorBytes = 32;              // sizeof(OpDescriptor)
constexpr int kEagerReplayRanks = 64;  // most ranks replayed (eager_schedule.h)

constexpr std::string_view kNames[kAlgorithms] = {"ring", "rhd", "tree", "hier", "shm"};

// Who sends in one step.
struct Pairs {
  int intraRanks = 0;  // ranks whose partner is on their host
  int interRanks = 0;  // ranks whose partner is on another host
  int flows = 0;       // the most ranks of one host sending off it (0: none)
  // Per host, the ranks sending off it and receiving from off it (the
  // flows through its link's two directions).
  std::vector<int> out, in;
  // The oversubscription of the cores by the ranks that send or receive
  // in this step (>= 1): the cores' share each working rank gets.
  double workCpu = 1;
  bool intra() const { return intraRanks > 0; }
};

// a * f (every coefficient and the fixed part).
LinearCost scaled(const LinearCost& a, double f) {
  LinearCost out;
  out.fixed = a.fixed * f;
  for (int p = 0; p < kPaths; ++p) {
    for (int t = 0; t < kTerms; ++t) out.coef[p][t] = a.coef[p][t] * f;
  }
  return out;
}

const LinearCost& larger(const LinearCost& a, const LinearCost& b, const Constants& c) {
  return a.seconds(c) >= b.seconds(c) ? a : b;
}

struct Model {
  const JobShape& shape;
  const Constants& c;
  double cpu;   // oversubscription factor c >= 1
  double wake;  // 1: steps pay the wake term (oversubscribed, yielding ranks)
  double spin;  // seconds a step waits for a polling rank's core (or 0)
  // The links' token buckets (bytes), when the shape has a burst: each
  // host's up and down direction, carried from step to step.
  struct Buckets {
    std::vector<double> up, down;
  };
  Buckets* buckets = nullptr;
  // eagerExtra()'s replays by (ranks, bytes, step bytes): a call is priced
  // many times over while the token buckets settle.
  using EagerKey = std::tuple<int, double, std::vector<double>, double>;
  std::map<EagerKey, std::vector<double>>* eagerCache = nullptr;

  int hostOf(int r) const {
    return shape.hostOf.empty() ? r / std::max(1, shape.ranksPerHost) : shape.hostOf[r];
  }

  // Pairs of a step over ranks [0, n) of this shape; partner(r) < 0: r is
  // idle (or only receives).
  template <typename Partner>
  Pairs pairsOf(int n, Partner partner) const {
    Pairs out;
    std::vector<int> flows(static_cast<size_t>(shape.hosts()), 0);
    std::vector<bool> active(static_cast<size_t>(n), false);
    for (int r = 0; r < n; ++r) {
      const int q = partner(r);
      if (q < 0) continue;
      active[r] = active[q] = true;
      if (hostOf(r) == hostOf(q)) {
        ++out.intraRanks;
      } else {
        ++out.interRanks;
        out.flows = std::max(out.flows, ++flows[hostOf(r)]);
        if (out.in.empty()) out.in.assign(flows.size(), 0);
        ++out.in[hostOf(q)];
      }
    }
    out.out = flows;
    std::vector<int> working(static_cast<size_t>(shape.hosts()), 0);
    for (int r = 0; r < n; ++r) {
      if (active[r]) ++working[shape.hostsShareCores ? 0 : hostOf(r)];
    }
    out.workCpu = workCpuOf(*std::max_element(working.begin(), working.end()));
    return out;
  }

  // The oversubscription when `working` ranks share the cores (of a host,
  // or of the machine when the hosts share it).
  double workCpuOf(double working) const {
    if (shape.coresPerHost <= 0) return 1;
    return std::max(1.0, working / shape.coresPerHost);
  }

  // The CPU work of a step whose ranks do `intra` or `inter` work each:
  // with a core per rank the slowest rank's; on shared cores (cpu > 1)
  // the cores do every active rank's work, cpu times the mean.
  LinearCost work(const Pairs& pairs, const LinearCost& intra,
                  const LinearCost& inter) const {
    const double w = pairs.workCpu;
    if (pairs.interRanks == 0) return scaled(intra, w);
    if (pairs.intraRanks == 0) return scaled(inter, w);
    if (w <= 1) return larger(intra, inter, c);
    const double n = pairs.intraRanks + pairs.interRanks;
    LinearCost out = scaled(intra, w * pairs.intraRanks / n);
    out += scaled(inter, w * pairs.interRanks / n);
    return out;
  }

  // The step's cost added to `out` (see the file comment): latency, then
  // the larger of the link's wire time and the ranks' transfer work (the
  // transport copies while the link drains), then the reduction that
  // follows the last byte. A pipelined step (the ring's chunks) overlaps
  // the reduction of every chunk but the last with the transfer too.
  void step(LinearCost& out, const Pairs& pairs, double m, double messages,
            double reduced, bool pipelined = false, double eagerWire = 0) const {
    if (!pairs.intra() && pairs.flows == 0) return;
    const double g = std::max(0.0, messages - 1);
    const double overlapped = pipelined && messages > 1 ? reduced * g / messages : 0;
    LinearCost latency, moveIntra, moveInter, tailIntra, tailInter;
    if (pairs.intra()) {
      latency.add(shape.intra, Term::kAlpha, cpu);
      latency.add(shape.intra, Term::kWake, wake);
      latency.fixed += spin;
    }
    if (pairs.flows > 0) {
      LinearCost cross;
      cross.add(shape.inter, Term::kAlpha, cpu);
      cross.add(shape.inter, Term::kWake, wake);
      cross.fixed += spin;
      cross.fixed += shape.linkLatency;
      latency = larger(cross, latency, c);
    }
    for (auto [path, move, tail] : {std::tuple{shape.intra, &moveIntra, &tailIntra},
                                    std::tuple{shape.inter, &moveInter, &tailInter}}) {
      move->add(path, Term::kBeta, m);
      move->add(path, Term::kMessage, g);
      move->add(path, Term::kGamma, overlapped);
      tail->add(path, Term::kGamma, reduced - overlapped);
    }
    LinearCost body = work(pairs, moveIntra, moveInter);
    if (pairs.flows > 0 && shape.linkBps > 0) {
      LinearCost wire;
      wire.fixed = buckets ? bucketWire(pairs, m) : m * pairs.flows * 8.0 / payloadBps();
      wire.fixed += eagerWire;
      body = larger(wire, body, c);
    }
    LinearCost total = latency;
    total += body;
    total += work(pairs, tailIntra, tailInter);
    if (buckets) refill(pairs, m, total.seconds(c));
    out += total;
  }

  // The wire time of a step through token buckets (tc tbf): each link
  // direction passes what its bucket holds at once and the rest at the
  // link's rate; the step lasts as long as its slowest direction.
  double bucketWire(const Pairs& pairs, double m) const {
    double bytes = 0;
    for (size_t h = 0; h < pairs.out.size(); ++h) {
      bytes = std::max(bytes, pairs.out[h] * m - buckets->up[h]);
      if (!pairs.in.empty()) bytes = std::max(bytes, pairs.in[h] * m - buckets->down[h]);
    }
    return bytes * 8.0 / payloadBps();
  }

  // The link's rate of payload bytes (JobShape::linkMtu).
  double payloadBps() const {
    if (shape.linkMtu <= 52) return shape.linkBps;
    return shape.linkBps * (shape.linkMtu - 52.0) / (shape.linkMtu + 14.0);
  }

  // After a step of `seconds`: every bucket loses what went through it and
  // gains rate x seconds, up to the burst (idle links refill).
  void refill(const Pairs& pairs, double m, double seconds) const {
    const double gain = seconds * payloadBps() / 8.0;
    for (size_t h = 0; h < buckets->up.size(); ++h) {
      const double up = h < pairs.out.size() ? pairs.out[h] * m : 0;
      const double down = h < pairs.in.size() ? pairs.in[h] * m : 0;
      buckets->up[h] = std::clamp(buckets->up[h] - up + gain, 0.0, shape.linkBurst);
      buckets->down[h] = std::clamp(buckets->down[h] - down + gain, 0.0, shape.linkBurst);
    }
  }

  // ---- the fold (partition.h) ------------------------------------------------
  struct Fold {
    int p = 1, extra = 0;
    int realRank(int nr) const { return nr < extra ? 2 * nr + 1 : nr + extra; }
    int newRank(int r) const {
      if (r < 2 * extra) return r % 2 == 0 ? -1 : r / 2;
      return r - extra;
    }
  };
  static Fold foldOf(int n) {
    Fold f;
    while (f.p * 2 <= n) f.p *= 2;
    f.extra = n - f.p;
    return f;
  }
  // Fold-in (even ranks below 2e send to the odd one above) or fold-back
  // (the odd ones send back).
  Pairs foldPairs(int n, const Fold& f, bool in) const {
    return pairsOf(n, [&](int r) {
      if (r >= 2 * f.extra) return -1;
      if (in) return r % 2 == 0 ? r + 1 : -1;
      return r % 2 == 1 ? r - 1 : -1;
    });
  }
  Pairs maskPairs(int n, const Fold& f, int mask) const {
    return pairsOf(n, [&](int r) {
      const int q = f.newRank(r);
      return q < 0 ? -1 : f.realRank(q ^ mask);
    });
  }

  // ---- the algorithms ------------------------------------------------------------
  // The folded schedule's delay from eager sends (eager_schedule.h): per
  // step (0 the fold-in, 1.. the exchanges of `masks` moving `bytes`, then
  // the fold-back) the seconds its end moves beyond its own wire time.
  // Without a fold, a shaped link or with more than kEagerReplayRanks
  // ranks: none (the schedule is then symmetric, or too long to replay).
  std::vector<double> eagerExtra(int n, const Fold& f, double b,
                                 const std::vector<int>& masks,
                                 const std::vector<double>& bytes) const {
    const int steps = static_cast<int>(masks.size()) + 2;
    if (f.extra == 0 || shape.linkBps <= 0 || n > kEagerReplayRanks ||
        shape.hosts() < 2) {
      return std::vector<double>(static_cast<size_t>(steps), 0.0);
    }
    // A copy inside a host: the transport's beta on the shared cores.
    const double intra = c[shape.intra][Term::kBeta] * cpu;
    const auto key = std::tuple{n, b, bytes, intra};
    if (auto it = eagerCache->find(key); it != eagerCache->end()) return it->second;
    EagerProgram program(static_cast<size_t>(n));
    std::vector<int> host(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      host[r] = hostOf(r);
      auto& ops = program[r];
      const bool folded = r < 2 * f.extra;
      if (folded && r % 2 == 0) {  // sends its vector, waits for the result
        ops.push_back({0, r + 1, b, -1, 0});
        ops.push_back({steps - 1, -1, 0, r + 1, b});
        continue;
      }
      if (folded) ops.push_back({0, -1, 0, r - 1, b});
      const int q = f.newRank(r);
      for (size_t j = 0; j < masks.size(); ++j) {
        const int peer = f.realRank(q ^ masks[j]);
        ops.push_back({static_cast<int>(j) + 1, peer, bytes[j], peer, bytes[j]});
      }
      if (folded) ops.push_back({steps - 1, r - 1, b, -1, 0});
    }
    auto extra = eagerStepExtra(program, steps, host, payloadBps() / 8.0, intra);
    eagerCache->emplace(key, extra);
    return extra;
  }

  LinearCost tree(int n, double b) const {
    LinearCost out;
    const Fold f = foldOf(n);
    std::vector<int> masks;
    for (int mask = 1; mask < f.p; mask <<= 1) masks.push_back(mask);
    const auto eager = eagerExtra(n, f, b, masks, std::vector<double>(masks.size(), b));
    if (f.extra > 0) step(out, foldPairs(n, f, true), b, 1, b, false, eager.front());
    for (size_t j = 0; j < masks.size(); ++j) {
      step(out, maskPairs(n, f, masks[j]), b, 1, b, false, eager[j + 1]);
    }
    if (f.extra > 0) step(out, foldPairs(n, f, false), b, 1, 0, false, eager.back());
    return out;
  }

  LinearCost rhd(int n, double b) const {
    LinearCost out;
    const Fold f = foldOf(n);
    const double count = std::ceil(b / kElementBytes);
    // Bytes of `blocks` of the p blocks (the largest ones: the critical path).
    auto blocks = [&](int nblocks) {
      return std::ceil(count / f.p) * nblocks * kElementBytes;
    };
    std::vector<int> masks;
    std::vector<double> bytes, reduced;
    int window = f.p;
    for (int mask = f.p / 2; mask >= 1; mask /= 2) {  // halving
      window /= 2;
      masks.push_back(mask);
      bytes.push_back(std::min(b, blocks(window)));
      reduced.push_back(bytes.back());
    }
    for (int mask = 1; mask < f.p; mask *= 2) {  // doubling
      masks.push_back(mask);
      bytes.push_back(std::min(b, blocks(mask)));
      reduced.push_back(0);
    }
    const auto eager = eagerExtra(n, f, b, masks, bytes);
    if (f.extra > 0) step(out, foldPairs(n, f, true), b, 1, b, false, eager.front());
    for (size_t j = 0; j < masks.size(); ++j) {
      step(out, maskPairs(n, f, masks[j]), bytes[j], 1, reduced[j], false, eager[j + 1]);
    }
    if (f.extra > 0) step(out, foldPairs(n, f, false), b, 1, 0, false, eager.back());
    return out;
  }

  LinearCost ring(int n, double b) const {
    LinearCost out;
    const double m = std::ceil(std::ceil(b / kElementBytes) / n) * kElementBytes;
    const double messages = std::max(1.0, std::ceil(m / kRingChunkBytes));
    const Pairs pairs = pairsOf(n, [n](int r) { return (r + 1) % n; });
    if (buckets) {  // every step drains and refills the buckets
      for (int s = 0; s < n - 1; ++s) step(out, pairs, m, messages, m, true);
      for (int s = 0; s < n - 1; ++s) step(out, pairs, m, messages, 0, true);
      return out;
    }
    LinearCost one, reducing;
    step(reducing, pairs, m, messages, m, true);
    step(one, pairs, m, messages, 0, true);
    for (int s = 0; s < n - 1; ++s) out += reducing;
    for (int s = 0; s < n - 1; ++s) out += one;
    return out;
  }

  // The flat algorithm among `n` ranks of this model's shape (the cross
  // group of hier: a model whose shape has one rank per host).
  LinearCost flat(Algorithm a, int n, double b) const {
    switch (a) {
      case Algorithm::kTree: return tree(n, b);
      case Algorithm::kRhd: return rhd(n, b);
      default: return ring(n, b);
    }
  }

  LinearCost hier(double b) const {
    LinearCost out;
    const int k = std::max(1, shape.ranksPerHost);
    const int hosts = shape.hosts();
    // The hosts whose local phases share one host's cores (all of them on
    // one machine), and a local step of `transfers` per host on them.
    const double sharing = shape.hostsShareCores ? hosts : 1;
    auto local = [&](double transfers) {
      Pairs p;
      p.intraRanks = k;
      p.workCpu = workCpuOf(sharing * transfers);
      return p;
    };
    // (1) reduce inside the host (the intra path only), every host at
    // once: a binomial tree (ranks r with r % 2mask == mask send to
    // r - mask), or a ring reduce-scatter (k transfers a step) and a
    // gather that local rank 0 receives, (k-1) transfers in a row.
    if (k > 1 && b <= kLocalTreeBytes) {
      for (int mask = 1; mask < k; mask <<= 1) {
        const double senders =
            (k - 1 - mask) / (2 * mask) + 1;  // r = mask, 3 mask, .. < k
        step(out, local(senders), b, 1, b);
      }
    } else if (k > 1) {
      const double m = std::ceil(std::ceil(b / kElementBytes) / k) * kElementBytes;
      const double messages = std::max(1.0, std::ceil(m / kRingChunkBytes));
      for (int s = 0; s < k - 1; ++s) step(out, local(k), m, messages, m, true);
      step(out, local(1), (k - 1) * m, k - 1, 0);  // the gather: rank 0's copies
    }
    // (2) across hosts, one rank each, with the selection's flat algorithm.
    if (hosts > 1) {
      JobShape cross = shape;
      cross.ranks = hosts;
      cross.ranksPerHost = 1;
      cross.hostOf.clear();
      cross.shmArena = false;
      const Model crossModel{cross, c, cpu, wake, spin, buckets, eagerCache};
      const Algorithm a =
          selectAllreduce(static_cast<size_t>(b), cross, c);  // never hier: k = 1
      out += crossModel.flat(a, hosts, b);
    }
    // (3) pipelined binomial broadcast inside the host: the last chunk
    // takes depth hops after the root sent b to each of its depth
    // children; on shared cores the k-1 receptions of b of every sharing
    // host, over the cores, when that is longer.
    if (k > 1) {
      const double depth = std::ceil(std::log2(static_cast<double>(k)));
      const double chunk = std::min(b, kBroadcastChunkBytes);
      const double chunks = std::max(1.0, std::ceil(b / kBroadcastChunkBytes));
      const double path = depth * b + (depth - 1) * chunk;
      const double shared =
          shape.coresPerHost > 0 ? sharing * (k - 1) * b / shape.coresPerHost : 0;
      const double bytes = std::max(path, shared);
      LinearCost bcast;
      bcast.add(shape.intra, Term::kAlpha, depth * cpu);
      bcast.add(shape.intra, Term::kWake, depth * wake);
      bcast.fixed += depth * spin;
      bcast.add(shape.intra, Term::kBeta, bytes);
      bcast.add(shape.intra, Term::kMessage,
                std::max(0.0, depth * chunks - 1) * bytes / path);
      out += bcast;
    }
    return out;
  }

  LinearCost shm(double b) const {
    LinearCost out;
    const int n = shape.ranks;
    const Path a = Path::kShmArena;
    if (b <= kShmInlineBytes) {
      out.add(a, Term::kAlpha, cpu);
      out.add(a, Term::kWake, wake);
      out.add(a, Term::kGamma, n * b * cpu);
      return out;
    }
    const double chunk = std::max(
        kElementBytes, std::floor(static_cast<double>(shape.shmChunkBytes) / 64) * 64);
    for (double done = 0; done < b; done += chunk) {
      const double C = std::min(chunk, b - done);
      if (C <= kShmReduceAllBytes || n == 1) {
        out.add(a, Term::kAlpha, cpu);
        out.add(a, Term::kWake, wake);
        out.add(a, Term::kBeta, C * cpu);
        out.add(a, Term::kGamma, (n - 1) * C * cpu);
      } else {
        out.add(a, Term::kAlpha, 2 * cpu);
        out.add(a, Term::kWake, 2 * wake);
        out.add(a, Term::kBeta, (2.0 * (n - 1) / n + 1.0 / n) * C * cpu);
        out.add(a, Term::kGamma, (n - 1.0) / n * C * cpu);
      }
    }
    return out;
  }

  // Communicator::allreduce's descriptor exchange (descriptor_check.cc).
  LinearCost agreement() const {
    LinearCost out;
    const int n = shape.ranks;
    if (n == 1) return out;
    if (shape.shmArena) {
      out.add(Path::kShmArena, Term::kAlpha, cpu);
      out.add(Path::kShmArena, Term::kWake, wake);
      return out;
    }
    const Pairs pairs = pairsOf(n, [n](int r) { return (r + 1) % n; });
    for (int s = 0; s < n - 1; ++s) step(out, pairs, kDescriptorBytes, 1, 0);
    return out;
  }

  Path mainPath(Algorithm a) const {
    if (a == Algorithm::kShm) return Path::kShmArena;
    return shape.hosts() > 1 ? shape.inter : shape.intra;
  }
};

// The ranks that share one host's cores (all of them when the hosts
// share one machine).
int sharingRanks(const JobShape& s) {
  return s.hostsShareCores ? s.ranks : std::min(s.ranks, s.ranksPerHost);
}

double oversubscription(const JobShape& s) {
  if (s.coresPerHost <= 0) return 1;
  return std::max(1.0, static_cast<double>(sharingRanks(s)) / s.coresPerHost);
}

// What a step waits for a core when the ranks sharing the cores outnumber
// them. A rank with a host-mate waits on the shared-memory (or router)
// transport, which cannot block in the kernel: it polls for KOLO_SPIN_US,
// then calls sched_yield for 2 ms before it sleeps (transport.cc), so the
// waiting ranks stay runnable and a rank whose data arrived waits its turn
// among them: the fitted `wake` per step. A rank alone on its host waits
// in poll() on its sockets after its spin and is woken when data arrives;
// the woken rank then waits for a core held by a rank still polling, at
// most one spin: spinSeconds per step.
bool oversubscribed(const JobShape& s) {
  return s.coresPerHost > 0 && sharingRanks(s) > s.coresPerHost;
}
bool yielding(const JobShape& s) {
  return s.ranksPerHost > 1 && s.intra == Path::kShm;
}

}  // namespace

std::string_view toString(Algorithm a) {
  return kNames[static_cast<int>(a)];
}

std::optional<Algorithm> algorithmFromName(std::string_view name) {
  for (int i = 0; i < kAlgorithms; ++i) {
    if (kNames[i] == name) return static_cast<Algorithm>(i);
  }
  return std::nullopt;
}

int JobShape::hosts() const {
  if (!hostOf.empty()) return *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  const int k = std::max(1, ranksPerHost);
  return (std::max(1, ranks) + k - 1) / k;
}

double LinearCost::seconds(const Constants& c) const {
  double s = fixed;
  for (int p = 0; p < kPaths; ++p) {
    for (int t = 0; t < kTerms; ++t) s += coef[p][t] * c.paths[p].value[t];
  }
  return s;
}

LinearCost& LinearCost::operator+=(const LinearCost& o) {
  fixed += o.fixed;
  for (int p = 0; p < kPaths; ++p) {
    for (int t = 0; t < kTerms; ++t) coef[p][t] += o.coef[p][t];
  }
  return *this;
}

bool usable(Algorithm a, const JobShape& shape) {
  switch (a) {
    case Algorithm::kShm: return shape.shmArena && shape.hosts() == 1;
    case Algorithm::kHier: return shape.hosts() > 1 && shape.ranksPerHost > 1;
    default: return true;
  }
}

LinearCost allreduceCost(Algorithm a, size_t bytes, const JobShape& shape,
                         const Constants& c, const CostOptions& options) {
  const bool over = oversubscribed(shape);
  std::map<Model::EagerKey, std::vector<double>> eagerCache;
  Model m{shape,
          c,
          oversubscription(shape),
          over && yielding(shape) ? 1.0 : 0.0,
          over && !yielding(shape) ? shape.spinSeconds : 0.0,
          nullptr,
          &eagerCache};
  LinearCost out;
  const int n = std::max(1, shape.ranks);
  if (n == 1 || bytes == 0) return out;
  const double b = static_cast<double>(bytes);
  auto call = [&] {
    LinearCost one;
    if (options.agreement && a != Algorithm::kShm) one += m.agreement();
    switch (a) {
      case Algorithm::kRing: one += m.ring(n, b); break;
      case Algorithm::kRhd: one += m.rhd(n, b); break;
      case Algorithm::kTree: one += m.tree(n, b); break;
      case Algorithm::kHier: one += m.hier(b); break;
      case Algorithm::kShm: one += m.shm(b); break;
    }
    one.add(m.mainPath(a), Term::kCall, 1);
    return one;
  };
  // Token buckets: calls follow each other (kolo-bench's loop, a training
  // step's buffers), so a call starts with the buckets the previous one
  // left: the steady state, found by running calls from full buckets until
  // the buckets at the start of a call repeat (a call that moves more than
  // the rate refills drains them to that level).
  Model::Buckets buckets;
  if (shape.linkBurst > 0 && shape.linkBps > 0 && shape.hosts() > 1) {
    const auto hosts = static_cast<size_t>(shape.hosts());
    buckets.up.assign(hosts, shape.linkBurst);
    buckets.down.assign(hosts, shape.linkBurst);
    m.buckets = &buckets;
    for (int i = 0; i < 200; ++i) {
      const Model::Buckets before = buckets;
      call();
      double moved = 0;
      for (size_t h = 0; h < hosts; ++h) {
        moved = std::max({moved, std::abs(buckets.up[h] - before.up[h]),
                          std::abs(buckets.down[h] - before.down[h])});
      }
      if (moved < 1) break;
    }
  }
  out = call();
  return out;
}

double allreduceSeconds(Algorithm a, size_t bytes, const JobShape& shape,
                        const Constants& c, const CostOptions& options) {
  return allreduceCost(a, bytes, shape, c, options).seconds(c);
}

std::vector<Algorithm> selectionCandidates(const JobShape& shape) {
  if (usable(Algorithm::kShm, shape)) return {Algorithm::kShm};
  std::vector<Algorithm> out = {Algorithm::kTree, Algorithm::kRhd, Algorithm::kRing};
  if (usable(Algorithm::kHier, shape)) out.push_back(Algorithm::kHier);
  return out;
}

int sizeClass(size_t bytes) {
  const int w = std::bit_width(bytes);  // 0..64
  if (w < 3) return 4 * w + static_cast<int>(bytes - (w > 0 ? size_t{1} << (w - 1) : 0));
  return 4 * w + static_cast<int>((bytes >> (w - 3)) & 3);
}

size_t sizeClassBytes(int cls) {
  const int w = cls / 4, sub = cls % 4;
  if (w < 3) return (w > 0 ? size_t{1} << (w - 1) : 0) + static_cast<size_t>(sub);
  const size_t lo = static_cast<size_t>(4 + sub) << (w - 3);
  return lo + (size_t{1} << (w - 3)) / 2;
}

Algorithm selectAllreduce(size_t bytes, const JobShape& shape, const Constants& c) {
  const size_t at = sizeClassBytes(sizeClass(bytes));
  Algorithm best = Algorithm::kRing;
  double bestSeconds = 0;
  bool first = true;
  for (Algorithm a : selectionCandidates(shape)) {
    const double s = allreduceSeconds(a, at, shape, c);
    if (first || s < bestSeconds) {
      best = a;
      bestSeconds = s;
      first = false;
    }
  }
  return best;
}

double selectedAllreduceSeconds(size_t bytes, const JobShape& shape, const Constants& c,
                                const CostOptions& options) {
  return allreduceSeconds(selectAllreduce(bytes, shape, c), bytes, shape, c, options);
}

}  // namespace kolo::predict

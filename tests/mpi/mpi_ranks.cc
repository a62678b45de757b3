// kolo-mpi-ranks: one rank of an mpirun job that exercises the MPI engine;
// tests/mpi_transport_test.cc starts it under real mpirun and reads what
// it prints. Every mode prints "<mode> ok" on success and exits 0; a wrong
// value or an unexpected error prints "FAIL ..." and exits 1.
//
//   mpirun -np 3 build/bin/kolo-mpi-ranks collectives
//
// Modes
//   collectives    Communicator::fromEnvironment (kolo initializes MPI and
//                  finalizes it at exit), then allreduce, broadcast,
//                  allgather, reducescatter, alltoall and barrier, small and
//                  > 1 MiB, every element checked; then a second
//                  communicator on the same MPI. Prints the layout and the
//                  allreduce algorithm chosen for 4 MiB.
//   transport      MpiTransport directly with 1000-byte pieces (so that
//                  multi-piece messages, the path of messages over INT_MAX
//                  bytes, are cheap): ring exchange of many sizes, same-tag
//                  order, tags above MPI_TAG_UB, self send, any-source,
//                  size mismatch longer and shorter (one piece and several),
//                  bad peers, and an abort notice naming the rank lost.
//   own-init       calls MPI_Init_thread(MULTIPLE) itself before kolo; after
//                  the communicator is gone MPI must still work, and the
//                  program finalizes it (kolo must not).
//   own-init-single  calls plain MPI_Init (MPI_THREAD_SINGLE): kolo must
//                  refuse with an error naming the thread level.
//   no-finalize    the C API without kolo_finalize: kolo finalizes MPI at
//                  exit before the communicator is destroyed; no hang.
//   stall          the last rank goes silent; the others print the error
//                  they get within KOLO_TIMEOUT and exit 3.
//   teams          Communicator::split into teams of ranks {0,2,..} and
//                  {1,3,..}; each team allreduces on its own thread while
//                  the world communicator allreduces on the main thread.
//   p2p, p2p-lost  point-to-point messages (mpi_ranks_p2p.cc).
#include <kolo/communicator.h>
#include <kolo/error.h>
#include <kolo/kolo.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "mpi_ranks.h"
#include "transport/mpi/mpi_transport.h"

namespace kolo_mpi_ranks {

int gRank = -1;
int gFailures = 0;

void fail(const std::string& what) {
  std::printf("FAIL rank %d: %s\n", gRank, what.c_str());
  std::fflush(stdout);
  ++gFailures;
}

}  // namespace kolo_mpi_ranks

namespace {

using namespace kolo_mpi_ranks;

using kolo::Communicator;
using kolo::DataType;
using kolo::ErrorCode;
using kolo::transport::MpiTransport;
using kolo::transport::RequestPtr;

// ---------------------------------------------------------------- collectives

void runCollectives(Communicator& c) {
  const int n = c.size();
  const int me = c.rank();
  const std::vector<size_t> sizes = {0, 1, 7, 1000, 300000, 3000000};  // up to 12 MB
  for (size_t count : sizes) {
    std::vector<float> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = float(me + 1 + i % 7);
    kolo::AllreduceOptions o;
    o.send = in.data();
    o.recv = out.data();
    o.count = count;
    c.allreduce(o);
    sameAs<float>(
        out, [&](size_t i) { return float(n * (n + 1) / 2 + n * (i % 7)); },
        "allreduce float sum of " + std::to_string(count));
    // In place, int32 max.
    std::vector<int32_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = int32_t((i + me) % (n + 3));
    o.send = v.data();
    o.recv = v.data();
    o.dtype = DataType::kInt32;
    o.op = kolo::ReduceOp::kMax;
    c.allreduce(o);
    sameAs<int32_t>(
        v,
        [&](size_t i) {
          int32_t m = 0;
          for (int r = 0; r < n; ++r) m = std::max(m, int32_t((i + r) % (n + 3)));
          return m;
        },
        "allreduce int32 max in place of " + std::to_string(count));
  }
  for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> b(count, -7);
      if (me == root)
        for (size_t i = 0; i < count; ++i) b[i] = int32_t(root * 100000 + i);
      kolo::BroadcastOptions o;
      o.buffer = b.data();
      o.count = count;
      o.dtype = DataType::kInt32;
      o.root = root;
      c.broadcast(o);
      sameAs<int32_t>(
          b, [&](size_t i) { return int32_t(root * 100000 + i); },
          "broadcast from " + std::to_string(root) + " of " + std::to_string(count));
    }
    std::vector<int32_t> mine(count), all(count * n, -1);
    for (size_t i = 0; i < count; ++i) mine[i] = int32_t(me * 1000000 + i);
    kolo::AllgatherOptions g;
    g.send = mine.data();
    g.recv = all.data();
    g.count = count;
    g.dtype = DataType::kInt32;
    c.allgather(g);
    sameAs<int32_t>(
        all, [&](size_t i) { return int32_t((i / count) * 1000000 + i % count); },
        "allgather of " + std::to_string(count));

    std::vector<int32_t> rsIn(count * n), rsOut(count, -1);
    for (size_t i = 0; i < rsIn.size(); ++i) rsIn[i] = int32_t(i % 1000 + me);
    kolo::ReduceScatterOptions rs;
    rs.send = rsIn.data();
    rs.recv = rsOut.data();
    rs.recvCount = count;
    rs.dtype = DataType::kInt32;
    c.reduceScatter(rs);
    sameAs<int32_t>(
        rsOut,
        [&](size_t i) {
          return int32_t(n * ((me * count + i) % 1000) + n * (n - 1) / 2);
        },
        "reducescatter of " + std::to_string(count));

    std::vector<int32_t> aIn(count * n), aOut(count * n, -1);
    for (size_t i = 0; i < aIn.size(); ++i)
      aIn[i] = int32_t(me * 1000 + (i / count) * 10 + (i % count) % 3);
    kolo::AlltoallOptions a;
    a.send = aIn.data();
    a.recv = aOut.data();
    a.countPerRank = count;
    a.dtype = DataType::kInt32;
    c.alltoall(a);
    sameAs<int32_t>(
        aOut,
        [&](size_t i) { return int32_t((i / count) * 1000 + me * 10 + (i % count) % 3); },
        "alltoall of " + std::to_string(count));
  }
  c.barrier();
}

int modeCollectives() {
  auto c = Communicator::fromEnvironment();
  gRank = c->rank();
  const kolo::Layout l = c->layout();  // a copy: c is reset below
  std::printf("layout rank %d size %d local %d/%d cross %d/%d host %s algo4M %s\n",
              l.rank, l.size, l.localRank, l.localSize, l.crossRank, l.crossSize,
              l.hostId.c_str(), c->allreduceAlgorithm(4 << 20).c_str());
  runCollectives(*c);
  c.reset();
  int initialized = 0;
  int finalized = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  EXPECT(initialized == 1 && finalized == 0, "kolo keeps MPI initialized until exit");
  // A second communicator on the same MPI (kolo_init after kolo_finalize).
  c = Communicator::fromEnvironment();
  std::vector<double> x(100000, c->rank() + 1.0);
  kolo::AllreduceOptions o;
  o.send = o.recv = x.data();
  o.count = x.size();
  o.dtype = DataType::kFloat64;
  c->allreduce(o);
  sameAs<double>(
      x, [&](size_t) { return l.size * (l.size + 1) / 2.0; },
      "allreduce on a second communicator");
  c.reset();
  if (gFailures == 0) std::printf("collectives ok\n");
  return gFailures == 0 ? 0 : 1;
}

// ------------------------------------------------------------------ transport

std::vector<uint8_t> pattern(size_t bytes, int from, int salt) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = uint8_t(i * 7 + from * 31 + salt);
  return v;
}

int modeTransport() {
  int rank = 0;
  int size = 1;
  {
    // MPI is initialized by MpiTransport::create (through the runtime); the
    // world's shape comes from the launcher's variables here.
    const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
    const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (r == nullptr || s == nullptr) {
      std::printf("FAIL: run me under mpirun\n");
      return 1;
    }
    rank = std::atoi(r);
    size = std::atoi(s);
  }
  gRank = rank;
  MpiTransport::Options o;
  o.rank = rank;
  o.size = size;
  o.timeout = std::chrono::milliseconds(20000);
  o.maxPieceBytes = 1000;
  auto t = MpiTransport::create(o);
  EXPECT(t->tagBits() >= 24, "tag bits " + std::to_string(t->tagBits()));
  const uint64_t wrap = uint64_t{1} << t->tagBits();
  EXPECT(t->mpiTag(5) == 5 && t->mpiTag(wrap + 5) == 5, "tags wrap at 2^bits");
  EXPECT(t->mpiTag((uint64_t{1} << 16) * 3 + 9) != t->mpiTag((uint64_t{1} << 16) * 4 + 9),
         "consecutive operations' tags differ");

  const int next = (rank + 1) % size;
  const int prev = (rank + size - 1) % size;
  // Ring exchange: many sizes (one piece, a piece boundary, several pieces,
  // an exact multiple), all in flight at once, high tags (a far-away
  // operation sequence).
  const std::vector<size_t> sizes = {0, 1, 999, 1000, 1001, 2000, 2500, 10000, 123457};
  {
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<RequestPtr> reqs;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const uint64_t tag = (uint64_t{1} << 40) * 3 + k * 65536 + 11;
      out.push_back(pattern(sizes[k], rank, int(k)));
      in.emplace_back(sizes[k], 0);
      reqs.push_back(t->irecv(prev, tag, in.back().data(), sizes[k]));
      reqs.push_back(t->isend(next, tag, out.back().data(), sizes[k]));
    }
    t->waitAll(reqs);
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (in[k] != pattern(sizes[k], prev, int(k))) {
        fail("ring exchange of " + std::to_string(sizes[k]) + " bytes: wrong data");
      }
    }
  }
  // Same tag, several messages: received in the order sent, pieces intact.
  {
    const std::vector<size_t> order = {2500, 1000, 0, 3001, 7};
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<RequestPtr> reqs;
    for (size_t k = 0; k < order.size(); ++k) {
      out.push_back(pattern(order[k], rank, 100 + int(k)));
      in.emplace_back(order[k], 0);
    }
    for (size_t k = 0; k < order.size(); ++k)
      reqs.push_back(t->isend(next, 42, out[k].data(), order[k]));
    for (size_t k = 0; k < order.size(); ++k)
      reqs.push_back(t->irecv(prev, 42, in[k].data(), order[k]));
    t->waitAll(reqs);
    for (size_t k = 0; k < order.size(); ++k) {
      if (in[k] != pattern(order[k], prev, 100 + int(k))) {
        fail("same-tag message " + std::to_string(k) + ": wrong data or order");
      }
    }
  }
  // To oneself.
  {
    auto out = pattern(4321, rank, 9);
    std::vector<uint8_t> in(4321);
    auto r = t->irecv(rank, 7, in.data(), in.size());
    t->send(rank, 7, out.data(), out.size());
    t->wait(r);
    EXPECT(in == out, "self send");
  }
  // Any source: rank 0 hears from every other rank once.
  if (size > 1) {
    if (rank == 0) {
      std::vector<bool> seen(size, false);
      for (int k = 1; k < size; ++k) {
        int32_t v = -1;
        auto r = t->irecv(kolo::transport::kAnySource, 500, &v, sizeof(v));
        t->wait(r);
        EXPECT(r->peer >= 1 && r->peer < size && v == r->peer * 10 && !seen[r->peer],
               "any-source receive from " + std::to_string(r->peer));
        if (r->peer >= 0 && r->peer < size) seen[r->peer] = true;
      }
      expectError(
          ErrorCode::kInvalidArgument, {"any rank"},
          [&] {
            std::vector<uint8_t> big(5000);
            t->irecv(kolo::transport::kAnySource, 501, big.data(), big.size());
          },
          "any-source of several pieces");
    } else {
      int32_t v = rank * 10;
      t->send(0, 500, &v, sizeof(v));
    }
  }
  expectError(
      ErrorCode::kInvalidArgument, {"out of range"},
      [&] { t->isend(size, 1, nullptr, 0); }, "send to rank size");
  // Size mismatches, from rank 0 to rank 1: (sent, posted) pairs.
  if (size > 1 && rank <= 1) {
    struct Case {
      size_t sent, posted;
      std::string says;
    };
    const std::vector<Case> cases = {
        {100, 50, "sent more than 50 bytes"},       // one piece, longer
        {50, 100, "sent 50 bytes"},                 // one piece, shorter
        {1500, 1200, "sent more than 1200 bytes"},  // last pieces differ
        {1500, 2500, "sent 1500 bytes"},            // fewer pieces sent
        {3000, 2000, "sent more than 2000 bytes"},  // more pieces sent
        {2000, 3000, "sent 2000 bytes"},            // exact multiple, fewer
    };
    for (size_t k = 0; k < cases.size(); ++k) {
      const uint64_t tag = 7000 + k;
      if (rank == 0) {
        auto out = pattern(cases[k].sent, 0, 1);
        auto r = t->isend(1, tag, out.data(), out.size());
        // The receiver's answer says it got there (a send of an unmatched
        // piece need not complete).
        uint8_t ack = 0;
        t->recv(1, tag + 100, &ack, 1);
        if (cases[k].sent <= cases[k].posted) t->wait(r);
      } else {
        std::vector<uint8_t> in(cases[k].posted);
        auto r = t->irecv(0, tag, in.data(), in.size());
        expectError(
            ErrorCode::kMismatch,
            {"rank 0 " + cases[k].says, "tag " + std::to_string(tag),
             "posted a receive of " + std::to_string(cases[k].posted)},
            [&] { t->wait(r); },
            "mismatch " + std::to_string(cases[k].sent) + " vs " +
                std::to_string(cases[k].posted));
        uint8_t ack = 1;
        t->send(0, tag + 100, &ack, 1);
      }
    }
    // The transport still works after mismatches.
    std::vector<uint8_t> v(3333);
    if (rank == 0) {
      v = pattern(3333, 0, 5);
      t->send(1, 9000, v.data(), v.size());
    } else {
      t->recv(0, 9000, v.data(), v.size());
      EXPECT(v == pattern(3333, 0, 5), "exchange after mismatches");
    }
  }
  // Everyone done with `t` before the abort test.
  {
    std::vector<uint8_t> a(1), b(1);
    t->sendRecv(next, a.data(), 1, prev, b.data(), 1, 9999);
    t->sendRecv(prev, a.data(), 1, next, b.data(), 1, 9998);
  }
  // Abort: the last rank fails and tells the others, which name it.
  auto t2 = MpiTransport::create(o);
  if (size > 1) {
    if (rank == size - 1) {
      t2->abort(kolo::Error(ErrorCode::kPeerLost,
                            "test: rank " + std::to_string(rank) + " lost its disk",
                            rank));
    } else {
      uint8_t x = 0;
      auto r = t2->irecv(size - 1, 1, &x, 1);
      expectError(
          ErrorCode::kPeerLost,
          {"lost its disk", "reported by rank " + std::to_string(size - 1)},
          [&] { t2->wait(r); }, "abort notice");
      expectError(
          ErrorCode::kPeerLost, {"lost its disk"}, [&] { t2->isend(size - 1, 2, &x, 1); },
          "broken after an abort");
    }
  }
  t2.reset();
  t.reset();
  MPI_Barrier(MPI_COMM_WORLD);
  // The abort above marked the job broken, so kolo would leave MPI
  // unfinalized at exit; every rank got here, so finalize here.
  MPI_Finalize();
  if (gFailures == 0) std::printf("transport ok\n");
  return gFailures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------- stall

// The last rank stops answering (sleeps) before an allreduce; the others
// must fail within KOLO_TIMEOUT with an error naming a rank, print it and
// exit 3 a few seconds later (mpirun then ends the sleeper).
int modeStall() {
  auto c = Communicator::fromEnvironment();
  gRank = c->rank();
  std::vector<float> x(1 << 20, 1.0f);
  kolo::AllreduceOptions o;
  o.send = o.recv = x.data();
  o.count = x.size();
  c->allreduce(o);  // everyone is up
  if (c->rank() == c->size() - 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    c->allreduce(o);
    fail("allreduce with a silent rank succeeded");
    return 1;
  } catch (const kolo::Error& e) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("stall error after %.1f s: %s: %s\n", s,
                std::string(kolo::toString(e.code())).c_str(), e.what());
    std::fflush(stdout);
    // Every waiting rank times out at about the same moment. mpirun kills
    // the job when the first rank exits non-zero, so exiting at once would
    // let the first rank's line stand alone (and that rank may be one that
    // waited on a healthy peer): linger so that every rank's line is seen.
    std::this_thread::sleep_for(std::chrono::seconds(4));
    return 3;
  }
}

// ---------------------------------------------------------------- no finalize

// Through the C API, without kolo_finalize: at exit the communicator says
// goodbye (its closing step, exit_goodbye.h) before kolo finalizes MPI (its
// atexit handler, registered earlier, runs later); nothing hangs or crashes.
int modeNoFinalize() {
  if (kolo_init() != KOLO_OK) {
    fail(std::string("kolo_init: ") + kolo_last_error());
    return 1;
  }
  gRank = kolo_rank();
  float v = 1;
  if (kolo_allreduce(&v, &v, 1, KOLO_FLOAT32, KOLO_SUM) != KOLO_OK ||
      v != float(kolo_size())) {
    fail(std::string("kolo_allreduce: ") + kolo_last_error());
    return 1;
  }
  std::printf("no-finalize ok\n");
  return 0;
}

// ------------------------------------------------------------------- own init

int modeOwnInit(bool single) {
  int provided = 0;
  if (single) {
    MPI_Init(nullptr, nullptr);
    MPI_Query_thread(&provided);
  } else {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  if (single) {
    if (provided >= MPI_THREAD_SERIALIZED) {
      std::printf("own-init-single ok (skipped: MPI_Init gave level %d)\n", provided);
    } else {
      expectError(
          ErrorCode::kInvalidArgument, {"MPI_THREAD_SERIALIZED"},
          [&] { Communicator::fromEnvironment(); }, "kolo under MPI_THREAD_SINGLE");
    }
  } else {
    auto c = Communicator::fromEnvironment();
    runCollectives(*c);
    c.reset();
  }
  // MPI is still the program's: usable now, finalized by the program.
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT(finalized == 0, "kolo finalized the program's MPI");
  int one = 1;
  int sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT(sum == size, "MPI_Allreduce after kolo");
  MPI_Finalize();
  if (gFailures == 0) std::printf("%s ok\n", single ? "own-init-single" : "own-init");
  return gFailures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------- teams

// Sums of (rank + 1 + i % 5) over `members`, checked element by element.
void teamRounds(Communicator& c, const std::vector<int>& members, int me,
                const std::string& what) {
  for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = float(me + 1 + i % 5);
    kolo::AllreduceOptions o;
    o.send = o.recv = x.data();
    o.count = count;
    c.allreduce(o);
    float base = 0;
    for (int m : members) base += float(m + 1);
    sameAs<float>(
        x, [&](size_t i) { return base + float(members.size() * (i % 5)); },
        what + " allreduce of " + std::to_string(count));
  }
}

int modeTeams() {
  auto world = Communicator::fromEnvironment();
  gRank = world->rank();
  const int n = world->size();
  std::vector<int> members, all;
  for (int r = gRank % 2; r < n; r += 2) members.push_back(r);
  for (int r = 0; r < n; ++r) all.push_back(r);
  auto team = world->split(members, gRank % 2 == 0 ? "team/even" : "team/odd");
  EXPECT(team->size() == int(members.size()), "team size");
  EXPECT(team->rank() == gRank / 2, "team rank");
  std::thread t([&] {
    try {
      for (int round = 0; round < 3; ++round) teamRounds(*team, members, gRank, "team");
    } catch (const std::exception& e) {
      fail(std::string("team: ") + e.what());
    }
  });
  for (int round = 0; round < 3; ++round) teamRounds(*world, all, gRank, "world");
  t.join();
  team.reset();
  world.reset();
  if (gFailures == 0) std::printf("teams ok\n");
  return gFailures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "collectives") return modeCollectives();
    if (mode == "transport") return modeTransport();
    if (mode == "own-init") return modeOwnInit(false);
    if (mode == "own-init-single") return modeOwnInit(true);
    if (mode == "no-finalize") return modeNoFinalize();
    if (mode == "stall") return modeStall();
    if (mode == "teams") return modeTeams();
    if (mode == "p2p") return modePointToPoint();
    if (mode == "p2p-lost") return modePointToPointLost(argc > 2 ? argv[2] : "");
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", gRank, e.what());
    return 1;
  }
  std::fprintf(
      stderr,
      "usage: kolo-mpi-ranks "
      "collectives|transport|own-init|own-init-single|no-finalize|stall|teams|p2p|\n"
      "p2p-lost exit|silent\n");
  return 2;
}

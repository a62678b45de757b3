// kolo-mpi-ranks' point-to-point modes; tests/mpi_transport_test.cc runs
// them under mpirun over the mpi transport alone and across pretend hosts.
//
//   p2p            Communicator::send/recv/isend/irecv: a ring both ways
//                  with receives posted before the sends (tags out of
//                  order), sends before receives (same tag: received in
//                  order), blocking sends both ways before any receive, a
//                  send that completes while its receiver is in a
//                  collective (over mpi or tcp), and size and dtype mismatches naming
//                  both ranks; then the C API in a process set of the first and the last
//                  rank (set ranks, tags apart from the world's, a dtype mismatch).
//                  Messages of 24 MB are far above MPI's eager limit, so MPI moves them
//                  only once matched.
//   p2p-lost exit|silent  the last rank exits (exit: a crash) or sleeps
//                  (silent) while rank 0 receives from it; rank 0 prints
//                  "p2p-lost error after S s: CODE: MESSAGE" and exits 3.
#include <kolo/communicator.h>
#include <kolo/error.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "mpi_ranks.h"

namespace kolo_mpi_ranks {
namespace {

using kolo::Communicator;
using kolo::DataType;
using kolo::ErrorCode;

constexpr size_t kBig = 3000000;  // float64 elements: 24 MB

kolo::SendOptions sendOf(const std::vector<double>& v, int peer, int tag) {
  kolo::SendOptions s;
  s.buffer = v.data();
  s.count = v.size();
  s.dtype = DataType::kFloat64;
  s.peer = peer;
  s.tag = tag;
  return s;
}

kolo::RecvOptions recvInto(std::vector<double>& v, int peer, int tag) {
  kolo::RecvOptions r;
  r.buffer = v.data();
  r.count = v.size();
  r.dtype = DataType::kFloat64;
  r.peer = peer;
  r.tag = tag;
  return r;
}

// Element i of message `k` from rank `from`.
double value(int from, int k, size_t i) {
  return from * 1e7 + k * 1e6 + double(i % 100000);
}

std::vector<double> message(int from, int k, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = value(from, k, i);
  return v;
}

void expectMessage(const std::vector<double>& got, int from, int k,
                   const std::string& what) {
  sameAs<double>(
      got, [&](size_t i) { return value(from, k, i); }, what);
}

// Receives posted first (tag 9 before tag 4, whose message comes first),
// then a non-blocking and a blocking send.
void ringPostedFirst(Communicator& c, int left, int right) {
  for (size_t count : {size_t{0}, size_t{5}, kBig}) {
    const std::string of = " of " + std::to_string(count);
    auto out4 = message(c.rank(), 4, count), out9 = message(c.rank(), 9, count);
    std::vector<double> in4(count, -1), in9(count, -1);
    auto r9 = c.irecv(recvInto(in9, left, 9));
    auto r4 = c.irecv(recvInto(in4, left, 4));
    auto s4 = c.isend(sendOf(out4, right, 4));
    c.send(sendOf(out9, right, 9));
    s4->wait();
    r4->wait();
    r9->wait();
    expectMessage(in4, left, 4, "ring tag 4" + of);
    expectMessage(in9, left, 9, "ring tag 9" + of);
  }
}

// Three messages with one tag, all sent before any receive is posted: they
// wait in the receiver's transport and come out in the order sent.
void sameTagInOrder(Communicator& c, int left, int right) {
  const std::vector<size_t> sizes = {1000, kBig, 7};
  std::vector<std::vector<double>> out;
  std::vector<std::shared_ptr<kolo::Work>> sends;
  for (size_t k = 0; k < sizes.size(); ++k)
    out.push_back(message(c.rank(), 20 + k, sizes[k]));
  for (auto& o : out) sends.push_back(c.isend(sendOf(o, right, 21)));
  c.barrier();
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<double> in(sizes[k], -1);
    c.recv(recvInto(in, left, 21));
    expectMessage(in, left, 20 + k, "same-tag message " + std::to_string(k));
  }
  for (auto& s : sends) s->wait();
}

// Every rank blocks in a send before anyone posts a receive. Then rank 0
// blocks in a send to the last rank while that one is in a barrier that
// needs rank 0: the barrier's waiting moves the message. Only where the
// two talk over mpi or tcp: over shm a host's collectives run on shared
// memory of their own, not on the transport that carries the message.
void sendsBeforeReceives(Communicator& c, int left, int right) {
  auto out = message(c.rank(), 22, kBig);
  std::vector<double> in(kBig, -1);
  c.send(sendOf(out, right, 22));
  c.recv(recvInto(in, left, 22));
  expectMessage(in, left, 22, "blocking sends both ways");

  const char* t = std::getenv("KOLO_TRANSPORT");
  const std::string transport = t != nullptr ? t : "auto";
  if (transport != "mpi" && transport != "tcp" && c.layout().crossSize < 2) return;
  const int last = c.size() - 1;
  out = message(c.rank(), 23, kBig);
  if (c.rank() == 0) c.send(sendOf(out, last, 23));
  c.barrier();
  if (c.rank() == last) {
    c.recv(recvInto(in, 0, 23));
    expectMessage(in, 0, 23, "a send during the receiver's barrier");
  }
}

// A receive of the wrong size, then of the wrong dtype (same bytes): the
// error names both ranks, both counts and dtypes; the link still works.
void mismatches(Communicator& c, int left, int right) {
  const std::string me = std::to_string(c.rank()), from = std::to_string(left);
  std::vector<double> three(3, 1.0), two(2, -1);
  auto sent = c.isend(sendOf(three, right, 0));
  expectError(
      ErrorCode::kMismatch,
      {"rank " + me + " posted a receive of 2 float64 from rank " + from +
       " (tag 0), but rank " + from + " sent 3 float64"},
      [&] { c.recv(recvInto(two, left, 0)); }, "size mismatch");
  sent->wait();

  std::vector<float> f(4, 2.5f);
  std::vector<int32_t> i(4, -1);
  kolo::SendOptions s;
  s.buffer = f.data();
  s.count = 4;
  s.dtype = DataType::kFloat32;
  s.peer = right;
  s.tag = 24;
  sent = c.isend(s);
  kolo::RecvOptions r;
  r.buffer = i.data();
  r.count = 4;
  r.dtype = DataType::kInt32;
  r.peer = left;
  r.tag = 24;
  expectError(
      ErrorCode::kMismatch,
      {"rank " + me + " posted a receive of 4 int32 from rank " + from +
       " (tag 24), but rank " + from + " sent 4 float32"},
      [&] { c.recv(r); }, "dtype mismatch");
  EXPECT(i[0] == -1, "a mismatched receive leaves its buffer untouched");
  sent->wait();

  auto out = message(c.rank(), 25, 100);
  std::vector<double> in(100, -1);
  auto rr = c.irecv(recvInto(in, left, 25));
  c.send(sendOf(out, right, 25));
  rr->wait();
  expectMessage(in, left, 25, "a message after mismatches");
}

// The C API in the process set {0, last}: a set message and a world
// message with the same tag do not mix; set ranks address the peer; a
// dtype mismatch in the set names both (job) ranks.
void processSet() {
  if (kolo_init() != KOLO_OK) return fail(std::string("kolo_init: ") + kolo_last_error());
  const int n = kolo_size(), rank = kolo_rank(), last = n - 1;
  if (rank == 0 || rank == last) {
    const int members[2] = {0, last};
    int set = -1;
    if (kolo_process_set_create(members, 2, &set) != KOLO_OK)
      return fail(std::string("process set: ") + kolo_last_error());
    std::vector<int64_t> world = {1, 2, 3}, big(1 << 20);
    for (size_t i = 0; i < big.size(); ++i) big[i] = int64_t(i * 3 + 1);
    kolo_handle h = 0;
    if (rank == 0) {
      EXPECT(kolo_send(world.data(), 3, KOLO_INT64, last, 6) == KOLO_OK,
             kolo_last_error());
      EXPECT(kolo_isend(big.data(), big.size(), KOLO_INT64, 1, 6, set, &h) == KOLO_OK,
             kolo_last_error());
      EXPECT(kolo_wait_release(h) == KOLO_OK, kolo_last_error());
      EXPECT(kolo_isend(world.data(), 3, KOLO_INT64, 1, 7, set, &h) == KOLO_OK,
             kolo_last_error());
      EXPECT(kolo_wait_release(h) == KOLO_OK, kolo_last_error());
    } else {
      std::vector<int64_t> fromSet(big.size(), -1), fromWorld(3, -1);
      EXPECT(kolo_irecv(fromSet.data(), fromSet.size(), KOLO_INT64, 0, 6, set, &h) ==
                 KOLO_OK,
             kolo_last_error());
      EXPECT(kolo_recv(fromWorld.data(), 3, KOLO_INT64, 0, 6) == KOLO_OK,
             kolo_last_error());
      EXPECT(kolo_wait_release(h) == KOLO_OK, kolo_last_error());
      EXPECT(fromWorld == world, "the world's message on tag 6");
      EXPECT(fromSet == big, "the set's message on tag 6");
      double d[3];
      EXPECT(kolo_irecv(d, 3, KOLO_FLOAT64, 0, 7, set, &h) == KOLO_OK, kolo_last_error());
      const int rc = kolo_wait_release(h);
      const std::string want = "rank " + std::to_string(last) +
                               " posted a receive of 3 float64 from rank 0 (tag 7), but "
                               "rank 0 sent 3 int64";
      EXPECT(rc == KOLO_ERR_MISMATCH &&
                 std::string(kolo_last_error()).find(want) != std::string::npos,
             std::to_string(rc) + ": " + kolo_last_error());
    }
    EXPECT(kolo_process_set_destroy(set) == KOLO_OK, kolo_last_error());
  }
  EXPECT(kolo_barrier() == KOLO_OK, kolo_last_error());
  EXPECT(kolo_finalize() == KOLO_OK, kolo_last_error());
}

}  // namespace

int modePointToPoint() {
  {
    auto c = Communicator::fromEnvironment();
    gRank = c->rank();
    const int n = c->size(), me = c->rank();
    if (n < 2) {
      fail("p2p needs 2 ranks or more");
      return 1;
    }
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    ringPostedFirst(*c, left, right);
    sameTagInOrder(*c, left, right);
    sendsBeforeReceives(*c, left, right);
    mismatches(*c, left, right);
    c->barrier();
  }
  processSet();
  if (gFailures == 0) std::printf("p2p ok\n");
  return gFailures == 0 ? 0 : 1;
}

int modePointToPointLost(const std::string& how) {
  if (how != "exit" && how != "silent") {
    fail("p2p-lost: say exit or silent, not '" + how + "'");
    return 2;
  }
  auto c = Communicator::fromEnvironment();
  gRank = c->rank();
  const int last = c->size() - 1;
  c->barrier();  // everyone is up
  if (c->rank() == last) {
    if (how == "exit") _exit(5);  // no goodbye, no MPI_Finalize: a crash
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (c->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  std::vector<double> in(3);
  const auto start = std::chrono::steady_clock::now();
  try {
    c->recv(recvInto(in, last, 1));
    fail("a receive from a lost rank succeeded");
    return 1;
  } catch (const kolo::Error& e) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("p2p-lost error after %.1f s: %s: %s\n", s,
                std::string(kolo::toString(e.code())).c_str(), e.what());
    std::fflush(stdout);
    return 3;
  }
}

}  // namespace kolo_mpi_ranks

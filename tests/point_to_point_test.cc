// Communicator::send/recv/isend/irecv: (channel, peer, tag) matching in
// order, messages larger than the shm ring, exchanges that would deadlock
// if posting waited, mismatches naming both ranks, bad arguments.
#include <gtest/gtest.h>
#include <kolo/communicator.h>

#include <numeric>
#include <string>
#include <vector>

#include "support/comm_world.h"

namespace kolo {
namespace {

using test::testSettings;
using test::withCommunicators;

class PointToPointTest : public ::testing::TestWithParam<const char*> {
 protected:
  Settings settings() const { return testSettings(GetParam()); }
};

SendOptions sendOf(const std::vector<double>& v, int peer, int tag,
                   uint32_t channel = 0) {
  SendOptions o;
  o.buffer = v.data();
  o.count = v.size();
  o.dtype = DataType::kFloat64;
  o.peer = peer;
  o.tag = tag;
  o.channel = channel;
  return o;
}

RecvOptions recvOf(std::vector<double>& v, int peer, int tag, uint32_t channel = 0) {
  RecvOptions o;
  o.buffer = v.data();
  o.count = v.size();
  o.dtype = DataType::kFloat64;
  o.peer = peer;
  o.tag = tag;
  o.channel = channel;
  return o;
}

// Tags match in order per (peer, tag), whatever order the receives are
// posted in; channels keep equal tags apart; empty messages count.
TEST_P(PointToPointTest, MatchesByTagInOrder) {
  withCommunicators(2, settings(), [&](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<double> a(5, 1.0), b(3, 2.0), a2(5, 3.0), ch(5, 4.0), empty;
      c.send(sendOf(a, 1, 7));
      auto w1 = c.isend(sendOf(b, 1, 9));
      auto w2 = c.isend(sendOf(a2, 1, 7));
      auto w3 = c.isend(sendOf(ch, 1, 7, /*channel=*/5));
      c.send(sendOf(empty, 1, 0));
      w1->wait();
      w2->wait();
      w3->wait();
    } else {
      std::vector<double> ch(5), b(3), a(5), a2(5), empty;
      c.recv(recvOf(ch, 0, 7, 5));  // posted first, matches the channel only
      auto rb = c.irecv(recvOf(b, 0, 9));
      auto ra = c.irecv(recvOf(a, 0, 7));
      auto ra2 = c.irecv(recvOf(a2, 0, 7));
      c.recv(recvOf(empty, 0, 0));
      ra2->wait();
      ra->wait();
      rb->wait();
      EXPECT_EQ(ch, std::vector<double>(5, 4.0));
      EXPECT_EQ(a, std::vector<double>(5, 1.0));
      EXPECT_EQ(a2, std::vector<double>(5, 3.0));
      EXPECT_EQ(b, std::vector<double>(3, 2.0));
      EXPECT_TRUE(ra->test());
    }
  });
}

// Both ranks post a large send to each other before their receive: posting
// never waits for the peer, and messages beyond the shm ring (1 MiB)
// stream through.
TEST_P(PointToPointTest, LargeExchangeBothWays) {
  withCommunicators(3, settings(), [&](Communicator& c) {
    const size_t n = (3 << 20) / 8 + 17;
    const int right = (c.rank() + 1) % c.size();
    const int left = (c.rank() + c.size() - 1) % c.size();
    std::vector<double> out(n), in(n, -1);
    std::iota(out.begin(), out.end(), 1000.0 * c.rank());
    auto s = c.isend(sendOf(out, right, 1));
    auto r = c.irecv(recvOf(in, left, 1));
    while (!r->test()) {
    }
    s->wait();
    EXPECT_EQ(in[0], 1000.0 * left);
    EXPECT_EQ(in[n - 1], 1000.0 * left + double(n - 1));
    // Collectives still run on the same communicator afterwards.
    c.barrier();
  });
}

// A receive whose count or dtype differs fails naming both ranks and both
// descriptions, leaves its buffer alone, and later messages still match.
TEST_P(PointToPointTest, MismatchNamesBothRanks) {
  withCommunicators(2, settings(), [&](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<double> four(4, 1.0), ok(2, 5.0);
      c.send(sendOf(four, 1, 3));
      c.send(sendOf(four, 1, 3));
      c.send(sendOf(ok, 1, 3));
    } else {
      std::vector<double> three(3, -1.0);
      try {
        c.recv(recvOf(three, 0, 3));
        ADD_FAILURE() << "no mismatch";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kMismatch);
        const std::string m = e.what();
        EXPECT_NE(m.find("rank 1 posted a receive of 3 float64 from rank 0"),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("rank 0 sent 4 float64"), std::string::npos) << m;
      }
      EXPECT_EQ(three, std::vector<double>(3, -1.0));
      std::vector<float> eight(8);  // as many bytes, another dtype
      RecvOptions o;
      o.buffer = eight.data();
      o.count = 8;
      o.dtype = DataType::kFloat32;
      o.peer = 0;
      o.tag = 3;
      try {
        c.recv(o);
        ADD_FAILURE() << "no dtype mismatch";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kMismatch);
        EXPECT_NE(std::string(e.what()).find("8 float32"), std::string::npos) << e.what();
      }
      std::vector<double> ok(2);
      c.recv(recvOf(ok, 0, 3));
      EXPECT_EQ(ok, std::vector<double>(2, 5.0));
    }
    c.barrier();
  });
}

TEST_P(PointToPointTest, BadArguments) {
  withCommunicators(2, settings(), [&](Communicator& c) {
    std::vector<double> v(2);
    auto expectInvalid = [&](SendOptions o, const std::string& text) {
      try {
        c.isend(o);
        ADD_FAILURE() << "accepted: " << text;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    expectInvalid(sendOf(v, 2, 0), "peer 2 is not a rank of a job of 2");
    expectInvalid(sendOf(v, 1 - c.rank(), -1), "negative tag -1");
    expectInvalid(sendOf(v, c.rank(), 0), "the peer is this rank itself");
    SendOptions null = sendOf(v, 1 - c.rank(), 0);
    null.buffer = nullptr;
    expectInvalid(null, "null buffer but count 2");
    c.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPointTest, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace kolo

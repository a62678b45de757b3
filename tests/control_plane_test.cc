// The control plane against a stranger (issue 17, docs/security.md): the
// rendezvous store and the tcp handshake serve only processes that prove
// the job secret, and the store stays within its limits whatever a client
// sends. The stranger is a raw socket speaking the wire format by hand.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <kolo/error.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "api/communicator_impl.h"
#include "common/settings.h"
#include "common/sha256.h"
#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store.h"
#include "support/expect_error.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/tcp/tcp_transport.h"

namespace kolo {
namespace {

using rendezvous::TcpStore;
using rendezvous::TcpStoreServer;
using std::chrono::milliseconds;
namespace protocol = rendezvous::protocol;

constexpr const char* kSecret = "the job's secret";

using test::contains;
using test::expectError;

// A blocking socket connected to 127.0.0.1:port, with a 5 s receive limit
// so that no test can hang on it.
int rawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void sendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed: what some tests expect
    off += n;
  }
}

std::string readExact(int fd, size_t n) {
  std::string out(n, '\0');
  size_t off = 0;
  while (off < n) {
    ssize_t r = ::recv(fd, out.data() + off, n - off, 0);
    if (r <= 0) return out.substr(0, off);
    off += r;
  }
  return out;
}

// The server's reply frame: status and payload; status -1 when none came.
std::pair<int, std::string> readReply(int fd) {
  std::string head = readExact(fd, 4);
  if (head.size() < 4) return {-1, ""};
  uint32_t len;
  std::memcpy(&len, head.data(), 4);
  std::string body = readExact(fd, std::min<uint32_t>(len, 1 << 20));
  if (body.empty()) return {-1, ""};
  return {static_cast<uint8_t>(body[0]), body.substr(1)};
}

// True when the server closed the connection (EOF) within the receive limit.
bool closedByPeer(int fd) {
  char c;
  for (;;) {
    ssize_t r = ::recv(fd, &c, 1, 0);
    if (r == 0) return true;
    if (r < 0) return errno == ECONNRESET;
  }
}

// A raw connection that authenticates with `secret`; returns the fd after
// the server's kOk (the caller checks it), or the refusal in *refusal.
int rawAuthenticated(int port, const std::string& secret, std::string* refusal) {
  int fd = rawConnect(port);
  std::string challenge = readExact(fd, protocol::kChallengeBytes);
  EXPECT_EQ(challenge.substr(0, 8), "KOLOSTR1");
  std::string ns = challenge.substr(8);
  std::string nc = randomBytes(protocol::kNonceBytes);
  Digest proof = protocol::clientProof(secret, ns, nc);
  sendAll(fd, nc + std::string(reinterpret_cast<char*>(proof.data()), proof.size()));
  auto [status, payload] = readReply(fd);
  if (status != protocol::kOk) *refusal = payload;
  return fd;
}

std::string frame(const std::string& body) {
  uint32_t len = static_cast<uint32_t>(body.size());
  return std::string(reinterpret_cast<char*>(&len), 4) + body;
}

std::string setRequest(const std::string& key, const std::string& value) {
  uint32_t klen = static_cast<uint32_t>(key.size());
  return frame(std::string(1, protocol::kSet) +
               std::string(reinterpret_cast<char*>(&klen), 4) + key + value);
}

std::string getRequest(const std::string& key) {
  uint32_t klen = static_cast<uint32_t>(key.size());
  int64_t wait = 0;
  return frame(std::string(1, protocol::kGet) +
               std::string(reinterpret_cast<char*>(&klen), 4) + key +
               std::string(reinterpret_cast<char*>(&wait), 8));
}

TEST(StoreAuth, StrangerCannotReadOrWriteAKey) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret);
  auto rank = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
  rank->setString("world/shm/g1/seg/0", "kolo-segment-name");

  // A stranger that speaks the protocol but skips the proof: its requests
  // are read as a (wrong) proof, refused, and it is closed.
  int fd = rawConnect(server->port());
  EXPECT_EQ(readExact(fd, protocol::kChallengeBytes).substr(0, 8), "KOLOSTR1");
  std::string attack = getRequest("world/shm/g1/seg/0") +
                       setRequest("world/shm/g1/seg/0", "evil") + std::string(64, 'x');
  sendAll(fd, attack);
  auto [status, why] = readReply(fd);
  EXPECT_EQ(status, protocol::kBad);
  EXPECT_TRUE(contains(why, "did not prove the job secret")) << why;
  EXPECT_TRUE(closedByPeer(fd));
  ::close(fd);

  // A stranger with a guessed secret: refused the same way.
  std::string refusal;
  fd = rawAuthenticated(server->port(), "a guess", &refusal);
  EXPECT_TRUE(contains(refusal, "did not prove the job secret")) << refusal;
  EXPECT_TRUE(closedByPeer(fd));
  ::close(fd);

  EXPECT_EQ(rank->getString("world/shm/g1/seg/0", milliseconds(1000)),
            "kolo-segment-name");
  EXPECT_GE(server->usage().refused, 2u);
  // The rank with the secret goes on; one with another secret gets a clear
  // error naming the store and the variable.
  rank->setString("after", "ok");
  Error e = expectError([&] {
    TcpStore::connect("127.0.0.1", server->port(), milliseconds(2000), "other");
  });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "refused this rank")) << e.what();
  EXPECT_TRUE(contains(e.what(), "KOLO_JOB_SECRET")) << e.what();
}

TEST(StoreAuth, ServerMustProveTheSecretToo) {
  // A fake store: it challenges, reads the proof, and answers kOk with a
  // made-up MAC. The client must not trust it.
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread fake([lfd] {
    int fd = ::accept(lfd, nullptr, nullptr);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sendAll(fd, "KOLOSTR1" + randomBytes(protocol::kNonceBytes));
    readExact(fd, protocol::kProofBytes);
    sendAll(fd, frame(std::string(1, protocol::kOk) + randomBytes(32)));
    char c;
    (void)::recv(fd, &c, 1, 0);  // until the client hangs up
    ::close(fd);
  });
  Error e = expectError([&] {
    TcpStore::connect("127.0.0.1", ntohs(a.sin_port), milliseconds(3000), kSecret);
  });
  fake.join();
  ::close(lfd);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "did not prove the job secret")) << e.what();
}

TEST(StoreLimits, HugeFrameIsRefusedWithoutGrowth) {
  protocol::Limits limits;
  limits.maxFrameBytes = 64 << 10;
  limits.maxStoreBytes = 1 << 20;
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret, limits);
  // Before authentication: a declared 1 GiB frame is only a wrong proof.
  int fd = rawConnect(server->port());
  readExact(fd, protocol::kChallengeBytes);
  uint32_t huge = 1u << 30;
  sendAll(fd,
          std::string(reinterpret_cast<char*>(&huge), 4) + std::string(64 << 10, 'z'));
  EXPECT_EQ(readReply(fd).first, protocol::kBad);
  EXPECT_TRUE(closedByPeer(fd));
  ::close(fd);
  // After authentication: the header alone is refused, naming the limit.
  std::string refusal;
  fd = rawAuthenticated(server->port(), kSecret, &refusal);
  ASSERT_EQ(refusal, "");
  sendAll(fd, std::string(reinterpret_cast<char*>(&huge), 4) + std::string(4096, 'z'));
  auto [status, why] = readReply(fd);
  EXPECT_EQ(status, protocol::kBad);
  EXPECT_TRUE(contains(why, "1073741824 bytes")) << why;
  EXPECT_TRUE(contains(why, std::to_string(limits.maxFrameBytes))) << why;
  EXPECT_TRUE(closedByPeer(fd));
  ::close(fd);
  EXPECT_EQ(server->usage().storedBytes, 0u);
}

TEST(StoreLimits, FloodOfSetsStaysUnderTheStoreLimit) {
  protocol::Limits limits;
  limits.maxFrameBytes = 64 << 10;
  limits.maxStoreBytes = 1 << 20;
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret, limits);
  auto c = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
  const std::vector<uint8_t> value(60 << 10, 7);
  int stored = 0;
  std::string lastError;
  for (int i = 0; i < 40; ++i) {  // 40 x 60 KiB = 2.4 MiB offered
    try {
      c->set("flood/" + std::to_string(i), value);
      ++stored;
    } catch (const Error& e) {
      lastError = e.what();
    }
  }
  EXPECT_EQ(stored, 17);  // 17 x (60 KiB + key) fit in 1 MiB, the 18th does not
  EXPECT_TRUE(contains(lastError, "the store is full")) << lastError;
  EXPECT_LE(server->usage().storedBytes, limits.maxStoreBytes);
  // A value over the frame limit: refused by name, and the client recovers.
  Error e = expectError([&] { c->set("big", std::vector<uint8_t>(70 << 10, 1)); });
  EXPECT_TRUE(contains(e.what(), std::to_string(limits.maxFrameBytes))) << e.what();
  // Overwriting keeps the total: the store stays usable at its limit.
  c->set("flood/0", std::vector<uint8_t>(10, 1));
  c->set("small", std::vector<uint8_t>(100, 1));
  EXPECT_EQ(c->get("small", milliseconds(1000)).size(), 100u);
  EXPECT_LE(server->usage().storedBytes, limits.maxStoreBytes);
}

// This process's resident memory, from /proc/self/status.
size_t residentBytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f != nullptr && std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %zu kB", &kb) == 1) break;
  }
  if (f != nullptr) std::fclose(f);
  return kb * 1024;
}

TEST(StoreLimits, FloodOfHugeFramesDoesNotGrowTheServer) {
  // Default limits, as in kolorun: four clients that authenticated each
  // declare a 500 MiB SET and stream 32 MiB of it (issue 17 buffered 900 MiB
  // of one stranger's frame).
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret);
  const size_t before = residentBytes();
  const std::string chunk(1 << 20, 'f');
  for (int i = 0; i < 4; ++i) {
    std::string refusal;
    int fd = rawAuthenticated(server->port(), kSecret, &refusal);
    ASSERT_EQ(refusal, "");
    uint32_t declared = 500u << 20;
    sendAll(fd, std::string(reinterpret_cast<char*>(&declared), 4) +
                    std::string(1, protocol::kSet));
    for (int m = 0; m < 32; ++m) sendAll(fd, chunk);  // stops when closed
    auto [status, why] = readReply(fd);
    EXPECT_EQ(status, protocol::kBad);
    EXPECT_TRUE(contains(why, "524288000 bytes")) << why;
    ::close(fd);
  }
  const size_t after = residentBytes();
  EXPECT_LT(after, before + (size_t{16} << 20))
      << "resident memory grew from " << before << " to " << after << " bytes";
  EXPECT_EQ(server->usage().storedBytes, 0u);
}

TEST(StoreLimits, StalledPartialFrameIsDropped) {
  protocol::Limits limits;
  limits.idleMillis = 200;
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret, limits);
  // Stalls before its proof.
  int silent = rawConnect(server->port());
  readExact(silent, protocol::kChallengeBytes);
  // Stalls within a frame.
  std::string refusal;
  int partial = rawAuthenticated(server->port(), kSecret, &refusal);
  ASSERT_EQ(refusal, "");
  sendAll(partial, setRequest("k", "value").substr(0, 7));
  for (int fd : {silent, partial}) {
    auto [status, why] = readReply(fd);
    EXPECT_EQ(status, protocol::kBad);
    EXPECT_TRUE(contains(why, "idle limit")) << why;
    EXPECT_TRUE(closedByPeer(fd));
    ::close(fd);
  }
  // An idle rank between requests is not stalled: it is served later.
  auto c = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
  std::this_thread::sleep_for(milliseconds(400));
  c->setString("still", "here");
  EXPECT_EQ(c->getString("still", milliseconds(1000)), "here");
}

// Connections that have not proven the secret are capped: a newer one
// closes the oldest, and the ranks are still served.
TEST(StoreLimits, UnprovenConnectionsAreCappedOldestFirst) {
  protocol::Limits limits;
  limits.maxUnauthenticated = 4;
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret, limits);
  testing::internal::CaptureStderr();
  std::vector<int> strangers;
  for (int i = 0; i < 6; ++i) {
    strangers.push_back(rawConnect(server->port()));
    EXPECT_EQ(readExact(strangers.back(), protocol::kChallengeBytes).size(),
              protocol::kChallengeBytes);  // accepted, in this order
  }
  EXPECT_TRUE(closedByPeer(strangers[0]));
  EXPECT_TRUE(closedByPeer(strangers[1]));
  auto c = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
  c->setString("k", "v");
  EXPECT_EQ(c->getString("k", milliseconds(1000)), "v");
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(log, "more than 4 connections have not proven the job secret"))
      << log;
  EXPECT_EQ(server->usage().shed, 3u);  // the rank's connection pushed out one more
  for (int fd : strangers) ::close(fd);
}

// A store server in a child process whose descriptor limit is `limit`;
// its port in *port, its standard error readable from *log.
pid_t storeWithDescriptorLimit(rlim_t limit, const protocol::Limits& limits, int* port,
                               int* log) {
  int ready[2], err[2];
  EXPECT_EQ(::pipe(ready), 0);
  EXPECT_EQ(::pipe(err), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err[1], 2);
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = limit;
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(2);
    auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret, limits);
    int p = server->port();
    if (::write(ready[1], &p, sizeof(p)) != sizeof(p)) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  ::close(err[1]);
  EXPECT_EQ(::read(ready[0], port, sizeof(*port)), static_cast<ssize_t>(sizeof(*port)));
  ::close(ready[0]);
  *log = err[0];
  return pid;
}

// CPU time (clock ticks) that process `pid` has used.
long cpuTicks(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return -1;
  char buf[1024] = {0};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  // Fields after the command's closing parenthesis: state is field 3,
  // utime and stime are fields 14 and 15.
  const char* p = std::strrchr(buf, ')');
  if (n == 0 || p == nullptr) return -1;
  long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime,
                  &stime) != 2)
    return -1;
  return utime + stime;
}

// Out of file descriptors (a limit of 64, 100 silent strangers), the store
// still serves a rank (it closes the oldest strangers), does not spin, and
// a rank it cannot serve is told why.
TEST(StoreLimits, OutOfDescriptorsTheStoreServesRanksAndSaysWhy) {
  protocol::Limits limits;
  limits.maxUnauthenticated = 1000;  // the descriptor limit is what binds
  limits.idleMillis = 60000;
  int port = 0, log = -1;
  const pid_t pid = storeWithDescriptorLimit(64, limits, &port, &log);
  ASSERT_GT(pid, 0);
  std::vector<int> strangers;
  for (int i = 0; i < 100; ++i) strangers.push_back(rawConnect(port));
  std::string error;
  try {
    auto rank = TcpStore::connect("127.0.0.1", port, milliseconds(10000), kSecret);
    rank->setString("k", "v");
    EXPECT_EQ(rank->getString("k", milliseconds(1000)), "v");
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "");
  // Idle with its descriptors taken: it waits, it does not spin (a spinning
  // server used most of a core).
  const long before = cpuTicks(pid);
  std::this_thread::sleep_for(milliseconds(1000));
  const long used = cpuTicks(pid) - before;
  EXPECT_LT(used, ::sysconf(_SC_CLK_TCK) / 5) << "ticks in 1 s: " << used;
  // Ranks alone fill it: the one that does not fit is told the cause.
  for (int fd : strangers) ::close(fd);
  std::vector<std::unique_ptr<TcpStore>> ranks;
  error.clear();
  for (int i = 0; i < 80 && error.empty(); ++i) {
    try {
      ranks.push_back(TcpStore::connect("127.0.0.1", port, milliseconds(1000), kSecret));
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_TRUE(contains(error, "out of file descriptors (limit 64")) << error;
  ranks.clear();
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  std::string text(65536, '\0');
  ssize_t n = ::read(log, text.data(), text.size());
  text.resize(n > 0 ? n : 0);
  ::close(log);
  EXPECT_TRUE(contains(text, "out of file descriptors (limit 64")) << text;
}

// The local addresses (hex, as /proc/net/tcp writes them) listening on `port`.
std::vector<std::string> listenersOn(int port) {
  std::vector<std::string> out;
  FILE* f = std::fopen("/proc/net/tcp", "r");
  if (f == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    char local[64];
    unsigned st = 0;
    if (std::sscanf(line, " %*d: %63s %*s %x", local, &st) != 2 || st != 0x0A) continue;
    std::string l(local);
    size_t colon = l.find(':');
    if (colon != std::string::npos &&
        std::stoi(l.substr(colon + 1), nullptr, 16) == port) {
      out.push_back(l.substr(0, colon));
    }
  }
  std::fclose(f);
  return out;
}

TEST(StoreListen, HostedStoreListensOnTheRendezvousAddressOnly) {
  // Rank 0 hosting the store of tcp://127.0.0.1:PORT (torchrun's
  // MASTER_ADDR=127.0.0.1) listens on loopback, not on every interface.
  int port = 0;
  {
    auto probe = TcpStoreServer::start("127.0.0.1", 0);
    port = probe->port();
  }
  const std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  auto host = rendezvous::openStore(address, true, milliseconds(5000), kSecret);
  EXPECT_EQ(listenersOn(port), std::vector<std::string>{"0100007F"});
  auto guest = rendezvous::openStore(address, false, milliseconds(5000), kSecret);
  guest->setString("k", "v");
  EXPECT_EQ(host->getString("k", milliseconds(1000)), "v");
}

// A port free right now on loopback.
int freePort() {
  auto probe = TcpStoreServer::start("127.0.0.1", 0);
  return probe->port();
}

// Without a secret, a store that listens beyond loopback says so once, at
// warning level, with the line that sets a secret; on loopback, or with a
// secret, it says nothing.
TEST(StoreListen, UnauthenticatedStoreOffLoopbackWarnsOnce) {
  auto host = [](const std::string& ip, const std::string& secret) {
    testing::internal::CaptureStderr();
    {
      const std::string address = "tcp://" + ip + ":" + std::to_string(freePort());
      auto store = rendezvous::openStore(address, true, milliseconds(5000), secret);
      store->setString("k", "v");
    }
    return testing::internal::GetCapturedStderr();
  };
  EXPECT_EQ(host("127.0.0.1", ""), "");     // a local run stays quiet
  EXPECT_EQ(host("0.0.0.0", kSecret), "");  // authenticated
  const std::string warned = host("0.0.0.0", "");
  EXPECT_TRUE(contains(warned, "WARNING")) << warned;
  EXPECT_TRUE(contains(warned, "without a job secret")) << warned;
  EXPECT_TRUE(contains(warned, "export KOLO_JOB_SECRET=")) << warned;
  EXPECT_EQ(host("0.0.0.0", ""), "");  // once per process
}

// ---------------------------------------------------------- tcp transport

TEST(TcpAuth, StrangerCannotTakeARanksPlace) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret);
  transport::TcpTransport::Options o;
  o.size = 2;
  o.secret = kSecret;
  o.connectTimeout = milliseconds(20000);
  std::unique_ptr<transport::TcpTransport> t0, t1;
  std::thread rank0([&] {
    auto store =
        TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
    auto mine = o;
    mine.rank = 0;
    t0 = transport::TcpTransport::create(mine, *store);
  });
  // The stranger finds rank 0's port (here from the store; in life by a
  // port scan), connects first and claims to be rank 1.
  auto spy = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
  std::string where = spy->getString("tcp/addr/0", milliseconds(10000));
  int fd = rawConnect(std::stoi(where.substr(where.rfind(':') + 1)));
  std::string na, why;
  ASSERT_TRUE(transport::tcp::decodeChallenge(
      readExact(fd, transport::tcp::kChallengeBytes), &na, &why))
      << why;
  transport::tcp::Hello hello{
      transport::tcp::kMagic, transport::tcp::kVersion, 1, 0, 2, 0};
  sendAll(fd, transport::tcp::encodeHello(hello, na, randomBytes(32), "a guess"));
  EXPECT_TRUE(closedByPeer(fd));  // refused, and nothing of rank 0's sent to it
  ::close(fd);

  std::thread rank1([&] {
    auto store =
        TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
    auto mine = o;
    mine.rank = 1;
    t1 = transport::TcpTransport::create(mine, *store);
  });
  rank0.join();
  rank1.join();
  ASSERT_TRUE(t0 && t1);
  // The job goes on with correct results between the real ranks.
  std::vector<int> out(1000), in(1000, -1), back(1000, -1);
  for (int i = 0; i < 1000; ++i) out[i] = i * 3;
  std::thread echo([&] {
    t1->recv(0, 5, in.data(), in.size() * sizeof(int));
    t1->send(0, 6, in.data(), in.size() * sizeof(int));
  });
  t0->send(1, 5, out.data(), out.size() * sizeof(int));
  t0->recv(1, 6, back.data(), back.size() * sizeof(int));
  echo.join();
  EXPECT_EQ(back, out);
  std::thread d1([&] { t1.reset(); });
  t0.reset();
  d1.join();
}

// Strangers that connect to a rank's port during start-up and say nothing
// do not hold up the real ranks' handshakes (they were waited for one at a
// time, 5 s each: 15 of them outlasted a 60 s connect timeout).
TEST(TcpAuth, SilentStrangersDoNotHoldUpTheRanks) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, kSecret);
  transport::TcpTransport::Options o;
  o.size = 2;
  o.secret = kSecret;
  o.connectTimeout = milliseconds(8000);  // shorter than two strangers' 5 s each
  std::unique_ptr<transport::TcpTransport> t0, t1;
  std::string error0, error1;
  std::thread rank0([&] {
    try {
      auto store =
          TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
      auto mine = o;
      mine.rank = 0;
      t0 = transport::TcpTransport::create(mine, *store);
    } catch (const Error& e) {
      error0 = e.what();
    }
  });
  auto spy = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
  std::string where = spy->getString("tcp/addr/0", milliseconds(10000));
  std::vector<int> strangers;
  for (int i = 0; i < 15; ++i)
    strangers.push_back(rawConnect(std::stoi(where.substr(where.rfind(':') + 1))));
  std::thread rank1([&] {
    try {
      auto store =
          TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000), kSecret);
      auto mine = o;
      mine.rank = 1;
      t1 = transport::TcpTransport::create(mine, *store);
    } catch (const Error& e) {
      error1 = e.what();
    }
  });
  rank0.join();
  rank1.join();
  for (int fd : strangers) ::close(fd);
  EXPECT_EQ(error0, "");
  EXPECT_EQ(error1, "");
  ASSERT_TRUE(t0 && t1);
  int v = 7, got = 0;
  std::thread send([&] { t1->send(0, 1, &v, sizeof(v)); });
  t0->recv(1, 1, &got, sizeof(got));
  send.join();
  EXPECT_EQ(got, 7);
}

TEST(TcpAuth, HandshakeDecodersRejectWrongSecretsAndSizes) {
  namespace tcp = transport::tcp;
  const std::string na = randomBytes(32), nc = randomBytes(32);
  tcp::Hello h{tcp::kMagic, tcp::kVersion, 3, 1, 4, 0};
  tcp::Hello got{};
  std::string gotNc, why;
  std::string msg = tcp::encodeHello(h, na, nc, kSecret);
  EXPECT_TRUE(tcp::decodeHello(msg, na, kSecret, &got, &gotNc, &why)) << why;
  EXPECT_EQ(got.from, 3);
  EXPECT_EQ(gotNc, nc);
  EXPECT_FALSE(tcp::decodeHello(msg, na, "other", &got, &gotNc, &why));
  EXPECT_TRUE(contains(why, "claiming rank 3")) << why;
  EXPECT_FALSE(tcp::decodeHello(msg, randomBytes(32), kSecret, &got, &gotNc, &why));
  EXPECT_FALSE(tcp::decodeHello(msg.substr(1), na, kSecret, &got, &gotNc, &why));
  std::string answer = tcp::encodeAnswer(h, na, nc, kSecret);
  EXPECT_TRUE(tcp::decodeAnswer(answer, na, nc, kSecret, &got, &why)) << why;
  EXPECT_FALSE(tcp::decodeAnswer(answer, na, randomBytes(32), kSecret, &got, &why));
  EXPECT_FALSE(tcp::decodeAnswer(answer, na, nc, "other", &got, &why));
}

// ------------------------------------------------------------ a whole job

// Runs fn on `n` ranks (threads, each its own communicator over tcp, rank 0
// hosting the store at `address`) with the given secrets; returns each
// rank's error text ("" when it succeeded).
std::vector<std::string> runJob(int n, const std::string& address,
                                const std::vector<std::string>& secrets,
                                double connectTimeoutSeconds,
                                const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Settings s;
        s.transport = "tcp";
        s.timeoutSeconds = 20;
        s.connectTimeoutSeconds = connectTimeoutSeconds;
        s.jobSecret = secrets[r];
        CommunicatorConfig config;
        config.rank = r;
        config.size = n;
        config.rendezvous = address;
        config.hostStore = true;
        config.name = "job";
        config.hostId = "host" + std::to_string(r);
        api::CommunicatorImpl comm(config, s);
        fn(comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::string freeAddress() {
  auto probe = TcpStoreServer::start("127.0.0.1", 0);
  return "tcp://127.0.0.1:" + std::to_string(probe->port());
}

TEST(JobAuth, JobCompletesWithCorrectResultsWhileAStrangerIsRefused) {
  const std::string address = freeAddress();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  std::atomic<bool> done{false};
  std::atomic<int> refused{0};
  std::thread stranger([&] {
    while (!done) {  // connects, guesses, and tries again
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
        timeval tv{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (readExact(fd, protocol::kChallengeBytes).size() ==
            protocol::kChallengeBytes) {
          sendAll(fd, std::string(protocol::kProofBytes, 'g') + setRequest("job/x", "y"));
          refused += readReply(fd).first == protocol::kBad;
        }
      }
      ::close(fd);
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  auto errors = runJob(3, address, {kSecret, kSecret, kSecret}, 20, [&](Communicator& c) {
    // The stranger is refused at least once while the job runs.
    for (int i = 0; i < 500 && refused == 0; ++i)
      std::this_thread::sleep_for(milliseconds(10));
    for (int step = 0; step < 20; ++step) {
      std::vector<double> in(1000, c.rank() + 1 + step), out(1000, -1);
      AllreduceOptions o;
      o.send = in.data();
      o.recv = out.data();
      o.count = in.size();
      o.dtype = DataType::kFloat64;
      o.op = ReduceOp::kSum;
      c.allreduce(o);
      for (double v : out) ASSERT_EQ(v, 6.0 + 3 * step);
    }
  });
  done = true;
  stranger.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_GT(refused.load(), 0);
}

TEST(JobAuth, RanksThatDisagreeOnTheSecretGetAClearError) {
  auto errors =
      runJob(2, freeAddress(), {kSecret, "another secret"}, 2, [](Communicator&) {});
  EXPECT_TRUE(contains(errors[1], "refused this rank")) << errors[1];
  EXPECT_TRUE(contains(errors[1], "KOLO_JOB_SECRET")) << errors[1];
  EXPECT_NE(errors[0], "");  // rank 0 waits for rank 1 in vain, then says so
}

}  // namespace
}  // namespace kolo

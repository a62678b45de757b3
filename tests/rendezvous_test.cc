// Rendezvous: TcpStore (threads and a forked process), FileStore,
// openStore addresses and the elastic host updates. Launcher detection
// (detectJobEnvironment) is tested in rendezvous_environment_test.
#include <gtest/gtest.h>
#include <kolo/error.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/private_path.h"
#include "rendezvous/elastic_membership.h"
#include "rendezvous/environment.h"
#include "rendezvous/file_store.h"
#include "rendezvous/host_updates.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store.h"
#include "support/expect_error.h"
#include "support/tcp_ranks.h"

namespace kolo::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using test::contains;
using test::expectError;

std::string tempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kolo_rdv_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

// ------------------------------------------------------------- TcpStore

TEST(TcpStore, SetGetAddAcrossThreads) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  ASSERT_GT(server->port(), 0);
  constexpr int kThreads = 8;
  constexpr int kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  // One client shared by all threads plus one client per thread.
  auto shared = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      try {
        auto own = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
        own->setString("k" + std::to_string(i), "value of " + std::to_string(i));
        for (int j = 0; j < kThreads; ++j) {
          std::string v = own->getString("k" + std::to_string(j), milliseconds(5000));
          if (v != "value of " + std::to_string(j)) ++failures;
        }
        for (int j = 0; j < kAdds; ++j) {
          (j % 2 ? *own : *shared).add("counter", 1);
        }
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(shared->add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(shared->add("counter", -5), kThreads * kAdds - 5);
  EXPECT_EQ(shared->getString("counter", milliseconds(100)),
            std::to_string(kThreads * kAdds - 5));
  // Binary values and overwrites.
  std::vector<uint8_t> bin = {0, 1, 2, 255, 0};
  shared->set("bin", bin);
  EXPECT_EQ(shared->get("bin", milliseconds(100)), bin);
  shared->set("bin", {});
  EXPECT_TRUE(shared->get("bin", milliseconds(100)).empty());
}

TEST(TcpStore, GetWaitsOnTheServerUntilTheKeyIsSet) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  auto a = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
  auto b = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
  auto start = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    b->setString("late", "here");
  });
  EXPECT_EQ(a->getString("late", milliseconds(5000)), "here");
  double s = secondsSince(start);
  EXPECT_GE(s, 0.15);
  EXPECT_LT(s, 3.0);
  setter.join();
}

TEST(TcpStore, GetTimeoutNamesTheKey) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  auto c = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
  auto start = Clock::now();
  Error e = expectError([&] { c->get("rank7/address", milliseconds(300)); });
  double s = secondsSince(start);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(contains(e.what(), "rank7/address")) << e.what();
  EXPECT_GE(s, 0.25);
  EXPECT_LT(s, 3.0);
  // The connection is still in step afterwards.
  c->setString("x", "1");
  EXPECT_EQ(c->getString("x", milliseconds(100)), "1");
}

TEST(TcpStore, AddOnANonCounterIsAnError) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  auto c = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
  c->setString("word", "hello");
  Error e = expectError([&] { c->add("word", 1); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "word")) << e.what();
  EXPECT_EQ(c->add("fresh", 3), 3);
}

TEST(TcpStore, ConnectRetriesUntilTheServerStarts) {
  int port = test::freeLoopbackPort();
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    server = TcpStoreServer::start("127.0.0.1", port);
  });
  auto c = TcpStore::connect("127.0.0.1", port, milliseconds(10000));
  starter.join();
  c->setString("a", "b");
  EXPECT_EQ(c->getString("a", milliseconds(100)), "b");
}

TEST(TcpStore, ConnectTimeoutNamesHostAndPort) {
  int port = test::freeLoopbackPort();
  auto start = Clock::now();
  Error e = expectError([&] { TcpStore::connect("127.0.0.1", port, milliseconds(300)); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
  EXPECT_LT(secondsSince(start), 3.0);
}

TEST(TcpStore, ServerShutdownWakesAWaitingClient) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  auto c = TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
  std::optional<Error> error;
  std::thread waiter([&] {
    try {
      c->get("never", milliseconds(20000));
    } catch (const Error& e) {
      error = e;
    }
  });
  std::this_thread::sleep_for(milliseconds(100));
  auto start = Clock::now();
  server.reset();  // must not hang on the parked client
  waiter.join();
  EXPECT_LT(secondsSince(start), 3.0);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kIo);
  EXPECT_TRUE(contains(error->what(), "never")) << error->what();
}

TEST(TcpStore, WorksAcrossAForkedProcess) {
  // The server starts after the fork: forking while its thread runs is unsafe.
  const int port = test::freeLoopbackPort();
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      auto c = TcpStore::connect("127.0.0.1", port, milliseconds(5000));
      c->setString("child/pid", std::to_string(::getpid()));
      std::string hello = c->getString("parent/hello", milliseconds(5000));
      c->add("both", hello == "hi child" ? 10 : 1000);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  auto server = TcpStoreServer::start("127.0.0.1", port);
  auto c = TcpStore::connect("127.0.0.1", port, milliseconds(5000));
  EXPECT_EQ(c->getString("child/pid", milliseconds(5000)), std::to_string(pid));
  c->setString("parent/hello", "hi child");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(c->add("both", 1), 11);
}

// ------------------------------------------------------------ FileStore

TEST(FileStore, SetGetAddAndKeysWithSlashes) {
  std::string dir = tempDir("basic");
  FileStore s(dir + "/nested/deeper");
  s.setString("job/rank 0/addr", "10.0.0.1:5000");
  EXPECT_EQ(s.getString("job/rank 0/addr", milliseconds(100)), "10.0.0.1:5000");
  s.setString("job/rank 0/addr", "overwritten");
  EXPECT_EQ(s.getString("job/rank 0/addr", milliseconds(100)), "overwritten");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  FileStore other(dir + "/nested/deeper/");
  EXPECT_EQ(other.getString("job/rank 0/addr", milliseconds(100)), "overwritten");
  EXPECT_EQ(other.add("n", 0), 3);
  std::filesystem::remove_all(dir);
}

TEST(FileStore, KeysNeverCollideWithLockOrTemporaryFiles) {
  std::string dir = tempDir("collide");
  FileStore s(dir);
  s.setString("a.lock", "x");
  s.setString("la", "y");
  EXPECT_EQ(s.add("a", 1), 1);
  EXPECT_EQ(s.add("a", 1), 2);
  EXPECT_EQ(s.getString("a.lock", milliseconds(100)), "x");
  EXPECT_EQ(s.getString("la", milliseconds(100)), "y");
  EXPECT_EQ(s.getString("a", milliseconds(100)), "2");
  std::filesystem::remove_all(dir);
}

TEST(FileStore, GetTimeoutNamesKeyAndDirectory) {
  std::string dir = tempDir("timeout");
  FileStore s(dir);
  auto start = Clock::now();
  Error e = expectError([&] { s.get("missing/key", milliseconds(200)); });
  double t = secondsSince(start);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(contains(e.what(), "missing/key")) << e.what();
  EXPECT_TRUE(contains(e.what(), dir)) << e.what();
  EXPECT_GE(t, 0.19);
  EXPECT_LT(t, 2.0);
  std::filesystem::remove_all(dir);
}

TEST(FileStore, GetSeesALaterSet) {
  std::string dir = tempDir("later");
  FileStore a(dir), b(dir);
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    b.setString("k", "v");
  });
  EXPECT_EQ(a.getString("k", milliseconds(5000)), "v");
  setter.join();
  std::filesystem::remove_all(dir);
}

TEST(FileStore, AddIsAtomicAcrossThreadsAndProcesses) {
  std::string dir = tempDir("add");
  FileStore s(dir);
  constexpr int kEach = 100;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      FileStore c(dir);
      for (int i = 0; i < kEach; ++i) c.add("count", 1);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      FileStore c(dir);
      for (int i = 0; i < kEach; ++i) c.add("count", 1);
    });
  }
  for (auto& t : threads) t.join();
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(s.add("count", 0), 4 * kEach);
  std::filesystem::remove_all(dir);
}

// A directory that a stranger created first (the default /tmp/kolo-JOB is
// predictable) is refused at once by name, not after a timeout.
TEST(FileStore, ADirectoryOthersMayWriteIsRefusedByName) {
  std::string dir = tempDir("loose");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  Error e = expectError([&] { FileStore s(dir); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), dir)) << e.what();
  EXPECT_TRUE(contains(e.what(), "mode 0777")) << e.what();
  e = expectError([&] { openStore("file://" + dir, false, milliseconds(1000)); });
  EXPECT_TRUE(contains(e.what(), dir)) << e.what();
  std::filesystem::remove_all(dir);
}

TEST(FileStore, ADirectoryOfAnotherUserIsRefusedByName) {
  // Another user's directory: a real one when this test may chown (root),
  // and the check itself on such a directory's stat either way.
  struct stat st {};
  st.st_uid = ::geteuid() + 1;
  st.st_mode = S_IFDIR | 0700;
  Error e =
      expectError([&] { requirePrivate(st, "the file store directory", "/d", ""); });
  EXPECT_TRUE(contains(e.what(), "belongs to uid " + std::to_string(st.st_uid)))
      << e.what();
  if (::geteuid() != 0) return;
  std::string dir = tempDir("owner");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  e = expectError([&] { FileStore s(dir); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), dir)) << e.what();
  EXPECT_TRUE(contains(e.what(), "belongs to uid 65534")) << e.what();
  std::filesystem::remove_all(dir);
}

TEST(FileStore, CreatesItsDirectoryAndEntriesPrivate) {
  std::string dir = tempDir("private");
  FileStore s(dir);
  s.setString("k", "v");
  EXPECT_EQ(s.add("n", 1), 1);
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ASSERT_EQ(::stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 077, 0u) << entry.path();
  }
  std::filesystem::remove_all(dir);
}

TEST(FileStore, EntriesAreSignedWithTheJobSecret) {
  std::string dir = tempDir("signed");
  FileStore mine(dir, "secret-a");
  FileStore theirs(dir, "secret-b");
  mine.setString("world/shm/seg/0", "1234 /kolo-segment");
  EXPECT_EQ(mine.getString("world/shm/seg/0", milliseconds(100)), "1234 /kolo-segment");
  EXPECT_EQ(mine.add("count", 2), 2);
  Error e = expectError([&] { theirs.get("world/shm/seg/0", milliseconds(100)); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "world/shm/seg/0")) << e.what();
  EXPECT_TRUE(contains(e.what(), "KOLO_JOB_SECRET")) << e.what();
  e = expectError([&] { theirs.add("count", 1); });
  EXPECT_TRUE(contains(e.what(), "count")) << e.what();
  // A value written into the directory by anything but the store.
  {
    std::FILE* f = std::fopen((dir + "/kplanted").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("9999 /stranger", f);
    std::fclose(f);
  }
  e = expectError([&] { mine.get("planted", milliseconds(100)); });
  EXPECT_TRUE(contains(e.what(), "planted")) << e.what();
  // A value moved from one key to another does not pass either.
  std::filesystem::copy_file(dir + "/kworld%2Fshm%2Fseg%2F0", dir + "/kother");
  e = expectError([&] { mine.get("other", milliseconds(100)); });
  EXPECT_TRUE(contains(e.what(), "other")) << e.what();
  std::filesystem::remove_all(dir);
}

// ------------------------------------------------------------ openStore

TEST(OpenStore, TcpHostedByThisProcess) {
  int port = test::freeLoopbackPort();
  std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  auto host = openStore(address, true, milliseconds(5000));
  auto guest = openStore(address, false, milliseconds(5000));
  host->setString("a", "1");
  EXPECT_EQ(guest->getString("a", milliseconds(1000)), "1");
  EXPECT_EQ(guest->add("c", 2), 2);
  EXPECT_EQ(host->add("c", 2), 4);
  PrefixStore prefixed("job", *guest);
  prefixed.setString("x", "y");
  EXPECT_EQ(host->getString("job/x", milliseconds(1000)), "y");
}

TEST(OpenStore, FileAddress) {
  std::string dir = tempDir("open");
  auto s = openStore("file://" + dir, false, milliseconds(1000));
  s->setString("k", "v");
  EXPECT_EQ(FileStore(dir).getString("k", milliseconds(100)), "v");
  std::filesystem::remove_all(dir);
}

TEST(OpenStore, MalformedAddressesNameTheAddress) {
  for (std::string bad :
       {"", "127.0.0.1:5000", "tcp://", "tcp://host", "tcp://host:", "tcp://host:abc",
        "tcp://host:0", "tcp://host:70000", "tcp://:5000", "tcp://[::1]5000",
        "file://relative/dir", "file://", "udp://host:1"}) {
    SCOPED_TRACE(bad);
    Error e = expectError([&] { openStore(bad, false, milliseconds(100)); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(e.what(), "'" + bad + "'")) << e.what();
  }
}

// ------------------------------------------------------------- elastic::HostUpdates

// A worker reads the launcher's host-update counters through a connection of
// its own; a store that went away is an error naming it, and the next read
// connects afresh (to a launcher's store back on the same address).
TEST(ElasticHostUpdates, ReadsTheCountersAndReconnectsAfterAFailure) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  const int port = server->port();
  elastic::HostUpdates reader("tcp://127.0.0.1:" + std::to_string(port),
                              milliseconds(2000), "");
  auto counts = reader.read();  // keys never added read 0
  EXPECT_EQ(counts.updates, 0);
  EXPECT_EQ(counts.additions, 0);
  auto launcher = TcpStore::connect("127.0.0.1", port, milliseconds(5000));
  launcher->add(elastic::kHostUpdatesKey, 2);
  launcher->add(elastic::kHostAdditionsKey, 1);
  counts = reader.read();
  EXPECT_EQ(counts.updates, 2);
  EXPECT_EQ(counts.additions, 1);

  launcher.reset();
  server.reset();
  EXPECT_THROW(reader.read(), Error);
  server = TcpStoreServer::start("127.0.0.1", port);
  launcher = TcpStore::connect("127.0.0.1", port, milliseconds(5000));
  launcher->add(elastic::kHostUpdatesKey, 5);
  counts = reader.read();
  EXPECT_EQ(counts.updates, 5);
  EXPECT_EQ(counts.additions, 0);
}

}  // namespace
}  // namespace kolo::rendezvous

// What the tests of the shared-memory transport share (shm_transport_test,
// shm_segment_check_test, shm_transport_process_test): a job name of
// their own per test, the job's entries in /dev/shm, options for a rank,
// patterned messages and their check, and the fixture ShmTransportTest
// that runs ranks as threads of this process (each with its own
// ShmTransport and store client) and finds nothing left in /dev/shm after
// each test.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "rendezvous/file_store.h"
#include "rendezvous/tcp_store.h"
#include "transport/shm/shm_transport.h"

namespace kolo::transport::shm_fixture {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using rendezvous::FileStore;
using rendezvous::TcpStore;
using rendezvous::TcpStoreServer;

constexpr size_t kMiB = 1 << 20;

inline double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

inline std::string uniqueJob() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info ? info->name() : "x") + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

// Entries of /dev/shm that belong to job `job`.
inline std::vector<std::string> segmentsOf(const std::string& job) {
  std::vector<std::string> found;
  DIR* d = opendir("/dev/shm");
  if (!d) return found;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.find("kolo-" + job + "-") == 0) found.push_back(name);
  }
  closedir(d);
  return found;
}

inline ShmTransport::Options optionsFor(int rank, int size, const std::string& job) {
  ShmTransport::Options o;
  o.rank = rank;
  o.size = size;
  o.localRanks.resize(size);
  std::iota(o.localRanks.begin(), o.localRanks.end(), 0);
  o.timeout = 20s;
  o.connectTimeout = 20s;
  o.jobName = job;
  return o;
}

// Byte i of the message from `src` to `dst` in round `round`.
inline uint8_t pattern(int src, int dst, int round, size_t i) {
  return static_cast<uint8_t>(i * 131 + src * 31 + dst * 7 + round * 3 + (i >> 12));
}

inline std::vector<uint8_t> makeMessage(int src, int dst, int round, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(src, dst, round, i);
  return v;
}

// First index where `v` differs from the expected pattern, or -1.
inline long firstBad(const std::vector<uint8_t>& v, int src, int dst, int round) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != pattern(src, dst, round, i)) return static_cast<long>(i);
  return -1;
}

class ShmTransportTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_TRUE(segmentsOf(job_).empty())
        << "left in /dev/shm: " << (segmentsOf(job_).empty() ? "" : segmentsOf(job_)[0]);
  }

  // Runs body(transport) on `n` threads, each rank with its own transport
  // and its own client of a TcpStore, and rethrows the first failure.
  void runRanks(int n, const std::function<void(ShmTransport&)>& body,
                const std::function<void(ShmTransport::Options&)>& tweak = nullptr) {
    if (!server_) server_ = TcpStoreServer::start("127.0.0.1", 0);
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto o = optionsFor(r, n, job_);
          if (tweak) tweak(o);
          auto store = TcpStore::connect("127.0.0.1", server_->port(), 10s);
          auto t = ShmTransport::create(o, *store);
          // The set-up barrier unlinked every segment of the group already.
          if (!segmentsOf(job_).empty()) {
            KOLO_THROW(ErrorCode::kInternal, "rank "
                                                 << r << " sees " << segmentsOf(job_)[0]
                                                 << " still in /dev/shm after create");
          }
          body(*t);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  std::string job_ = uniqueJob();
  std::unique_ptr<TcpStoreServer> server_;  // shared by the runRanks of one test
};

}  // namespace kolo::transport::shm_fixture

// kolo_finalize() then kolo_init() in one process, 20 times, on 2 ranks:
// every cycle runs an allreduce whose result is checked, and from cycle 2 to
// cycle 20 the process must not grow (open descriptors, mappings, resident
// memory within a tolerance). Once under kolorun (its store outlives every
// world) and once with torchrun's variables (rank 0 hosts the store, so each
// finalize takes it down and each init starts it again on the same port).
#include <gtest/gtest.h>
#include <kolo/kolo.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/process_ranks.h"

namespace {

constexpr int kCycles = 20;
constexpr long kRssToleranceKb = 8 * 1024;

// Under ASan or TSan the allocator maps regions of its own as it goes and
// keeps freed memory in quarantine, so the process's mappings and RSS grow
// without a leak (LeakSanitizer reports real leaks at exit). There the
// check is on what kolo itself holds: descriptors and /dev/shm mappings.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerAllocator = true;
#else
constexpr bool kSanitizerAllocator = false;
#endif
#else
constexpr bool kSanitizerAllocator = false;
#endif

struct Footprint {
  long fds = 0;
  long maps = 0;
  long shmMaps = 0;  // mappings of /dev/shm files: kolo's segments
  long rssKb = 0;
};

Footprint footprint() {
  Footprint f;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    ++f.fds;
  }
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    ++f.maps;
    if (line.find("/dev/shm/") != std::string::npos) ++f.shmMaps;
  }
  std::ifstream status("/proc/self/status");
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) f.rssKb = std::stol(line.substr(6));
  }
  return f;
}

// The cycles of one rank; prints why and returns non-zero on failure.
int runCycles(int rank, int size) {
  Footprint second;
  for (int cycle = 1; cycle <= kCycles; ++cycle) {
    if (kolo_init() != KOLO_OK) {
      std::printf("rank %d cycle %d: init failed: %s\n", rank, cycle, kolo_last_error());
      return 1;
    }
    if (kolo_rank() != rank || kolo_size() != size) {
      std::printf("rank %d cycle %d: layout %d/%d\n", rank, cycle, kolo_rank(),
                  kolo_size());
      return 2;
    }
    std::vector<float> v(1000, static_cast<float>(rank + cycle)), out(1000);
    const float want = static_cast<float>(size * cycle + size * (size - 1) / 2);
    if (kolo_allreduce(v.data(), out.data(), v.size(), KOLO_FLOAT32, KOLO_SUM) !=
            KOLO_OK ||
        out[0] != want || out[999] != want) {
      std::printf("rank %d cycle %d: allreduce gave %f, expected %f (%s)\n", rank, cycle,
                  out[999], want, kolo_last_error());
      return 3;
    }
    if (kolo_finalize() != KOLO_OK) {
      std::printf("rank %d cycle %d: finalize: %s\n", rank, cycle, kolo_last_error());
      return 4;
    }
    const Footprint now = footprint();
    if (cycle == 2) second = now;
    if (cycle == kCycles) {
      std::printf(
          "rank %d: cycle 2: %ld fds %ld maps %ld kB; cycle %d: %ld fds %ld maps "
          "%ld kB\n",
          rank, second.fds, second.maps, second.rssKb, cycle, now.fds, now.maps,
          now.rssKb);
      const bool grew =
          now.fds > second.fds || now.shmMaps > second.shmMaps ||
          (!kSanitizerAllocator &&
           (now.maps > second.maps || now.rssKb > second.rssKb + kRssToleranceKb));
      if (grew) {
        std::printf("rank %d: the process grew between cycle 2 and cycle %d\n", rank,
                    cycle);
        return 5;
      }
    }
  }
  std::printf("rank %d: %d cycles ok\n", rank, kCycles);
  return 0;
}

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

// Run by the test below as each rank of a kolorun job; skipped otherwise.
TEST(Reinit, CyclesAsAKolorunRank) {
  if (std::getenv("KOLO_REINIT_UNDER_KOLORUN") == nullptr) {
    GTEST_SKIP() << "run by Reinit.TwentyCyclesUnderKolorun";
  }
  const char* rank = std::getenv("KOLO_RANK");
  const char* size = std::getenv("KOLO_SIZE");
  ASSERT_TRUE(rank != nullptr && size != nullptr);
  EXPECT_EQ(runCycles(std::atoi(rank), std::atoi(size)), 0);
}

TEST(Reinit, TwentyCyclesUnderKolorun) {
  const char* dir = std::getenv("KOLO_BIN_DIR");
  const std::string kolorun = std::string(dir != nullptr ? dir : "bin") + "/kolorun";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "KOLO_REINIT_UNDER_KOLORUN=1 KOLO_TIMEOUT=20 " + kolorun +
                              " -np 2 " + self +
                              " --gtest_filter=Reinit.CyclesAsAKolorunRank 2>&1";
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("[0] rank 0: 20 cycles ok"), std::string::npos) << output;
  EXPECT_NE(output.find("[1] rank 1: 20 cycles ok"), std::string::npos) << output;
}

TEST(Reinit, TwentyCyclesWithTorchrunVariables) {
  const int port = freePort();  // the store's: MASTER_PORT + 1
  ASSERT_GT(port, 1);
  kolo::test::ProcessRanks ranks(2, [&](int rank, const std::string&) {
    for (const char* v :
         {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE",
          "KOLO_RENDEZVOUS", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      unsetenv(v);
    }
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
    setenv("KOLO_TIMEOUT", "20", 1);
    return runCycles(rank, 2);
  });
  for (const auto& o : ranks.waitAll(std::chrono::milliseconds(60000))) {
    EXPECT_FALSE(o.hung) << o.output;
    EXPECT_EQ(o.exitCode, 0) << "rank " << o.rank << ":\n" << o.output;
  }
}

}  // namespace

#include "support/process_ranks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "api/communicator_impl.h"
#include "support/comm_world.h"

namespace kolo::test {

std::unique_ptr<api::CommunicatorImpl> connectRank(int rank, int size,
                                                   const std::string& rendezvous,
                                                   double timeoutSeconds,
                                                   const std::string& transport) {
  Settings s = testSettings(transport);
  s.timeoutSeconds = timeoutSeconds;
  CommunicatorConfig config;
  config.rank = rank;
  config.size = size;
  config.rendezvous = rendezvous;
  config.hostStore = false;
  return std::make_unique<api::CommunicatorImpl>(config, s);
}

void sayRank(int rank, const char* state) {
  std::printf("rank %d %s\n", rank, state);
  std::fflush(stdout);
}

void exitWithError(int rank, const Error& e) {
  std::printf("rank %d error code %d: %s\n", rank, static_cast<int>(e.code()), e.what());
  std::fflush(stdout);
  _exit(static_cast<int>(e.code()));
}

ProcessRanks::ProcessRanks(int n, Body body) {
  char tmpl[] = "/tmp/kolo-ranks-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) std::abort();
  dir_ = tmpl;
  const std::string address = "file://" + dir_;
  start_ = std::chrono::steady_clock::now();
  outcomes_.resize(n);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) std::abort();
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[1]);
      int code = 99;
      try {
        code = body(r, address);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught exception: %s\n", r, e.what());
        code = 98;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    pids_.push_back(pid);
    pipes_.push_back(fds[0]);
    outcomes_[r].rank = r;
  }
}

ProcessRanks::~ProcessRanks() {
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (pids_[r] > 0) {
      kill(pids_[r], SIGKILL);
      waitpid(pids_[r], nullptr, 0);
    }
    if (pipes_[r] >= 0) close(pipes_[r]);
  }
  std::filesystem::remove_all(dir_);
}

void ProcessRanks::signal(int rank, int sig) {
  if (pids_[rank] > 0) kill(pids_[rank], sig);
}

double ProcessRanks::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProcessRanks::drainOutput(bool block) {
  char buf[4096];
  for (size_t r = 0; r < pipes_.size(); ++r) {
    if (pipes_[r] < 0) continue;
    for (;;) {
      ssize_t got = read(pipes_[r], buf, sizeof(buf));
      if (got > 0) {
        outcomes_[r].output.append(buf, static_cast<size_t>(got));
        continue;
      }
      if (got == 0) {
        close(pipes_[r]);
        pipes_[r] = -1;
      }
      break;
    }
  }
  (void)block;
}

bool ProcessRanks::waitForOutput(const std::string& text,
                                 std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    drainOutput(false);
    bool all = true;
    for (size_t r = 0; r < outcomes_.size(); ++r) {
      if (outcomes_[r].output.find(text) != std::string::npos) continue;
      all = false;
      if (pipes_[r] < 0) return false;  // it ended (closed its output) without it
    }
    if (all) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::vector<RankOutcome> ProcessRanks::waitAll(std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  size_t left = 0;
  for (int p : pids_) left += p > 0 ? 1 : 0;
  while (left > 0) {
    drainOutput(false);
    bool reaped = false;
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] <= 0) continue;
      int status = 0;
      pid_t got = waitpid(pids_[r], &status, WNOHANG);
      if (got != pids_[r]) continue;
      auto& o = outcomes_[r];
      o.seconds = elapsed();
      o.exited = WIFEXITED(status);
      if (o.exited) o.exitCode = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
      pids_[r] = 0;
      --left;
      reaped = true;
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > until) {
      for (size_t r = 0; r < pids_.size(); ++r) {
        if (pids_[r] <= 0) continue;
        outcomes_[r].hung = true;
        outcomes_[r].seconds = elapsed();
        kill(pids_[r], SIGCONT);
        kill(pids_[r], SIGKILL);
        waitpid(pids_[r], nullptr, 0);
        pids_[r] = 0;
      }
      break;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  drainOutput(false);
  return outcomes_;
}

}  // namespace kolo::test

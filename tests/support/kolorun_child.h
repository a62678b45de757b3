// What the tests of the kolorun binary (kolorun_test, kolorun_failure_test,
// kolorun_hosts_test) share: running KOLO_BIN_DIR/kolorun as a real child
// process with its output collected (and signals sent to it on output),
// temporary directories, whether the processes a job left are gone, and
// the job secret a rank printed.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kolo::kolorun_test {

using Clock = std::chrono::steady_clock;

inline std::string kolorunPath() {
  const char* dir = std::getenv("KOLO_BIN_DIR");
  return std::string(dir != nullptr ? dir : "bin") + "/kolorun";
}

struct RunResult {
  int exitCode = -1;  // 128+signal when kolorun itself was killed
  std::string out;
  std::string err;
  double seconds = 0;
  bool timedOut = false;
};

// Runs kolorun with `args`, collecting stdout and stderr. `onOutput` is
// called whenever output arrives with the child's pid (to send it signals).
// Anything still running after `limitSeconds` is killed and timedOut is set.
inline RunResult runKolorun(
    const std::vector<std::string>& args, double limitSeconds = 30,
    const std::function<void(pid_t, const RunResult&)>& onOutput = {}) {
  std::vector<std::string> argv = {kolorunPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  int outPipe[2], errPipe[2];
  EXPECT_EQ(pipe2(outPipe, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(errPipe, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  auto start = Clock::now();
  int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(outPipe[1]);
  close(errPipe[1]);
  RunResult result;
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << cargv[0] << ": " << std::strerror(rc);
    close(outPipe[0]);
    close(errPipe[0]);
    return result;
  }

  auto deadline = start + std::chrono::duration<double>(limitSeconds);
  std::vector<pollfd> fds = {{outPipe[0], POLLIN, 0}, {errPipe[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.timedOut = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n <= 0) continue;
    bool got = false;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(r));
        got = true;
      } else if (r == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
    if (got && onOutput) onOutput(pid, result);
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  // Output closed; kolorun itself should be gone promptly.
  while (true) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (Clock::now() > deadline) {
      result.timedOut = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline std::string describe(const RunResult& r) {
  return "exit " + std::to_string(r.exitCode) + " after " + std::to_string(r.seconds) +
         " s\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

// A fresh temporary directory, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "kolorun_test.XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// True while `pid` exists and is not a zombie.
inline bool processAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string content((std::istreambuf_iterator<char>(stat)),
                      std::istreambuf_iterator<char>());
  auto close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() &&
         content[close + 2] != 'Z' && content[close + 2] != 'X';
}

// Pids written one per file under dir (the ranks' background sleeps).
inline std::vector<pid_t> pidsIn(const std::filesystem::path& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path());
    pid_t pid = 0;
    if (f >> pid && pid > 0) pids.push_back(pid);
  }
  return pids;
}

inline void expectAllGone(const std::vector<pid_t>& pids) {
  auto deadline = Clock::now() + std::chrono::seconds(2);
  for (pid_t pid : pids) {
    while (processAlive(pid) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(processAlive(pid)) << "process " << pid << " survived kolorun";
  }
}

// The job secret (docs/security.md): one per job, the same on every rank,
// in the environment only.
inline std::string secretOf(const std::string& out, int rank) {
  const std::string tag = "[" + std::to_string(rank) + "] secret=";
  size_t at = out.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  return out.substr(at, out.find('\n', at) - at);
}

}  // namespace kolo::kolorun_test

#include "host_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "rank_process.h"
#include "remote_launch.h"

extern char** environ;

namespace kolo::kolorun {
namespace {

struct Probe {
  std::string host;
  pid_t pid = -1;
  int errFd = -1;
  std::string err;
  bool finished = false;
  int status = 0;
};

// The last non-empty line of `text`.
std::string lastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n ");
  if (end == std::string::npos) return "";
  size_t newline = text.rfind('\n', end);
  size_t begin = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(begin, end - begin + 1);
}

void spawnProbe(Probe& probe, const std::string& executable,
                const std::vector<std::string>& sshWords) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("cannot create a pipe: ") +
                             std::strerror(errno));
  }
  std::vector<std::string> args = sshArgv(sshWords, probe.host, "exit 0");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  int rc =
      posix_spawn(&probe.pid, executable.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    probe.pid = -1;
    throw std::runtime_error("cannot execute " + executable + ": " + std::strerror(rc));
  }
  probe.errFd = fds[0];
  fcntl(probe.errFd, F_SETFL, fcntl(probe.errFd, F_GETFL) | O_NONBLOCK);
}

void readErr(Probe& probe) {
  char buf[4096];
  while (probe.errFd >= 0) {
    ssize_t n = read(probe.errFd, buf, sizeof buf);
    if (n > 0) {
      if (probe.err.size() < 65536) probe.err.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close(probe.errFd);
    probe.errFd = -1;
  }
}

}  // namespace

std::vector<ProbeFailure> probeHosts(const std::vector<std::string>& sshWords,
                                     const std::vector<std::string>& hosts,
                                     std::chrono::milliseconds timeout) {
  std::string executable;
  try {
    executable = resolveExecutable(sshWords.front());
  } catch (const LaunchError& e) {
    throw std::runtime_error(std::string("--ssh-command: ") + e.what());
  }
  std::vector<Probe> probes(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    probes[i].host = hosts[i];
    spawnProbe(probes[i], executable, sshWords);
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  while (true) {
    bool pending = false;
    for (auto& p : probes) {
      readErr(p);
      if (!p.finished && waitpid(p.pid, &p.status, WNOHANG) == p.pid) p.finished = true;
      pending |= !p.finished || p.errFd >= 0;
    }
    if (!pending || Clock::now() >= deadline) break;
    // Wake on stderr output, at most every 20 ms for exits.
    std::vector<pollfd> fds;
    for (auto& p : probes) {
      if (p.errFd >= 0) fds.push_back({p.errFd, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), 20);
  }

  std::vector<ProbeFailure> failures;
  for (auto& p : probes) {
    std::string reason;
    if (!p.finished) {
      kill(-p.pid, SIGKILL);
      waitpid(p.pid, &p.status, 0);
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g",
                    std::chrono::duration<double>(timeout).count());
      reason = std::string("did not answer within ") + seconds + " s (--start-timeout)";
    } else {
      ExitStatus status = ExitStatus::fromWaitStatus(p.status);
      if (!status.success()) reason = status.describe();
    }
    if (p.errFd >= 0) {
      readErr(p);
      if (p.errFd >= 0) close(p.errFd);
    }
    if (reason.empty()) continue;
    std::string line = lastLine(p.err);
    if (!line.empty()) reason += ": " + line;
    failures.push_back({p.host, reason});
  }
  return failures;
}

}  // namespace kolo::kolorun

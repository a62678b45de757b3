#include "rank_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace kolo::kolorun {
namespace {

// Closes a pipe pair on scope exit unless released.
struct PipePair {
  int fds[2] = {-1, -1};
  PipePair() {
    if (pipe2(fds, O_CLOEXEC) != 0) {
      throw LaunchError(std::string("cannot create a pipe: ") + std::strerror(errno), 1);
    }
  }
  ~PipePair() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
  int releaseRead() {
    int fd = fds[0];
    fds[0] = -1;
    return fd;
  }
  int releaseWrite() {
    int fd = fds[1];
    fds[1] = -1;
    return fd;
  }
};

std::vector<char*> cStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

bool isExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         access(path.c_str(), X_OK) == 0;
}

}  // namespace

ExitStatus ExitStatus::fromWaitStatus(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.signal = WTERMSIG(status);
  } else {
    s.code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return s;
}

std::string ExitStatus::describe() const {
  if (signaled) return "was killed by signal " + signalName(signal);
  return "exited with code " + std::to_string(code);
}

std::string signalName(int sig) {
  if (const char* abbrev = sigabbrev_np(sig); abbrev != nullptr) {
    return std::string("SIG") + abbrev;
  }
  return "signal " + std::to_string(sig);
}

std::string resolveExecutable(const std::string& command) {
  if (command.empty()) throw LaunchError("empty command", 127);
  if (command.find('/') != std::string::npos) {
    struct stat st;
    if (stat(command.c_str(), &st) != 0) {
      throw LaunchError(
          "command not found: " + command + " (" + std::strerror(errno) + ")", 127);
    }
    if (!S_ISREG(st.st_mode) || access(command.c_str(), X_OK) != 0) {
      throw LaunchError("command is not an executable file: " + command, 126);
    }
    return command;
  }
  const char* pathEnv = std::getenv("PATH");
  std::string path = pathEnv != nullptr ? pathEnv : "/usr/local/bin:/usr/bin:/bin";
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + command;
    if (isExecutableFile(candidate)) return candidate;
  }
  throw LaunchError("command not found: " + command + " (searched PATH)", 127);
}

RankProcess::RankProcess(int rank, std::vector<std::string> argv,
                         std::vector<std::string> env)
    : rank_(rank), argv_(std::move(argv)), env_(std::move(env)) {}

RankProcess::~RankProcess() {
  if (stdoutFd_ >= 0) close(stdoutFd_);
  if (stderrFd_ >= 0) close(stderrFd_);
  if (controlFd_ >= 0) close(controlFd_);
}

void RankProcess::start(const std::string& executable, const sigset_t& childMask,
                        bool withControl) {
  PipePair out;
  PipePair err;
  std::optional<PipePair> control;
  if (withControl) control.emplace();

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (control) {
    posix_spawn_file_actions_adddup2(&actions, control->fds[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out.fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.fds[1], STDERR_FILENO);
  // Nothing else of kolorun's (store sockets, other ranks' pipes) leaks in.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group (pgid = pid); default dispositions for what kolorun
  // handles or ignores; the mask kolorun had before blocking signals.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGTTOU, SIGTTIN}) {
    sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &childMask);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(
      &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> argv = cStrings(argv_);
  std::vector<char*> envp = cStrings(env_);
  pid_t pid = -1;
  int rc =
      posix_spawn(&pid, executable.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    int code = (rc == ENOENT) ? 127 : (rc == EACCES || rc == ENOEXEC) ? 126 : 1;
    throw LaunchError("rank " + std::to_string(rank_) + ": cannot execute " + argv_[0] +
                          ": " + std::strerror(rc),
                      code);
  }
  pid_ = pid;
  stdoutFd_ = out.releaseRead();
  stderrFd_ = err.releaseRead();
  for (int fd : {stdoutFd_, stderrFd_}) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  if (control) {
    controlFd_ = control->releaseWrite();
    fcntl(controlFd_, F_SETFL, fcntl(controlFd_, F_GETFL) | O_NONBLOCK);
  }
}

void RankProcess::sendControl(const std::string& line) {
  if (controlFd_ < 0) return;
  std::string text = line + "\n";
  // A few bytes into an empty pipe: complete or nothing (EPIPE: the remote
  // side is gone; EAGAIN: it stopped reading, and closing will end it).
  ssize_t n;
  do {
    n = write(controlFd_, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
}

void RankProcess::closeControl() {
  if (controlFd_ >= 0) close(controlFd_);
  controlFd_ = -1;
}

int RankProcess::takeStdoutFd() {
  int fd = stdoutFd_;
  stdoutFd_ = -1;
  return fd;
}

int RankProcess::takeStderrFd() {
  int fd = stderrFd_;
  stderrFd_ = -1;
  return fd;
}

bool RankProcess::signalGroup(int sig) const {
  if (!started()) return false;
  return kill(-pid_, sig) == 0;
}

}  // namespace kolo::kolorun

#include "rank_process.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
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

// What the child of fork() needs, prepared by the parent.
struct ChildSetup {
  const char* executable = nullptr;
  char** argv = nullptr;
  char** envp = nullptr;
  int stdinFd = -1;  // -1: /dev/null
  int stdoutFd = -1;
  int stderrFd = -1;
  int errorFd = -1;  // CLOEXEC pipe: errno of a failed step before exec
  const sigset_t* mask = nullptr;
  pid_t parent = 0;
  const cpu_set_t* cpus = nullptr;  // nullptr: not bound
};

// errno stand-in for "sched_setaffinity refused the CPU list" (EINVAL from
// it would read as an exec failure).
constexpr int EKOLOBIND = 4096;

[[noreturn]] void childFail(int errorFd) {
  int e = errno;
  ssize_t ignored = write(errorFd, &e, sizeof e);
  (void)ignored;
  _exit(127);
}

// The child between fork and exec (async-signal-safe calls only):
//  1. its own process group (pgid = pid), so kolorun signals the rank and
//     what it starts together;
//  2. SIGKILL when kolorun dies (PR_SET_PDEATHSIG; it survives exec), then a
//     check that kolorun did not die before that was armed;
//  3. default dispositions for what kolorun handles or ignores, and the mask
//     kolorun had before blocking signals;
//  4. the CPU binding (--bind-to), inherited by every thread the rank starts;
//  5. stdin, stdout, stderr; every other descriptor of kolorun's closed
//     (store sockets, other ranks' pipes), except the error pipe, which
//     closes itself on exec.
[[noreturn]] void execChild(const ChildSetup& s) {
  setpgid(0, 0);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) childFail(s.errorFd);
  if (getppid() != s.parent) _exit(137);  // kolorun is already gone
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGTTOU, SIGTTIN}) {
    sigaction(sig, &dfl, nullptr);
  }
  sigprocmask(SIG_SETMASK, s.mask, nullptr);
  if (s.cpus != nullptr && sched_setaffinity(0, sizeof(cpu_set_t), s.cpus) != 0) {
    errno = errno == EINVAL ? EKOLOBIND : errno;
    childFail(s.errorFd);
  }
  int in = s.stdinFd >= 0 ? s.stdinFd : open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0 || dup2(in, STDIN_FILENO) < 0) childFail(s.errorFd);
  if (dup2(s.stdoutFd, STDOUT_FILENO) < 0) childFail(s.errorFd);
  if (dup2(s.stderrFd, STDERR_FILENO) < 0) childFail(s.errorFd);
  const unsigned first = STDERR_FILENO + 1;
  const unsigned err = static_cast<unsigned>(s.errorFd);
  if (err > first) close_range(first, err - 1, 0);
  close_range(err + 1, ~0U, 0);
  execve(s.executable, s.argv, s.envp);
  childFail(s.errorFd);
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
  PipePair execError;  // CLOEXEC: closes on a successful exec, else carries errno
  std::optional<PipePair> control;
  if (withControl) control.emplace();

  // Everything the child needs is prepared before fork: between fork and
  // exec only async-signal-safe calls are allowed (kolorun has threads).
  ChildSetup setup;
  setup.executable = executable.c_str();
  std::vector<char*> argv = cStrings(argv_);
  std::vector<char*> envp = cStrings(env_);
  setup.argv = argv.data();
  setup.envp = envp.data();
  setup.stdinFd = control ? control->fds[0] : -1;
  setup.stdoutFd = out.fds[1];
  setup.stderrFd = err.fds[1];
  setup.errorFd = execError.fds[1];
  setup.mask = &childMask;
  setup.parent = getpid();
  cpu_set_t cpuSet;
  if (!cpus_.empty()) {
    CPU_ZERO(&cpuSet);
    for (int cpu : cpus_) {
      if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpuSet);
    }
    setup.cpus = &cpuSet;
  }

  pid_t pid = fork();
  if (pid < 0) {
    throw LaunchError(
        "rank " + std::to_string(rank_) + ": cannot fork: " + std::strerror(errno), 1);
  }
  if (pid == 0) execChild(setup);  // never returns
  // The child does the same; done here too, the group exists as soon as
  // fork returns (kolorun signals it, the guard watches it). EACCES once
  // the child has exec'd: it did it itself then.
  setpgid(pid, pid);
  close(execError.fds[1]);
  execError.fds[1] = -1;
  int childErrno = 0;
  ssize_t n;
  do {
    n = read(execError.fds[0], &childErrno, sizeof childErrno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof childErrno)) {
    int status = 0;
    waitpid(pid, &status, 0);
    int rc = childErrno;
    if (rc == EKOLOBIND) {
      std::string list;
      for (int cpu : cpus_) list += (list.empty() ? "" : ",") + std::to_string(cpu);
      throw LaunchError("rank " + std::to_string(rank_) + ": cannot bind to CPUs " +
                            list + " (--bind-to)",
                        1);
    }
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

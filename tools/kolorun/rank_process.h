// One rank: a child process started with fork/exec in its own process
// group, killed by the kernel when kolorun dies (PR_SET_PDEATHSIG), stdout and stderr
// into pipes that kolorun reads. stdin is /dev/null, or for a remote rank (the ssh
// command that starts it) a control pipe: kolorun writes signal names there and closes it
// to end the rank (remote_launch.h).
//
// Contract
// - start() spawns the command or throws LaunchError (the command cannot be
//   executed: not found, not executable, ...); the message names it.
// - The rank is the leader of its own process group, so signalGroup() reaches
//   every process it started (unless one of them made its own group).
// - kolorun reaps children itself (waitpid in the Supervisor) and reports each
//   exit with markExited(); RankProcess never waits.
// - Not thread-safe; used from kolorun's single event-loop thread.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kolo::kolorun {

class LaunchError : public std::runtime_error {
 public:
  LaunchError(const std::string& message, int exitCode)
      : std::runtime_error(message), exitCode_(exitCode) {}
  // 127: command not found; 126: found but not executable; 1: other.
  int exitCode() const { return exitCode_; }

 private:
  int exitCode_;
};

// How a process ended, decoded from a waitpid status.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled

  static ExitStatus fromWaitStatus(int status);
  bool success() const { return !signaled && code == 0; }
  // The shell convention: code, or 128 + signal.
  int shellCode() const { return signaled ? 128 + signal : code; }
  // "exited with code 3" or "was killed by signal SIGKILL".
  std::string describe() const;
};

// "SIGKILL" for 9, "signal 64" when it has no name.
std::string signalName(int sig);

// The path execve() should run for `command`: itself when it contains '/',
// else the first executable match on PATH. Throws LaunchError (127 or 126).
std::string resolveExecutable(const std::string& command);

class RankProcess {
 public:
  RankProcess(int rank, std::vector<std::string> argv, std::vector<std::string> env);
  ~RankProcess();  // closes pipe ends still owned; never kills
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  // Starts `executable` (from resolveExecutable) with the stored argv/env.
  // childMask: the signal mask the child starts with (kolorun blocks some
  // signals for its signalfd; the child must not inherit that).
  // withControl: stdin is a pipe kept by kolorun (see sendControl).
  void start(const std::string& executable, const sigset_t& childMask,
             bool withControl = false);

  // CPUs the child binds itself to before exec (sched_setaffinity; every
  // thread it starts inherits them); empty (the default) = unbound. A CPU
  // the kernel refuses fails start() with a LaunchError naming the list.
  void setCpuBinding(std::vector<int> cpus) { cpus_ = std::move(cpus); }

  // Writes `line` and a newline to the control pipe (no-op without one or
  // when the reader is gone; never blocks).
  void sendControl(const std::string& line);
  // Closes the control pipe: the remote side ends the rank.
  void closeControl();
  bool hasControl() const { return controlFd_ >= 0; }

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  bool running() const { return started() && !exit_; }
  const std::optional<ExitStatus>& exitStatus() const { return exit_; }
  void markExited(ExitStatus status) { exit_ = status; }

  // Parent ends of the output pipes; ownership passes to the caller.
  int takeStdoutFd();
  int takeStderrFd();

  // kill(-pgid, sig): the rank and everything in its process group. Returns
  // false when no such group exists any more.
  bool signalGroup(int sig) const;

 private:
  int rank_;
  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  std::vector<int> cpus_;
  pid_t pid_ = -1;
  int stdoutFd_ = -1;
  int stderrFd_ = -1;
  int controlFd_ = -1;
  std::optional<ExitStatus> exit_;
};

}  // namespace kolo::kolorun

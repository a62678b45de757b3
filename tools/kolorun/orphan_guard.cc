#include "orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kolo::kolorun {
namespace {

enum Op : int32_t { kWatch = 1, kForget = 2, kRelease = 3 };

struct Record {
  int32_t op;
  int32_t group;
};
static_assert(sizeof(Record) == 8);

// The guard's table of groups (used in the forked child only: no
// allocation after fork).
pid_t gGroups[OrphanGuard::kMaxGroups];

void say(const char* text) {
  size_t n = 0;
  while (text[n] != '\0') ++n;
  ssize_t ignored = write(STDERR_FILENO, text, n);
  (void)ignored;
}

// The guard process (async-signal-safe calls only): reads records until
// a release (exit quietly) or end of file (kolorun is gone: kill every
// watched group).
[[noreturn]] void guardMain(int fd) {
  setpgid(0, 0);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
    sigaction(sig, &ignore, nullptr);
  }
  prctl(PR_SET_NAME, "kolorun-guard");
  // stdin and stdout to /dev/null; stderr stays kolorun's, for the one
  // line said when kolorun died. Nothing else of kolorun's stays open
  // (its store socket, the ranks' pipes).
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
  }
  const unsigned first = STDERR_FILENO + 1;
  const unsigned keep = static_cast<unsigned>(fd);
  if (keep > first) close_range(first, keep - 1, 0);
  close_range(keep + 1, ~0U, 0);

  int count = 0;
  char buffer[sizeof(Record)];
  size_t have = 0;
  while (true) {
    ssize_t n = read(fd, buffer + have, sizeof buffer - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file (or an error): kolorun is gone
    have += static_cast<size_t>(n);
    if (have < sizeof buffer) continue;
    have = 0;
    Record r;
    std::memcpy(&r, buffer, sizeof r);
    if (r.op == kRelease) _exit(0);
    if (r.op == kWatch && count < OrphanGuard::kMaxGroups && r.group > 1) {
      gGroups[count++] = r.group;
    } else if (r.op == kForget) {
      for (int i = 0; i < count; ++i) {
        if (gGroups[i] == r.group) {
          gGroups[i] = gGroups[--count];
          break;
        }
      }
    }
  }
  int killed = 0;
  for (int i = 0; i < count; ++i) {
    if (kill(-gGroups[i], SIGKILL) == 0) ++killed;
  }
  if (killed > 0) {
    say("kolorun: the launcher died; its guard killed what was left of the ranks "
        "(every process of their process groups)\n");
  }
  _exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::runtime_error(std::string("cannot create the ranks' guard: socketpair: ") +
                             std::strerror(errno));
  }
  // Above stderr: the guard makes 0 and 1 /dev/null (kolorun may have been
  // started with a standard descriptor closed, which socketpair reuses).
  for (int& fd : fds) {
    if (fd > STDERR_FILENO) continue;
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(fd);
    fd = moved;
  }
  if (fds[0] < 0 || fds[1] < 0) {
    int e = errno;
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
    throw std::runtime_error(std::string("cannot create the ranks' guard: fcntl: ") +
                             std::strerror(e));
  }
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("cannot create the ranks' guard: fork: ") +
                             std::strerror(e));
  }
  if (pid == 0) {
    close(fds[0]);
    guardMain(fds[1]);  // never returns
  }
  close(fds[1]);
  pid_ = pid;
  fd_ = fds[0];
}

OrphanGuard::~OrphanGuard() {
  release();
  if (pid_ > 0) {
    int status = 0;
    // ECHILD when the supervisor reaped it already.
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void OrphanGuard::send(int op, pid_t group) {
  if (fd_ < 0) return;
  Record r{op, static_cast<int32_t>(group)};
  ssize_t n;
  // 8 bytes into a socket the guard keeps reading: complete or failed
  // (EPIPE: the guard is gone, nothing to tell).
  do {
    n = ::send(fd_, &r, sizeof r, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
}

void OrphanGuard::watch(pid_t group) {
  if (group <= 1 || !watched_.insert(group).second) return;
  send(kWatch, group);
}

void OrphanGuard::forgetEnded() {
  for (auto it = watched_.begin(); it != watched_.end();) {
    if (kill(-*it, 0) != 0 && errno == ESRCH) {
      send(kForget, *it);
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
}

void OrphanGuard::release() {
  if (fd_ < 0) return;
  send(kRelease, 0);
  close(fd_);
  fd_ = -1;
}

}  // namespace kolo::kolorun

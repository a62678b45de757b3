// The ranks' guard: a small process forked by kolorun that SIGKILLs every
// rank's process group when kolorun dies, however it dies (SIGKILL and
// crashes included, which kolorun cannot act on).
//
// Why: PR_SET_PDEATHSIG (rank_process.h) reaches only a rank's own process.
// A rank started through a shell (`sh -c 'cd dir && ./train'`) is the shell;
// what the shell starts lives on with parent 1 when the shell is killed. All
// of it is still in the rank's process group, which the guard kills.
//
// Algorithm
// - kolorun and the guard share a socket pair. kolorun sends fixed 8-byte
//   records: watch(group) when a rank starts, forget(group) once the group
//   is empty, release() when kolorun ends normally (it has ended the groups
//   itself then).
// - The guard only reads. End of file without a release means kolorun is
//   gone: the guard sends SIGKILL to every group it watches, says so on
//   kolorun's stderr, and exits. After a release it exits quietly.
// - The guard is in a process group of its own and ignores the terminal's
//   and job control's signals, so a signal aimed at kolorun's group
//   (Ctrl-C, a batch system's kill of the group) leaves it there to clean
//   up; kolorun handles those signals itself.
// - A group is forgotten only once kill(-group, 0) says it no longer
//   exists, so its number is never signalled after the kernel could hand it
//   to someone else (a process group's id stays allocated while any member
//   lives).
//
// Contract
// - Construct before kolorun starts other threads (the guard runs in the
//   forked child; it uses only async-signal-safe calls and a fixed table
//   either way, of kMaxGroups entries; groups beyond it are not guarded).
// - kolorun reaps the guard like any child (Supervisor::reap ignores pids
//   that are not ranks); the destructor releases it and reaps it if still
//   there.
// - Not thread-safe; used from kolorun's single event-loop thread.
#pragma once

#include <sys/types.h>

#include <set>

namespace kolo::kolorun {

class OrphanGuard {
 public:
  static constexpr int kMaxGroups = 65536;

  OrphanGuard();   // forks the guard; throws std::runtime_error
  ~OrphanGuard();  // release(), then reaps the guard
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // The guard kills `group` (kill(-group, SIGKILL)) if kolorun dies.
  void watch(pid_t group);
  // Forgets every watched group that no longer exists.
  void forgetEnded();
  // kolorun ends normally: the guard exits without killing anything.
  void release();

  pid_t pid() const { return pid_; }
  const std::set<pid_t>& watched() const { return watched_; }

 private:
  void send(int op, pid_t group);

  pid_t pid_ = -1;
  int fd_ = -1;
  std::set<pid_t> watched_;
};

}  // namespace kolo::kolorun

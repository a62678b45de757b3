#include "supervisor.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include "common/rank_text.h"
#include "host_probe.h"
#include "kolo/error.h"
#include "placement.h"
#include "remote_launch.h"
#include "rendezvous/tcp_store.h"

extern char** environ;

namespace kolo::kolorun {
namespace {

constexpr int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};

std::vector<std::string> currentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

// Sets NAME=VALUE in `env`, replacing an inherited entry of that name.
void setEntry(std::vector<std::string>& env, const std::string& name,
              const std::string& value) {
  for (auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 &&
        e[name.size()] == '=') {
      e = name + "=" + value;
      return;
    }
  }
  env.push_back(name + "=" + value);
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

SignalChannel::SignalChannel() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : kHandledSignals) sigaddset(&mask, sig);
  if (pthread_sigmask(SIG_BLOCK, &mask, &originalMask_) != 0) {
    throw std::runtime_error("cannot block signals");
  }
  fd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) {
    throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
  }
  // A closed stdout (kolorun ... | head) must not kill kolorun: writes fail
  // with EPIPE instead and the multiplexer stops writing there.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &oldPipeAction_);
}

SignalChannel::~SignalChannel() {
  if (fd_ >= 0) close(fd_);
  sigaction(SIGPIPE, &oldPipeAction_, nullptr);
  pthread_sigmask(SIG_SETMASK, &originalMask_, nullptr);
}

std::vector<int> SignalChannel::drain() {
  std::vector<int> out;
  signalfd_siginfo info;
  while (true) {
    ssize_t n = read(fd_, &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) {
      out.push_back(static_cast<int>(info.ssi_signo));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EAGAIN: nothing more
  }
  return out;
}

Supervisor::Supervisor(LaunchOptions options, OutputMultiplexer& output)
    : options_(std::move(options)), output_(output) {}

Supervisor::~Supervisor() {
  for (auto& rank : ranks_) {
    if (rank->running()) {
      rank->signalGroup(SIGKILL);
      int status = 0;
      waitpid(rank->pid(), &status, 0);
    }
  }
}

int Supervisor::run() {
  if (launch()) loop();
  // The job is over: whatever a rank left behind in its process group
  // (background grandchildren) is ended too, and reaped (kolorun is their
  // subreaper).
  for (auto& rank : ranks_) {
    rank->closeControl();
    rank->signalGroup(SIGKILL);
  }
  reap();
  output_.closeAll();
  report();
  return exitCode();
}

// The launch, in order: where each rank runs, the rendezvous store, the
// remote hosts answering, enough descriptors, the store address per host,
// then the ranks themselves. A failed step notes why, sets the exit code and
// returns false (nothing started yet, or the started ranks are ended).
bool Supervisor::launch() {
  if (!options_.elastic.discoveryScript.empty() && !discoverInitialHosts()) return false;
  const std::vector<Placement> placements = planPlacement(options_);
  if (!planServers(placements)) return false;
  const bool anyRemote = classifyHosts(placements);
  JobIdentity job;
  job.jobId = makeJobId();
  job.networkInterface = options_.networkInterface;
  // Discovered hosts may come from anywhere: the store then listens on
  // every interface, as with remote hosts.
  if (!startStore(anyRemote || discovery_ != nullptr, job) ||
      (anyRemote && !probeRemoteHosts())) {
    return false;
  }
  raiseDescriptorLimit();
  // Orphaned grandchildren become kolorun's children, so they are reaped
  // (and are still in their rank's process group when the job is ended).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (options_.elastic.enabled && !startElasticDriver(job)) return false;
  std::map<std::string, std::string> rendezvousOf;
  if (!rendezvousAddresses(placements, job, rendezvousOf)) return false;
  startRanks(placements, job, rendezvousOf);
  if (options_.timeoutSeconds > 0) {
    jobDeadline_ = Clock::now() + seconds(options_.timeoutSeconds);
  }
  return true;
}

bool Supervisor::failLaunch(const std::string& why, int exitCode) {
  output_.note(why);
  reason_ = EndReason::kLaunchFailed;
  launchExitCode_ = exitCode;
  return false;
}

bool Supervisor::classifyHosts(const std::vector<Placement>& placements) {
  bool anyRemote = false;
  for (const Placement& p : placements) {
    if (p.host.empty() || hostIsRemote_.count(p.host) != 0) continue;
    hostIsRemote_[p.host] = !isLocalHost(p.host);
    anyRemote |= hostIsRemote_[p.host];
  }
  for (const Placement& p : placements) {
    hostOf_.push_back(p.host);
    remote_.push_back(!p.host.empty() && hostIsRemote_[p.host]);
  }
  return anyRemote;
}

bool Supervisor::startStore(bool anyRemote, JobIdentity& job) {
  try {
    job.secret = ensureJobSecret();
    store_ = rendezvous::TcpStoreServer::start(anyRemote ? "0.0.0.0" : "127.0.0.1", 0,
                                               job.secret);
  } catch (const std::exception& e) {
    return failLaunch(std::string("cannot start the rendezvous store: ") + e.what(), 1);
  }
  return true;
}

bool Supervisor::probeRemoteHosts() {
  std::vector<std::string> remoteHosts;
  for (const auto& [host, remote] : hostIsRemote_) {
    if (remote) remoteHosts.push_back(host);
  }
  try {
    sshWords_ = splitCommandWords(options_.sshCommand);
    if (options_.verbose) {
      output_.note("probing " + std::to_string(remoteHosts.size()) +
                   " remote host(s) with '" + options_.sshCommand + "'");
    }
    auto failures = probeHosts(sshWords_, remoteHosts,
                               std::chrono::milliseconds(static_cast<int64_t>(
                                   options_.startTimeoutSeconds * 1000)));
    for (const auto& f : failures) {
      output_.note("cannot reach host " + f.host + " with '" + options_.sshCommand +
                   "': " + f.reason);
    }
    if (!failures.empty()) {
      reason_ = EndReason::kLaunchFailed;
      launchExitCode_ = 1;
      return false;
    }
  } catch (const std::exception& e) {
    return failLaunch(e.what(), 127);
  }
  return true;
}

void Supervisor::raiseDescriptorLimit() {
  // Two pipes per rank (three for a remote one): when the soft descriptor
  // limit is too low for them, raise it (towards the hard limit); the ranks
  // inherit the raised limit.
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    const rlim_t needed = 3 * static_cast<rlim_t>(options_.numRanks) + 64;
    if (limit.rlim_cur < needed && limit.rlim_cur < limit.rlim_max) {
      limit.rlim_cur = std::min(needed, limit.rlim_max);
      setrlimit(RLIMIT_NOFILE, &limit);
    }
  }
}

bool Supervisor::rendezvousAddresses(const std::vector<Placement>& placements,
                                     const JobIdentity& job,
                                     std::map<std::string, std::string>& rendezvousOf) {
  // Each host is told the store's address as routed towards it.
  const std::string port = std::to_string(store_->port());
  for (const Placement& p : placements) {
    if (rendezvousOf.count(p.host) != 0) continue;
    try {
      std::string address = p.host.empty() || !hostIsRemote_[p.host]
                                ? "127.0.0.1"
                                : addressTowards(p.host, options_.networkInterface);
      rendezvousOf[p.host] = "tcp://" + address + ":" + port;
    } catch (const std::exception& e) {
      return failLaunch(e.what(), 1);
    }
    if (options_.verbose) {
      output_.note("job " + job.jobId + ": host " + (p.host.empty() ? "(this)" : p.host) +
                   " uses rendezvous " + rendezvousOf[p.host]);
    }
  }
  return true;
}

void Supervisor::startRanks(const std::vector<Placement>& placements, JobIdentity job,
                            const std::map<std::string, std::string>& rendezvousOf) {
  exitTimes_.assign(placements.size(), std::nullopt);
  job_ = job;  // for workers started later (elastic host discovery)
  rendezvousOf_ = rendezvousOf;
  LaunchContext& context = context_;
  context.base = currentEnvironment();
  for (const auto& e : context.base) {
    if (isForwarded(e)) context.forwarded.push_back(e);
  }
  char cwdBuffer[4096];
  context.cwd = getcwd(cwdBuffer, sizeof cwdBuffer) != nullptr ? cwdBuffer : ".";
  for (const Placement& p : placements) {
    job.rendezvous = rendezvousOf.at(p.host);
    if (!startRank(p, job, context)) break;
  }
}

bool Supervisor::startRank(const Placement& p, const JobIdentity& job,
                           LaunchContext& context) {
  const bool remote = remote_[p.rank];
  std::unique_ptr<RankProcess> rank;
  try {
    std::string executable;
    if (remote) {
      if (context.sshExecutable.empty()) {
        context.sshExecutable = resolveExecutable(sshWords_.front());
      }
      executable = context.sshExecutable;
      auto env = rankEnvironment(context.forwarded, options_.exports, p, job);
      bindRank(p, true, context, env);
      rank = std::make_unique<RankProcess>(
          p.rank,
          sshArgv(sshWords_, p.host,
                  remoteCommandLine(context.cwd, env, options_.command)),
          context.base);
    } else {
      if (context.localExecutable.empty()) {
        context.localExecutable = resolveExecutable(options_.command.front());
      }
      executable = context.localExecutable;
      auto env = rankEnvironment(context.base, options_.exports, p, job);
      auto cpus = bindRank(p, false, context, env);
      rank = std::make_unique<RankProcess>(p.rank, options_.command, std::move(env));
      rank->setCpuBinding(std::move(cpus));
    }
    rank->start(executable, signals_.originalMask(), remote);
    guard_.watch(rank->pid());
    if (remote) rank->sendControl(job.secret);  // read first by the wrapper
  } catch (const LaunchError& e) {
    output_.note(remote ? "--ssh-command: " + std::string(e.what()) : e.what());
    launchExitCode_ = e.exitCode();
    abortJob(EndReason::kLaunchFailed, SIGTERM);
    return false;
  }
  if (options_.verbose && !p.host.empty()) {
    output_.setLabel(p.rank, p.host + ":" + std::to_string(p.rank));
  }
  output_.addStream(p.rank, StreamKind::kStdout, rank->takeStdoutFd());
  output_.addStream(p.rank, StreamKind::kStderr, rank->takeStderrFd());
  if (options_.verbose) {
    output_.note(rankName(p.rank) + " started, pid " + std::to_string(rank->pid()) +
                 (remote ? " (" + sshWords_.front() + ")" : ""));
  }
  ranks_.push_back(std::move(rank));
  return true;
}

std::vector<int> Supervisor::bindRank(const Placement& p, bool remote,
                                      LaunchContext& context,
                                      std::vector<std::string>& env) {
  if (options_.bindTo == BindTo::kNone) return {};
  setEntry(env, "KOLO_BIND_TO", bindToName(options_.bindTo));
  if (remote) return {};  // the remote wrapper binds it (remote_launch.h)
  if (!context.topology) context.topology = readCpuTopology();
  bool wrapped = false;
  auto cpus =
      cpusForRank(options_.bindTo, p.localRank, p.localSize, *context.topology, &wrapped);
  if (cpus.empty()) return cpus;
  const std::string list = formatCpuList(cpus);
  setEntry(env, "KOLO_CPU_BINDING", list);
  if (options_.verbose) {
    if (wrapped && !context.wrapNoted) {
      context.wrapNoted = true;
      output_.note("--bind-to core: " + std::to_string(p.localSize) +
                   " ranks on this host share its " +
                   std::to_string(context.topology->cpus.size()) +
                   " CPUs: one CPU each, round-robin");
    }
    output_.note(rankName(p.rank) + " bound to CPUs " + list);
  }
  return cpus;
}

std::string Supervisor::rankName(int rank, int64_t pid) const {
  return rankText(rank, hostOf_[rank], pid);
}

void Supervisor::signalRank(RankProcess& rank, int sig) {
  if (!remote_[rank.rank()]) {
    rank.signalGroup(sig);
    return;
  }
  if (sig == SIGKILL) {
    rank.closeControl();
    rank.signalGroup(SIGKILL);
  } else {
    rank.sendControl(remoteSignalName(sig));
  }
}

void Supervisor::loop() {
  std::vector<pollfd> fds;
  while (true) {
    closeLingeringPipes();
    if (allExited() && !output_.anyOpen()) break;

    // The nearest deadline bounds the wait.
    const std::optional<Clock::time_point> next = nextDeadline();
    int timeoutMs = -1;
    if (next) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now());
      timeoutMs = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60'000));
    }

    fds.clear();
    fds.push_back({signals_.fd(), POLLIN, 0});
    for (int fd : output_.openFds()) fds.push_back({fd, POLLIN, 0});
    int n = poll(fds.data(), fds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) {
      output_.note(std::string("poll failed: ") + std::strerror(errno));
      abortJob(EndReason::kSignal, SIGKILL);
      break;
    }
    if (n > 0) {
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) output_.readAvailable(fds[i].fd);
      }
      if (fds[0].revents != 0) {
        for (int sig : signals_.drain()) {
          if (sig == SIGCHLD) {
            reap();
          } else {
            onSignal(sig);
          }
        }
      }
    }

    const auto now = Clock::now();
    if (reason_ == EndReason::kNone && jobDeadline_ && now >= *jobDeadline_) {
      abortJob(EndReason::kTimeout, SIGTERM);
    }
    if (!killed_ && killDeadline_ && now >= *killDeadline_) escalate();
    checkServersWindow(now);
    if (elastic_ && reason_ == EndReason::kNone) pollElastic();
    if (discovery_ && reason_ == EndReason::kNone && now >= nextDiscovery_)
      refreshHosts(now);
  }
}

std::optional<Supervisor::Clock::time_point> Supervisor::nextDeadline() const {
  std::optional<Clock::time_point> next;
  auto consider = [&next](const std::optional<Clock::time_point>& t) {
    if (t && (!next || *t < *next)) next = t;
  };
  if (!killed_) consider(killDeadline_);
  if (elastic_ && reason_ == EndReason::kNone) consider(elastic_->nextDeadline());
  if (reason_ == EndReason::kNone) {
    consider(jobDeadline_);
    consider(serversDeadline_);
  }
  for (size_t r = 0; r < exitTimes_.size(); ++r) {
    if (exitTimes_[r] && output_.rankOpen(static_cast<int>(r))) {
      consider(*exitTimes_[r] + seconds(kDrainSeconds));
    }
  }
  return next;
}

void Supervisor::reap() {
  while (true) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;  // 0: none ready; -1: no children left
    RankProcess* rank = findRank(pid);
    if (rank == nullptr) continue;
    ExitStatus exit = ExitStatus::fromWaitStatus(status);
    rank->markExited(exit);
    exitTimes_[rank->rank()] = Clock::now();
    if (remote_[rank->rank()]) rank->closeControl();
    onRankExit(*rank, exit);
  }
  guard_.forgetEnded();
}

// The first failure ends a job; in an elastic job the others go on without
// the failed rank (the elastic driver forms their next world); with
// parameter servers, a failed worker is left to the servers; inside a
// kolo.hpo study, a failed rank other than 0 to the study (server_job.h).
void Supervisor::onRankExit(RankProcess& rank, const ExitStatus& exit) {
  const int r = rank.rank();
  if (elastic_ && reason_ == EndReason::kNone) {
    elastic_->workerExited(r, exit.success());
    if (exit.success()) {
      anySucceeded_ = true;
    } else {
      lastFailedRank_ = r;
      output_.note("elastic: " + rankName(r, rank.pid()) + " " + exit.describe() +
                   "; the job goes on with " + std::to_string(elastic_->liveWorkers()) +
                   " worker(s)");
      blacklistHostOf(r);
      return;
    }
  }
  ServerJob::Verdict verdict;
  if (reason_ == EndReason::kNone) {
    const bool inStudy =
        serverJob_.wantsDeclaration(r, exit.success()) && declaredStudy(r);
    verdict = serverJob_.onExit(r, exit.success(), inStudy);
  }
  if (verdict.workerLost) {
    noteLostWorker(rank);
  } else if (options_.verbose && !verdict.endJob) {
    output_.note(rankName(r, rank.pid()) + " " + exit.describe());
  }
  if (verdict.endJob) {
    if (verdict.workerLost) output_.note("every worker has failed; ending the job");
    // report() describes the failing rank's exit, once, at the end.
    failedRank_ = verdict.failedRank;
    abortJob(EndReason::kRankFailed, SIGTERM);
  } else if (verdict.workersGone) {
    openServersWindow();
  }
}

void Supervisor::onSignal(int sig) {
  if (reason_ != EndReason::kNone) {
    // Already ending (an earlier interrupt, a failed rank, the timeout):
    // no more patience, SIGKILL what is left.
    output_.note("received " + signalName(sig) + " again, killing the ranks");
    escalate();
    return;
  }
  receivedSignal_ = sig;
  output_.note("received " + signalName(sig) + ", ending the ranks");
  abortJob(EndReason::kSignal, sig);
}

void Supervisor::abortJob(EndReason reason, int sig) {
  if (reason_ != EndReason::kNone) return;
  reason_ = reason;
  if (reason == EndReason::kTimeout) {
    std::ostringstream os;
    os << "the job exceeded --timeout " << options_.timeoutSeconds
       << " s, ending the ranks";
    output_.note(os.str());
  }
  for (auto& rank : ranks_) {
    if (rank->running()) signalRank(*rank, sig);
  }
  killDeadline_ = Clock::now() + seconds(kGraceSeconds);
}

void Supervisor::escalate() {
  killed_ = true;
  for (auto& rank : ranks_) {
    if (rank->running()) {
      if (options_.verbose) {
        output_.note(rankName(rank->rank(), rank->pid()) +
                     " still running, sending SIGKILL");
      }
      signalRank(*rank, SIGKILL);
    }
  }
}

void Supervisor::closeLingeringPipes() {
  const auto now = Clock::now();
  for (size_t r = 0; r < exitTimes_.size(); ++r) {
    const auto& t = exitTimes_[r];
    if (t && now >= *t + seconds(kDrainSeconds) &&
        output_.rankOpen(static_cast<int>(r))) {
      if (options_.verbose) {
        output_.note("rank " + std::to_string(r) +
                     " exited but something it started still holds its output; "
                     "no longer reading it");
      }
      output_.closeRank(static_cast<int>(r));
    }
  }
}

bool Supervisor::allExited() const {
  return std::none_of(ranks_.begin(), ranks_.end(),
                      [](const auto& rank) { return rank->running(); });
}

RankProcess* Supervisor::findRank(pid_t pid) {
  for (auto& rank : ranks_) {
    if (rank->pid() == pid) return rank.get();
  }
  return nullptr;
}

int Supervisor::exitCode() const {
  switch (reason_) {
    case EndReason::kNone:
      // An elastic job that lost every worker failed with the last of them.
      if (elastic_ && !anySucceeded_ && lastFailedRank_ >= 0) {
        return ranks_[lastFailedRank_]->exitStatus()->shellCode();
      }
      return 0;
    case EndReason::kElastic:
    case EndReason::kServersStuck: return 1;
    case EndReason::kRankFailed: return ranks_[failedRank_]->exitStatus()->shellCode();
    case EndReason::kSignal:
      return 128 + (receivedSignal_ != 0 ? receivedSignal_ : SIGKILL);
    case EndReason::kTimeout: return 124;
    case EndReason::kLaunchFailed: return launchExitCode_ != 0 ? launchExitCode_ : 1;
  }
  return 1;
}

std::string Supervisor::describeExit(const RankProcess& rank) const {
  const ExitStatus& s = *rank.exitStatus();
  std::string how = s.describe();
  if (remote_[rank.rank()]) {
    // The status came through the ssh command: the remote shell reports a
    // rank killed by a signal as 128 + signal; ssh itself fails with 255.
    if (!s.signaled && s.code > 128 && s.code < 128 + 65) {
      how += " (killed by " + signalName(s.code - 128) + " on its host)";
    } else if (!s.signaled && s.code == 255) {
      how += " (255: the ssh command lost the host, or the rank exited 255)";
    }
  }
  return how;
}

void Supervisor::report() {
  reportFailedRank();
  reportLostWorkers();
}

void Supervisor::reportFailedRank() {
  if (reason_ != EndReason::kRankFailed) return;
  const RankProcess& rank = *ranks_[failedRank_];
  output_.note(rankName(rank.rank(), rank.pid()) + " " + describeExit(rank));
  auto lines = output_.tail(rank.rank());
  if (lines.empty()) {
    output_.note("rank " + std::to_string(rank.rank()) + " printed nothing");
    return;
  }
  output_.note("last lines of rank " + std::to_string(rank.rank()) + ":");
  for (const auto& line : lines) {
    output_.note("  [" + std::to_string(rank.rank()) + "] " + line);
  }
}

}  // namespace kolo::kolorun

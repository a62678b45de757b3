// The supervisor: hosts the rendezvous store, starts the ranks, relays their
// output and decides how the job ends.
//
// Launch: ranks placed on this host are spawned directly; ranks on another
// host through the ssh command (remote_launch.h), after every remote host
// has answered a probe (host_probe.h). With remote hosts the store listens
// on every interface and each rank is told the address routed towards its
// host.
//
// Algorithm (one thread, one poll() loop over a signalfd and the ranks' pipes)
// - SIGCHLD: reap every exited child. The first rank that exits non-zero or
//   by a signal is the job's failure: every other rank's process group gets
//   SIGTERM, and SIGKILL after kGraceSeconds if it is still there. A remote
//   rank gets the signal's name on its control pipe instead, and at the
//   SIGKILL step its control pipe is closed (the remote side kills its
//   process group) and the local ssh process group is killed.
// - A rank other than 0 that fails inside a kolo.hpo study (it declared one
//   in the store, rendezvous/study_declaration.h; or --hpo) is noted and the
//   job goes on: its team's trial fails (server_job.h).
// - With parameter servers (server_job.h): a failed worker is noted and the
//   job goes on, the servers deciding whether training does; the job fails
//   when a server fails or when every worker has exited and none exited 0.
//   Once every worker has exited, a server still running 2 x KOLO_TIMEOUT +
//   5 s later is stuck: the job is ended (exit 1). At the end, the workers
//   lost on the way are listed.
// - SIGINT/SIGTERM/SIGHUP/SIGQUIT to kolorun: forwarded to every rank's
//   process group, SIGKILL after the grace period (at once when a signal
//   arrives while the job is already ending); kolorun then exits 128+signal.
// - --timeout: when the job outlives it, it is ended the same way; exit 124.
// - After a rank exits, its pipes are read to end-of-file; if something it
//   left behind keeps them open longer than kDrainSeconds they are closed.
// - kolorun killed (SIGKILL included): each rank's own process gets SIGKILL
//   from the kernel (PR_SET_PDEATHSIG), and the guard (orphan_guard.h) kills
//   every process of each rank's group, what a shell started included.
// - When every rank has exited and its output is drained, whatever the ranks
//   left running in their process groups gets SIGKILL; kolorun prints the
//   failure (rank, pid, code or signal, its last lines) and returns the exit
//   code: 0, the failing rank's code (128+signal for a signal), 124,
//   128+signal, or 1 (stuck servers).
//
// Contract: construct once per job on the main thread, before any other
// thread exists (the constructor blocks the handled signals for the whole
// process so that they arrive on the signalfd), then call run() once.
#pragma once

#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cpu_binding.h"
#include "elastic_driver.h"
#include "host_discovery.h"
#include "options.h"
#include "orphan_guard.h"
#include "output_multiplexer.h"
#include "placement.h"
#include "rank_process.h"
#include "server_job.h"

namespace kolo::rendezvous {
class Store;
class TcpStoreServer;
}  // namespace kolo::rendezvous

namespace kolo::kolorun {

// Blocks the signals kolorun handles and delivers them through a signalfd.
class SignalChannel {
 public:
  SignalChannel();   // throws std::runtime_error
  ~SignalChannel();  // restores the previous mask
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_; }
  // The mask from before, for children.
  const sigset_t& originalMask() const { return originalMask_; }
  // Signals received since the last call (non-blocking).
  std::vector<int> drain();

 private:
  int fd_ = -1;
  sigset_t originalMask_;
  struct sigaction oldPipeAction_;
};

class Supervisor {
 public:
  static constexpr double kGraceSeconds = 3.0;
  static constexpr double kDrainSeconds = 1.0;

  Supervisor(LaunchOptions options, OutputMultiplexer& output);
  ~Supervisor();  // ends any rank still running (SIGKILL to its group)

  // Runs the job to its end; returns kolorun's exit code.
  int run();

 private:
  using Clock = std::chrono::steady_clock;

  enum class EndReason {
    kNone,
    kRankFailed,
    kSignal,
    kTimeout,
    kLaunchFailed,
    kElastic,
    kServersStuck
  };

  // What starting each rank shares: the environment, the directory, the
  // resolved executables.
  struct LaunchContext {
    std::vector<std::string> base;       // kolorun's environment
    std::vector<std::string> forwarded;  // what a remote rank inherits
    std::string cwd;
    std::string localExecutable;
    std::string sshExecutable;
    std::optional<CpuTopology> topology;  // this host's, read at the first bound rank
    bool wrapNoted = false;               // -v said "round-robin" once
  };

  // --bind-to: KOLO_BIND_TO (and for a local rank KOLO_CPU_BINDING) in
  // `env`; the CPUs a local rank binds to (empty: none, or remote, where
  // the wrapper binds it).
  std::vector<int> bindRank(const Placement& p, bool remote, LaunchContext& context,
                            std::vector<std::string>& env);

  bool launch();
  bool failLaunch(const std::string& why, int exitCode);
  // Fills hostOf_, remote_, hostIsRemote_; true when any host is remote.
  bool classifyHosts(const std::vector<Placement>& placements);
  bool startStore(bool anyRemote, JobIdentity& job);
  bool probeRemoteHosts();
  void raiseDescriptorLimit();
  bool rendezvousAddresses(const std::vector<Placement>& placements,
                           const JobIdentity& job,
                           std::map<std::string, std::string>& rendezvousOf);
  void startRanks(const std::vector<Placement>& placements, JobIdentity job,
                  const std::map<std::string, std::string>& rendezvousOf);
  bool startRank(const Placement& p, const JobIdentity& job, LaunchContext& context);
  void signalRank(RankProcess& rank, int sig);
  // "rank 3 on host h (pid 1234)" (common/rank_text.h); pid 0: without.
  std::string rankName(int rank, int64_t pid = 0) const;
  void loop();
  std::optional<Clock::time_point> nextDeadline() const;
  void reap();
  void onRankExit(RankProcess& rank, const ExitStatus& exit);
  // The exit, and for a remote rank what its code means.
  std::string describeExit(const RankProcess& rank) const;
  // supervisor_servers.cc: jobs with parameter servers (server_job.h).
  bool planServers(const std::vector<Placement>& placements);
  void noteLostWorker(const RankProcess& rank);
  // Whether `rank` held a kolo.hpo study declaration (read from the store).
  bool declaredStudy(int rank);
  void openServersWindow();
  void checkServersWindow(Clock::time_point now);
  void reportLostWorkers();
  // supervisor_elastic.cc: the elastic driver and host discovery.
  bool startElasticDriver(JobIdentity& job);
  void pollElastic();
  bool discoverInitialHosts();
  void refreshHosts(Clock::time_point now);
  void startWorker(const std::string& host);
  void blacklistHostOf(int rank);
  int liveOn(const std::string& host) const;
  void onSignal(int sig);
  void abortJob(EndReason reason, int sig);
  void escalate();
  void closeLingeringPipes();
  bool allExited() const;
  int exitCode() const;
  void report();
  void reportFailedRank();
  RankProcess* findRank(pid_t pid);

  LaunchOptions options_;
  OutputMultiplexer& output_;
  SignalChannel signals_;
  OrphanGuard guard_;  // kills the ranks' process groups if kolorun dies
  std::unique_ptr<rendezvous::TcpStoreServer> store_;
  std::unique_ptr<rendezvous::Store> storeClient_;  // declarations; opened when needed
  std::unique_ptr<ElasticDriver> elastic_;          // elastic jobs only
  std::unique_ptr<HostDiscovery> discovery_;        // --host-discovery-script only
  Clock::time_point nextDiscovery_{};
  std::string lastDiscoveryError_;  // said once until it changes
  std::set<int> endedByDiscovery_;  // ranks of hosts the script no longer lists
  // What starting a rank later needs (workers of discovered hosts).
  JobIdentity job_;
  LaunchContext context_;
  std::map<std::string, std::string> rendezvousOf_;
  int lastFailedRank_ = -1;     // elastic: the last worker that failed
  ServerJob serverJob_{{}, 0};  // which ranks are servers; lost workers
  double serversWindowSeconds_ = 0;
  std::optional<Clock::time_point> serversDeadline_;  // every worker has exited
  bool anySucceeded_ = false;
  std::vector<std::unique_ptr<RankProcess>> ranks_;
  std::vector<std::string> hostOf_;           // per rank: host as listed, "" = no list
  std::vector<bool> remote_;                  // per rank: started through ssh
  std::map<std::string, bool> hostIsRemote_;  // per listed host
  std::vector<std::string> sshWords_;         // --ssh-command, split
  std::vector<std::optional<Clock::time_point>> exitTimes_;

  EndReason reason_ = EndReason::kNone;
  int launchExitCode_ = 0;
  int receivedSignal_ = 0;
  int failedRank_ = -1;
  std::optional<Clock::time_point> killDeadline_;  // SIGKILL what remains then
  std::optional<Clock::time_point> jobDeadline_;   // --timeout
  bool killed_ = false;
};

}  // namespace kolo::kolorun

// The MPI engine end to end: real `mpirun` jobs of kolo-mpi-ranks
// (tests/mpi/mpi_ranks.cc) with KOLO_TRANSPORT=mpi (every peer over the mpi
// transport) and auto (shm within a host, mpi between hosts), hosts forced
// on one machine through KOLO_HOST_ID per rank (OpenMPI's MPMD syntax), the
// hierarchical allreduce across them, the transport's own cases (pieces,
// tags, mismatches, abort), and MPI owned by the program. Skipped when kolo
// was built without MPI.
#include <gtest/gtest.h>
#include <kolo/communicator.h>
#include <kolo/config.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

namespace {

struct JobResult {
  int exitCode = -1;
  std::string output;  // stdout and stderr of mpirun and every rank
};

std::string binDir() {
  const char* d = std::getenv("KOLO_BIN_DIR");
  return d != nullptr ? d : "bin";
}

// Runs `mpirun ARGS` (at most `limitSeconds`) with `env` (NAME=VALUE ...)
// added to the environment; ARGS include -np.
JobResult mpirun(const std::string& env, const std::string& args,
                 int limitSeconds = 120) {
  // As root OpenMPI refuses to start without these; harmless otherwise.
  // Under ASan, OpenMPI's own leaks are suppressed (tests/sanitizers/); the
  // slow unwinder gives their stacks the frames the suppressions match.
  // rtc ^hwloc: an orted sometimes crashed in hwloc's shared-memory topology
  // write when several daemons start on one machine (the pretend hosts).
  std::string cmd =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
      "OMPI_MCA_mca_base_component_disable_dlclose=1 OMPI_MCA_rtc=^hwloc "
      "LSAN_OPTIONS=suppressions=" KOLO_LSAN_MPI_SUPPRESSIONS
      ":print_suppressions=0:fast_unwind_on_malloc=0 " +
      env + " timeout -k 5 " + std::to_string(limitSeconds) + " mpirun --oversubscribe " +
      args + " 2>&1";
  JobResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

int count(const std::string& text, const std::string& what) {
  int c = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++c;
  return c;
}

std::string ranks() {
  return binDir() + "/kolo-mpi-ranks";
}

class MpiEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!KOLO_HAVE_MPI) GTEST_SKIP() << "kolo was built without MPI";
  }
};

// Log lines of the communicator appear twice per rank: kolo-mpi-ranks
// builds a second communicator after the first.

// KOLO_TRANSPORT=mpi: every collective over the mpi transport.
TEST_F(MpiEngine, CollectivesOverMpiTransport) {
  for (int np : {2, 3, 4}) {
    SCOPED_TRACE("np " + std::to_string(np));
    JobResult r = mpirun("KOLO_TRANSPORT=mpi KOLO_LOG_LEVEL=info",
                         "-np " + std::to_string(np) + " " + ranks() + " collectives");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(count(r.output, "collectives ok"), np) << r.output;
    EXPECT_EQ(count(r.output, "transport mpi, engine mpi"), 2 * np) << r.output;
    EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
  }
}

// auto on one machine: one node, so shm carries everything; MPI found the
// ranks and the store (127.0.0.1).
TEST_F(MpiEngine, AutoOnOneNodeUsesShm) {
  JobResult r = mpirun("KOLO_TRANSPORT=auto KOLO_LOG_LEVEL=debug",
                       "-np 3 " + ranks() + " collectives");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "collectives ok"), 3) << r.output;
  EXPECT_EQ(count(r.output, "transport shm, engine mpi"), 6) << r.output;
  EXPECT_EQ(count(r.output, "rendezvous tcp://127.0.0.1:"), 6) << r.output;
  // The host id comes from MPI_Comm_split_type: one node led by rank 0.
  EXPECT_EQ(count(r.output, "host mpi-node-0 "), 3) << r.output;
}

// Two pretend hosts of two ranks: shm inside each, mpi between them, and
// the hierarchical allreduce over both.
TEST_F(MpiEngine, HierarchicalAcrossHostsOverMpi) {
  const std::string env = "KOLO_LOG_LEVEL=info KOLO_ALLREDUCE_ALGO=hier";
  const std::string app = "-np 2 env KOLO_HOST_ID=hostA " + ranks() +
                          " collectives : -np 2 env KOLO_HOST_ID=hostB " + ranks() +
                          " collectives";
  JobResult r = mpirun(env, app);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "collectives ok"), 4) << r.output;
  EXPECT_EQ(count(r.output, "transport shm+mpi, engine mpi"), 8) << r.output;
  EXPECT_EQ(count(r.output, "cross 0/2 host hostA algo4M hier"), 2) << r.output;
  EXPECT_EQ(count(r.output, "cross 1/2 host hostB algo4M hier"), 2) << r.output;
}

// Two MPI nodes on one machine: one OpenMPI daemon per named host (a launch
// agent that runs "remote" commands here). MPI_Comm_split_type groups the
// ranks by daemon although every rank has the same host name; the store is
// on rank 0's external address; hosts talk mpi (OpenMPI's tcp BTL: its
// shared-memory BTL assumes one daemon per machine, so it is left out).
TEST_F(MpiEngine, TwoDaemonsAreTwoHosts) {
  const std::string common = "--mca btl self,tcp --mca plm_rsh_agent " + binDir() +
                             "/kolo-local-rsh -H nodea:2,nodeb:2 -np 4 " + ranks() +
                             " collectives";
  for (const char* algo : {"", "hier"}) {
    SCOPED_TRACE(std::string("KOLO_ALLREDUCE_ALGO=") + algo);
    JobResult r =
        mpirun(std::string("KOLO_LOG_LEVEL=debug KOLO_ALLREDUCE_ALGO=") + algo, common);
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(count(r.output, "collectives ok"), 4) << r.output;
    EXPECT_EQ(count(r.output, "transport shm+mpi, engine mpi"), 8) << r.output;
    EXPECT_EQ(count(r.output, "(2 nodes)"), 8) << r.output;
    EXPECT_EQ(count(r.output, "cross 0/2 host mpi-node-0 "), 2) << r.output;
    EXPECT_EQ(count(r.output, "cross 1/2 host mpi-node-2 "), 2) << r.output;
    if (std::string(algo) == "hier") {
      EXPECT_EQ(count(r.output, "algo4M hier"), 4) << r.output;
    } else {  // the scale model's choice: any algorithm, the same on every rank
      EXPECT_EQ(count(r.output, "algo4M "), 4) << r.output;
      const size_t at = r.output.find("algo4M ");
      const std::string line = at == std::string::npos
                                   ? ""
                                   : r.output.substr(at, r.output.find('\n', at) - at);
      EXPECT_EQ(count(r.output, line + "\n"), 4) << r.output;
    }
    EXPECT_EQ(count(r.output, "rendezvous tcp://127.0.0.1:"), 0) << r.output;
  }
}

// Teams under the MPI engine: no MPI communicator per team, so a team's
// links are shm within a host and tcp between hosts, whatever
// KOLO_TRANSPORT says; they run beside the world communicator's traffic.
TEST_F(MpiEngine, TeamsUseShmAndTcp) {
  // Teams {0,2} and {1,3} each span the pretend hosts {0,1} and {2,3}.
  const std::string app = "-np 2 env KOLO_HOST_ID=hostA " + ranks() +
                          " teams : -np 2 env KOLO_HOST_ID=hostB " + ranks() + " teams";
  JobResult r = mpirun("KOLO_LOG_LEVEL=info", app);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "teams ok"), 4) << r.output;
  EXPECT_EQ(count(r.output, "transport shm+mpi, engine mpi"), 4) << r.output;
  EXPECT_EQ(count(r.output, "transport tcp, team 'world/g1/split/team/"), 4) << r.output;
  // KOLO_TRANSPORT=mpi on one host: the teams use shm.
  r = mpirun("KOLO_TRANSPORT=mpi KOLO_LOG_LEVEL=info", "-np 4 " + ranks() + " teams");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "teams ok"), 4) << r.output;
  EXPECT_EQ(count(r.output, "transport mpi, engine mpi"), 4) << r.output;
  EXPECT_EQ(count(r.output, "transport shm, team 'world/g1/split/team/"), 4) << r.output;
}

// Uneven pretend hosts (2 + 1) and the selection table (no forced
// algorithm); and KOLO_TRANSPORT=tcp still works under the MPI engine.
TEST_F(MpiEngine, UnevenHostsAndTcpUnderMpiEngine) {
  const std::string app = "-np 2 env KOLO_HOST_ID=hostA " + ranks() +
                          " collectives : -np 1 env KOLO_HOST_ID=hostB " + ranks() +
                          " collectives";
  JobResult r = mpirun("KOLO_LOG_LEVEL=info", app);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "collectives ok"), 3) << r.output;
  EXPECT_EQ(count(r.output, "transport shm+mpi, engine mpi"), 4) << r.output;
  EXPECT_EQ(count(r.output, "transport mpi, engine mpi"), 2) << r.output;

  r = mpirun("KOLO_TRANSPORT=tcp KOLO_LOG_LEVEL=info",
             "-np 2 " + ranks() + " collectives");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "collectives ok"), 2) << r.output;
  EXPECT_EQ(count(r.output, "transport tcp, engine mpi"), 4) << r.output;
}

// The transport itself: multi-piece messages, tags, mismatches, abort.
TEST_F(MpiEngine, TransportCases) {
  for (int np : {2, 3}) {
    SCOPED_TRACE("np " + std::to_string(np));
    JobResult r = mpirun("", "-np " + std::to_string(np) + " " + ranks() + " transport");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(count(r.output, "transport ok"), np) << r.output;
    EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
  }
}

// A program that initialized MPI itself keeps it: kolo runs on it and
// leaves it initialized; the program's MPI_Finalize is the only one.
TEST_F(MpiEngine, ProgramOwnsMpi) {
  JobResult r = mpirun("KOLO_TRANSPORT=mpi", "-np 2 " + ranks() + " own-init");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "own-init ok"), 2) << r.output;
  EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
}

// kolo owns MPI and the program never calls kolo_finalize: at exit every
// rank's communicator runs its closing step (the exit goodbye) while MPI
// still works, then MPI is finalized; nothing hangs or crashes, no closing
// step meets a finalized MPI, and every rank exits 0.
TEST_F(MpiEngine, ExitWithoutKoloFinalize) {
  JobResult r = mpirun("KOLO_TRANSPORT=mpi", "-np 3 " + ranks() + " no-finalize");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "no-finalize ok"), 3) << r.output;
  EXPECT_EQ(count(r.output, "cannot use MPI after MPI_Finalize"), 0) << r.output;
}

// A rank that goes silent: every other rank fails within KOLO_TIMEOUT (5 s
// here, long enough that a rank that is itself waiting keeps heartbeating
// on a loaded machine under the sanitizers; 20 s allowed) naming it (the
// ranks next to it by their own timeout, the rest through the abort notice:
// heartbeats, and over shm the pulse, keep them from blaming a rank that is
// itself waiting), and the job ends instead of hanging in MPI_Finalize. Over
// the mpi transport alone, and across two MPI nodes (shm+mpi).
TEST_F(MpiEngine, SilentRankIsNamedWithinTimeout) {
  struct Case {
    std::string env, args;
    int np;
  };
  const Case cases[] = {
      {"KOLO_TRANSPORT=mpi", "-np 3 ", 3},
      {"",
       "--mca btl self,tcp --mca plm_rsh_agent " + binDir() +
           "/kolo-local-rsh -H nodea:2,nodeb:2 -np 4 ",
       4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.env + " " + c.args);
    JobResult r = mpirun("KOLO_TIMEOUT=5 " + c.env, c.args + ranks() + " stall");
    EXPECT_NE(r.exitCode, 0) << r.output;
    const std::string silent = std::to_string(c.np - 1);
    std::regex line(R"(stall error after ([0-9.]+) s: (\w+): ([^\n]*))");
    int lines = 0;
    int naming = 0;
    for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line);
         it != std::sregex_iterator(); ++it) {
      ++lines;
      EXPECT_LT(std::stod((*it)[1]), 20.0) << (*it)[0];
      EXPECT_EQ((*it)[2], "timeout") << (*it)[0];
      if ((*it)[3].str().find("waiting for rank " + silent + " ") != std::string::npos) {
        ++naming;
      }
    }
    EXPECT_GE(lines, 1) << r.output;
    // Every line names the silent rank, across nodes too: a rank waiting on
    // a local peer over shm that is itself waiting sees that peer's pulse
    // (shm_liveness.cc) and fails only through the abort notice of a rank
    // next to the silent one.
    EXPECT_EQ(naming, lines) << r.output;
  }
}

// Below MPI_THREAD_SERIALIZED kolo refuses, naming the level.
TEST_F(MpiEngine, ThreadLevelTooLow) {
  JobResult r = mpirun("", "-np 2 " + ranks() + " own-init-single");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "own-init-single ok"), 2) << r.output;
}

// Launcher variables that disagree with MPI_COMM_WORLD: an error naming
// both, on every rank.
TEST_F(MpiEngine, LauncherDisagreesWithMpi) {
  // kolorun-style variables for a job of 3 while mpirun starts 2.
  JobResult r =
      mpirun("KOLO_RANK=1 KOLO_SIZE=3 KOLO_RENDEZVOUS=file:///nowhere KOLO_TRANSPORT=mpi",
             "-np 2 " + ranks() + " collectives");
  EXPECT_NE(r.exitCode, 0) << r.output;
  EXPECT_GE(count(r.output, "but KOLO_RANK/KOLO_SIZE say rank 1 of 3"), 1) << r.output;
  EXPECT_EQ(count(r.output, "collectives ok"), 0) << r.output;
}

// The public point-to-point messages (tests/mpi/mpi_ranks_p2p.cc: posted
// and unposted receives of 24 MB, tags in order, blocking sends both ways,
// a send during the receiver's barrier, size and dtype mismatches naming
// both ranks, the C API in a process set) over the mpi transport alone and
// between two MPI nodes (shm within, mpi between). Messages far above MPI's
// eager limit used to hang here: MPI holds such a send until the receiver
// posts its receive. A hang shows as the 60 s limit.
TEST_F(MpiEngine, PointToPointOverMpi) {
  JobResult r =
      mpirun("KOLO_TRANSPORT=mpi KOLO_TIMEOUT=20", "-np 2 " + ranks() + " p2p", 60);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "p2p ok"), 2) << r.output;
  EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
  r = mpirun("KOLO_TIMEOUT=20 KOLO_LOG_LEVEL=info",
             "--mca btl self,tcp --mca plm_rsh_agent " + binDir() +
                 "/kolo-local-rsh -H nodea:2,nodeb:2 -np 4 " + ranks() + " p2p",
             60);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(count(r.output, "p2p ok"), 4) << r.output;
  EXPECT_EQ(count(r.output, "transport shm+mpi, engine mpi"), 8) << r.output;
  EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
}

// A peer that stops answering fails the receive after KOLO_TIMEOUT naming
// it, in the message's own terms. A peer that dies ends the whole job:
// mpirun kills every rank when one exits without MPI_Finalize, before the
// receiver could see an error; the job ends instead of hanging.
TEST_F(MpiEngine, PointToPointLostPeer) {
  JobResult r = mpirun("KOLO_TRANSPORT=mpi KOLO_TIMEOUT=5",
                       "-np 2 " + ranks() + " p2p-lost silent", 60);
  EXPECT_EQ(r.exitCode, 3) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(p2p-lost error after ([0-9.]+) s: (\w+): ([^\n]*))")))
      << r.output;
  EXPECT_GE(std::stod(m[1]), 4.0) << m[0];
  EXPECT_LT(std::stod(m[1]), 20.0) << m[0];
  EXPECT_EQ(m[2], "timeout") << m[0];
  EXPECT_NE(m[3].str().find("rank 0 timed out after 5 s waiting for rank 1 to send 3 "
                            "float64 (tag 1)"),
            std::string::npos)
      << m[0];

  r = mpirun("KOLO_TRANSPORT=mpi KOLO_TIMEOUT=5", "-np 2 " + ranks() + " p2p-lost exit",
             60);
  EXPECT_EQ(r.exitCode, 5) << r.output;
  EXPECT_EQ(count(r.output, "p2p-lost error"), 0) << r.output;
}

// Without MPI built, asking for it is a clear error.
TEST(MpiEngineAbsent, TransportMpiIsAnError) {
  if (KOLO_HAVE_MPI) GTEST_SKIP() << "kolo was built with MPI";
  setenv("KOLO_TRANSPORT", "mpi", 1);
  kolo::CommunicatorConfig c;
  c.size = 2;
  c.rendezvous = "file:///tmp/kolo-mpi-absent-test";
  try {
    kolo::Communicator::create(c);
    ADD_FAILURE() << "no error";
  } catch (const kolo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("without MPI"), std::string::npos) << e.what();
  }
}

}  // namespace

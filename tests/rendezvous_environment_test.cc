// Rendezvous: launcher detection (detectJobEnvironment,
// src/rendezvous/environment.h) under kolorun, Open MPI, PMI, Slurm, jsrun
// (and Spectrum MPI under it) and torchrun, with the errors naming the
// variable; each test sets its launcher variables and clears the others.
#include <gtest/gtest.h>
#include <kolo/error.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/environment.h"
#include "support/expect_error.h"

namespace kolo::rendezvous {
namespace {

using test::contains;
using test::expectError;

// -------------------------------------------------- detectJobEnvironment

// Sets the given variables and clears every other launcher variable for
// its lifetime; restores the previous environment afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    static const char* kAll[] = {"KOLO_RANK",
                                 "KOLO_SIZE",
                                 "KOLO_LOCAL_RANK",
                                 "KOLO_LOCAL_SIZE",
                                 "KOLO_RENDEZVOUS",
                                 "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE",
                                 "OMPI_MCA_ess_base_jobid",
                                 "PMIX_NAMESPACE",
                                 "PMI_RANK",
                                 "PMI_SIZE",
                                 "PMI_JOBID",
                                 "MPI_LOCALRANKID",
                                 "MPI_LOCALNRANKS",
                                 "PMI_LOCAL_RANK",
                                 "PMI_LOCAL_SIZE",
                                 "JSM_NAMESPACE_RANK",
                                 "JSM_NAMESPACE_SIZE",
                                 "JSM_NAMESPACE_LOCAL_RANK",
                                 "JSM_NAMESPACE_LOCAL_SIZE",
                                 "SLURM_PROCID",
                                 "SLURM_NTASKS",
                                 "SLURM_NPROCS",
                                 "SLURM_STEP_NUM_TASKS",
                                 "SLURM_LOCALID",
                                 "SLURM_NODEID",
                                 "SLURM_JOB_ID",
                                 "SLURM_STEP_ID",
                                 "SLURM_STEPID",
                                 "SLURM_TASKS_PER_NODE",
                                 "SLURM_STEP_TASKS_PER_NODE",
                                 "SLURM_STEP_NUM_NODES",
                                 "SLURM_NNODES",
                                 "SLURM_STEP_NODELIST",
                                 "SLURM_JOB_NODELIST",
                                 "SLURM_NODELIST",
                                 "RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_RANK",
                                 "LOCAL_WORLD_SIZE",
                                 "MASTER_ADDR",
                                 "MASTER_PORT"};
    for (const char* name : kAll) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(JobEnvironment, NoLauncherIsOneRank) {
  ScopedEnv env({});
  JobEnvironment j = detectJobEnvironment();
  EXPECT_EQ(j.source, "none");
  EXPECT_EQ(j.rank, 0);
  EXPECT_EQ(j.size, 1);
  EXPECT_TRUE(j.rendezvous.empty());
  EXPECT_FALSE(j.hostStore);
}

TEST(JobEnvironment, Kolo) {
  ScopedEnv env({{"KOLO_RANK", "2"},
                 {"KOLO_SIZE", "4"},
                 {"KOLO_LOCAL_RANK", "0"},
                 {"KOLO_LOCAL_SIZE", "2"},
                 {"KOLO_RENDEZVOUS", "tcp://10.1.2.3:29400"},
                 {"OMPI_COMM_WORLD_RANK", "9"}});  // kolo's own win
  JobEnvironment j = detectJobEnvironment();
  EXPECT_EQ(j.source, "kolo");
  EXPECT_EQ(j.rank, 2);
  EXPECT_EQ(j.size, 4);
  EXPECT_EQ(j.localRank, 0);
  EXPECT_EQ(j.localSize, 2);
  EXPECT_EQ(j.rendezvous, "tcp://10.1.2.3:29400");
  EXPECT_FALSE(j.hostStore);  // kolorun hosts it
}

TEST(JobEnvironment, KoloErrorsNameTheVariable) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{{"KOLO_RANK", "x1"}, {"KOLO_SIZE", "2"}, {"KOLO_RENDEZVOUS", "file:///tmp/a"}},
       "KOLO_RANK='x1'"},
      {{{"KOLO_RANK", "2"}, {"KOLO_SIZE", "2"}, {"KOLO_RENDEZVOUS", "file:///tmp/a"}},
       "KOLO_RANK=2 is not below KOLO_SIZE=2"},
      {{{"KOLO_RANK", "-1"}, {"KOLO_SIZE", "2"}}, "KOLO_RANK='-1'"},
      {{{"KOLO_SIZE", "2"}, {"KOLO_RENDEZVOUS", "file:///tmp/a"}}, "KOLO_RANK"},
      {{{"KOLO_RANK", "0"}, {"KOLO_SIZE", "0"}}, "KOLO_SIZE=0"},
      {{{"KOLO_RANK", "1"}, {"KOLO_SIZE", "2"}}, "KOLO_RENDEZVOUS"},
      {{{"KOLO_RANK", "1"}, {"KOLO_SIZE", "2"}, {"KOLO_RENDEZVOUS", "http://x:1"}},
       "KOLO_RENDEZVOUS='http://x:1'"},
      {{{"KOLO_RANK", "1"},
        {"KOLO_SIZE", "4"},
        {"KOLO_LOCAL_RANK", "3"},
        {"KOLO_LOCAL_SIZE", "2"},
        {"KOLO_RENDEZVOUS", "file:///tmp/a"}},
       "KOLO_LOCAL_RANK=3"},
  };
  for (const auto& c : cases) {
    ScopedEnv env(c.vars);
    SCOPED_TRACE(c.expect);
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(e.what(), c.expect)) << e.what();
  }
}

TEST(JobEnvironment, OpenMpi) {
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "3"},
                 {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                 {"PMIX_NAMESPACE", "prterun-host-123@1"}});
  JobEnvironment j = detectJobEnvironment();
  EXPECT_EQ(j.source, "mpirun");
  EXPECT_EQ(j.rank, 3);
  EXPECT_EQ(j.size, 4);
  EXPECT_EQ(j.localRank, 1);
  EXPECT_EQ(j.localSize, 2);
  EXPECT_EQ(j.rendezvous, "file:///tmp/kolo-prterun-host-123_1");
  EXPECT_FALSE(j.hostStore);
}

TEST(JobEnvironment, OpenMpiJobIdAndRendezvousOverride) {
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_MCA_ess_base_jobid", "4242"}});
    EXPECT_EQ(detectJobEnvironment().rendezvous, "file:///tmp/kolo-4242");
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"KOLO_RENDEZVOUS", "tcp://node1:4000"}});
    JobEnvironment j = detectJobEnvironment();
    EXPECT_EQ(j.rendezvous, "tcp://node1:4000");
    EXPECT_TRUE(j.hostStore);  // no kolorun: rank 0 hosts
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(contains(e.what(), "OMPI_COMM_WORLD_RANK=5")) << e.what();
    EXPECT_TRUE(contains(e.what(), "OMPI_COMM_WORLD_SIZE=4")) << e.what();
  }
}

TEST(JobEnvironment, Pmi) {
  ScopedEnv env({{"PMI_RANK", "1"},
                 {"PMI_SIZE", "3"},
                 {"MPI_LOCALRANKID", "1"},
                 {"MPI_LOCALNRANKS", "3"},
                 {"PMI_JOBID", "77"}});
  JobEnvironment j = detectJobEnvironment();
  EXPECT_EQ(j.source, "pmi");
  EXPECT_EQ(j.rank, 1);
  EXPECT_EQ(j.size, 3);
  EXPECT_EQ(j.localRank, 1);
  EXPECT_EQ(j.localSize, 3);
  EXPECT_EQ(j.rendezvous, "file:///tmp/kolo-77");
}

TEST(JobEnvironment, Slurm) {
  ScopedEnv env({{"SLURM_PROCID", "6"},
                 {"SLURM_NTASKS", "99"},
                 {"SLURM_STEP_NUM_TASKS", "7"},
                 {"SLURM_LOCALID", "0"},
                 {"SLURM_NODEID", "3"},
                 {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
                 {"SLURM_JOB_ID", "1234"},
                 {"SLURM_STEP_ID", "5"}});
  JobEnvironment j = detectJobEnvironment();
  EXPECT_EQ(j.source, "srun");
  EXPECT_EQ(j.rank, 6);
  EXPECT_EQ(j.size, 7);
  EXPECT_EQ(j.localRank, 0);
  EXPECT_EQ(j.localSize, 1);
  EXPECT_EQ(j.rendezvous, "file:///tmp/kolo-1234.5");
}

TEST(JobEnvironment, SlurmOverSeveralNodesUsesTheFirstNode) {
  for (int rank : {0, 3}) {
    ScopedEnv env({{"SLURM_PROCID", std::to_string(rank)},
                   {"SLURM_NTASKS", "4"},
                   {"SLURM_STEP_NUM_NODES", "2"},
                   {"SLURM_STEP_NODELIST", "gpu-[07-08],login"},
                   {"SLURM_JOB_ID", "1000"},
                   {"SLURM_STEP_ID", "2"}});
    JobEnvironment j = detectJobEnvironment();
    EXPECT_EQ(j.rendezvous, "tcp://gpu-07:36002");  // 20000 + (1000*16+2) % 20000
    EXPECT_EQ(j.hostStore, rank == 0);
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_NNODES", "2"},
                   {"SLURM_JOB_NODELIST", "a,b"}});
    EXPECT_EQ(detectJobEnvironment().rendezvous, "tcp://a:20000");
  }
  {
    // Several bracket groups: the first node is the first of each.
    ScopedEnv env({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_NNODES", "2"},
                   {"SLURM_JOB_NODELIST", "rack[2-3]-n[07-08],login1"}});
    EXPECT_EQ(detectJobEnvironment().rendezvous, "tcp://rack2-n07:20000");
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NNODES", "2"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(contains(e.what(), "SLURM_STEP_NODELIST")) << e.what();
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_NNODES", "2"},
                   {"SLURM_JOB_NODELIST", "[1-2]"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(contains(e.what(), "SLURM_JOB_NODELIST='[1-2]'")) << e.what();
  }
}

TEST(JobEnvironment, SlurmBadTaskList) {
  ScopedEnv env({{"SLURM_PROCID", "0"},
                 {"SLURM_NTASKS", "2"},
                 {"SLURM_NODEID", "0"},
                 {"SLURM_TASKS_PER_NODE", "2(y3)"}});
  Error e = expectError([] { detectJobEnvironment(); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "SLURM_TASKS_PER_NODE='2(y3)'")) << e.what();
}

TEST(JobEnvironment, Jsrun) {
  ScopedEnv env({{"JSM_NAMESPACE_RANK", "2"},
                 {"JSM_NAMESPACE_SIZE", "3"},
                 {"JSM_NAMESPACE_LOCAL_RANK", "2"},
                 {"JSM_NAMESPACE_LOCAL_SIZE", "3"},
                 {"PMIX_NAMESPACE", "jsm-77"}});
  JobEnvironment j = detectJobEnvironment();
  EXPECT_EQ(j.source, "jsrun");
  EXPECT_EQ(j.rank, 2);
  EXPECT_EQ(j.size, 3);
  EXPECT_EQ(j.localRank, 2);
  EXPECT_EQ(j.localSize, 3);
  EXPECT_EQ(j.rendezvous, "file:///tmp/kolo-jsm-77");  // one host
  EXPECT_FALSE(j.hostStore);
}

TEST(JobEnvironment, JsrunOverSeveralHostsHasNoFileStore) {
  const std::map<std::string, std::string> vars = {{"JSM_NAMESPACE_RANK", "0"},
                                                   {"JSM_NAMESPACE_SIZE", "12"},
                                                   {"JSM_NAMESPACE_LOCAL_RANK", "0"},
                                                   {"JSM_NAMESPACE_LOCAL_SIZE", "6"}};
  {
    ScopedEnv env(vars);
    JobEnvironment j = detectJobEnvironment();
    EXPECT_EQ(j.source, "jsrun");
    EXPECT_EQ(j.size, 12);
    EXPECT_EQ(j.rendezvous, "");  // /tmp is not shared between hosts
  }
  {
    auto withStore = vars;
    withStore["KOLO_RENDEZVOUS"] = "tcp://h41n01:29400";
    ScopedEnv env(withStore);
    JobEnvironment j = detectJobEnvironment();
    EXPECT_EQ(j.rendezvous, "tcp://h41n01:29400");
    EXPECT_TRUE(j.hostStore);  // rank 0, no kolorun
  }
}

TEST(JobEnvironment, SpectrumMpiUnderJsrunIsReadAsMpirun) {
  // IBM Spectrum MPI's ranks have both jsrun's and Open MPI's variables; its
  // MPI library goes by the latter.
  ScopedEnv env({{"JSM_NAMESPACE_RANK", "1"},
                 {"JSM_NAMESPACE_SIZE", "2"},
                 {"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  JobEnvironment j = detectJobEnvironment();
  EXPECT_EQ(j.source, "mpirun");
  EXPECT_EQ(j.rank, 1);
  EXPECT_EQ(j.size, 2);
}

TEST(JobEnvironment, JsrunErrorsNameTheVariable) {
  {
    ScopedEnv env({{"JSM_NAMESPACE_RANK", "4"}, {"JSM_NAMESPACE_SIZE", "4"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(
        contains(e.what(), "JSM_NAMESPACE_RANK=4 is not below JSM_NAMESPACE_SIZE=4"))
        << e.what();
  }
  {
    ScopedEnv env(std::map<std::string, std::string>{{"JSM_NAMESPACE_RANK", "0"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(contains(e.what(), "jsrun launch detected but JSM_NAMESPACE_SIZE"))
        << e.what();
  }
}

TEST(JobEnvironment, Torchrun) {
  for (int rank : {0, 2}) {
    ScopedEnv env({{"RANK", std::to_string(rank)},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", std::to_string(rank % 2)},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "10.0.0.5"},
                   {"MASTER_PORT", "29500"}});
    JobEnvironment j = detectJobEnvironment();
    EXPECT_EQ(j.source, "torchrun");
    EXPECT_EQ(j.rank, rank);
    EXPECT_EQ(j.size, 4);
    EXPECT_EQ(j.localRank, rank % 2);
    EXPECT_EQ(j.localSize, 2);
    EXPECT_EQ(j.rendezvous, "tcp://10.0.0.5:29501");  // MASTER_PORT + 1
    EXPECT_EQ(j.hostStore, rank == 0);
  }
}

TEST(JobEnvironment, TorchrunErrors) {
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(contains(e.what(), "MASTER_ADDR")) << e.what();
  }
  {
    ScopedEnv env({{"RANK", "0"},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "h"},
                   {"MASTER_PORT", "port"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(contains(e.what(), "MASTER_PORT='port'")) << e.what();
  }
  {
    ScopedEnv env({{"RANK", "two"}, {"WORLD_SIZE", "2"}});
    Error e = expectError([] { detectJobEnvironment(); });
    EXPECT_TRUE(contains(e.what(), "RANK='two'")) << e.what();
  }
  {
    // RANK alone (set by something else) is not a torchrun launch.
    ScopedEnv env(std::map<std::string, std::string>{{"RANK", "3"}});
    EXPECT_EQ(detectJobEnvironment().source, "none");
  }
}

}  // namespace
}  // namespace kolo::rendezvous

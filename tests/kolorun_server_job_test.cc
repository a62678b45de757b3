// Unit tests of kolorun's policy for jobs whose ranks may fail without
// ending the job (server_job.h): parameter servers, kolo.hpo studies
// (--hpo, or declared by the ranks in the launcher's store), and the study
// declaration itself (rendezvous/study_declaration.h, kolo_study_declare).
#include <gtest/gtest.h>
#include <kolo/kolo.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <vector>

#include "kolo/error.h"
#include "kolorun_args.h"
#include "rendezvous/study_declaration.h"
#include "rendezvous/tcp_store.h"
#include "server_job.h"

namespace kolo::kolorun {

TEST(ServerJobTest, WithoutServersTheFirstFailureEndsTheJob) {
  ServerJob job({0, 0, 0}, 0);
  EXPECT_FALSE(job.hasServers());
  EXPECT_FALSE(job.onExit(0, true).endJob);
  ServerJob::Verdict v = job.onExit(7, false);  // any rank, elastic ones too
  EXPECT_TRUE(v.endJob);
  EXPECT_EQ(v.failedRank, 7);
  EXPECT_FALSE(v.workerLost);
}

TEST(ServerJobTest, ServersAreTheRanksKoloInitChooses) {
  ServerJob one({0, 0, 0, 0}, 1);
  EXPECT_TRUE(one.isServer(3));
  EXPECT_FALSE(one.isServer(0));
  ServerJob two({0, 0, 1, 1}, 2);  // the highest rank of each host
  EXPECT_TRUE(two.isServer(1));
  EXPECT_TRUE(two.isServer(3));
  EXPECT_FALSE(two.isServer(2));
}

TEST(ServerJobTest, ALostWorkerLeavesTheJobToTheServers) {
  ServerJob job({0, 0, 0, 0}, 1);
  ServerJob::Verdict v = job.onExit(2, false);
  EXPECT_TRUE(v.workerLost);
  EXPECT_FALSE(v.endJob);
  EXPECT_FALSE(v.workersGone);
  EXPECT_FALSE(job.onExit(0, true).workersGone);
  v = job.onExit(1, true);
  EXPECT_TRUE(v.workersGone);
  EXPECT_FALSE(v.endJob);
  EXPECT_FALSE(job.onExit(3, true).endJob);  // the server
  EXPECT_EQ(job.lostWorkers(), std::vector<int>({2}));
}

TEST(ServerJobTest, EveryWorkerFailedEndsTheJobNamingTheFirst) {
  ServerJob job({0, 0, 0, 0}, 1);
  EXPECT_FALSE(job.onExit(2, false).endJob);
  EXPECT_FALSE(job.onExit(0, false).endJob);
  ServerJob::Verdict v = job.onExit(1, false);
  EXPECT_TRUE(v.workerLost);
  EXPECT_TRUE(v.endJob);
  EXPECT_FALSE(v.workersGone);
  EXPECT_EQ(v.failedRank, 2);
  EXPECT_EQ(job.lostWorkers(), std::vector<int>({2, 0, 1}));
}

TEST(ServerJobTest, AFailedServerEndsTheJob) {
  ServerJob job({0, 0, 0, 0}, 1);
  ServerJob::Verdict v = job.onExit(3, false);
  EXPECT_TRUE(v.endJob);
  EXPECT_EQ(v.failedRank, 3);
  EXPECT_FALSE(v.workerLost);
  EXPECT_TRUE(job.lostWorkers().empty());
}

TEST(ServerJobTest, ServersComeFromTheFlagOrKoloServers) {
  unsetenv("KOLO_SERVERS");
  EXPECT_EQ(serversOfJob(parse({"--servers", "2", "-np", "4", "prog"})), 2);
  EXPECT_EQ(serversOfJob(parse({"-np", "4", "prog"})), 0);
  EXPECT_EQ(serversOfJob(parse({"-x", "KOLO_SERVERS=1", "-np", "4", "prog"})), 1);
  setenv("KOLO_SERVERS", "3", 1);
  EXPECT_EQ(serversOfJob(parse({"-np", "4", "prog"})), 3);
  EXPECT_EQ(serversOfJob(parse({"-x", "KOLO_SERVERS=1", "-np", "4", "prog"})), 1);
  EXPECT_EQ(serversOfJob(parse({"-x", "KOLO_SERVERS", "-np", "4", "prog"})), 3);
  // Not a count below -np: the ranks report it; kolorun plans no servers.
  EXPECT_EQ(serversOfJob(parse({"-np", "3", "prog"})), 0);
  EXPECT_EQ(serversOfJob(parse({"--min-np", "2", "-np", "4", "prog"})), 0);
  setenv("KOLO_SERVERS", "two", 1);
  EXPECT_EQ(serversOfJob(parse({"-np", "4", "prog"})), 0);
  unsetenv("KOLO_SERVERS");
}

TEST(ServerJobTest, AStudyGoesOnWithoutAnyRankButZero) {
  ServerJob job = ServerJob::study(4);  // kolorun --hpo
  EXPECT_TRUE(job.isStudy());
  EXPECT_TRUE(job.isServer(0));
  ServerJob::Verdict v = job.onExit(3, false);
  EXPECT_TRUE(v.workerLost);
  EXPECT_FALSE(v.endJob);
  v = job.onExit(1, false);  // every other rank lost: rank 0 still decides
  EXPECT_FALSE(v.endJob);
  EXPECT_FALSE(v.workersGone);
  v = job.onExit(2, true);
  EXPECT_FALSE(v.endJob);
  EXPECT_FALSE(v.workersGone);  // no window: rank 0 may run a last trial
  EXPECT_EQ(job.lostWorkers(), std::vector<int>({3, 1}));
  v = job.onExit(0, false);
  EXPECT_TRUE(v.endJob);
  EXPECT_EQ(v.failedRank, 0);
}

TEST(ServerJobTest, HpoIsAFlagOfItsOwn) {
  EXPECT_TRUE(parse({"--hpo", "-np", "4", "prog"}).hpo);
  EXPECT_FALSE(parse({"-np", "4", "prog"}).hpo);
  EXPECT_NE(usageErrorOf({"--hpo", "--servers", "1", "-np", "4", "prog"})
                .find("--hpo cannot be combined with --servers"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"--hpo", "--min-np", "2", "-np", "4", "prog"})
                .find("--hpo cannot be combined with elastic training"),
            std::string::npos);
}

TEST(ServerJobTest, ADeclaredStudyGoesOnWithoutTheRanksThatDeclared) {
  ServerJob job({0, 0, 0, 0}, 0);  // plain kolorun -np 4
  EXPECT_FALSE(job.isStudy());
  // Only a failure of a rank other than 0 depends on a declaration.
  EXPECT_TRUE(job.wantsDeclaration(3, false));
  EXPECT_FALSE(job.wantsDeclaration(3, true));
  EXPECT_FALSE(job.wantsDeclaration(0, false));
  ServerJob::Verdict v = job.onExit(3, false, /*inStudy=*/true);
  EXPECT_TRUE(v.workerLost);
  EXPECT_FALSE(v.endJob);
  EXPECT_TRUE(job.isStudy());
  EXPECT_FALSE(job.onExit(1, true).endJob);
  EXPECT_EQ(job.lostWorkers(), std::vector<int>({3}));
  // A rank that fails outside the study (not declared) ends the job.
  v = job.onExit(2, false, /*inStudy=*/false);
  EXPECT_TRUE(v.endJob);
  EXPECT_EQ(v.failedRank, 2);
}

TEST(ServerJobTest, RankZeroEndsAStudyWhateverItDeclared) {
  ServerJob job({0, 0}, 0);
  ServerJob::Verdict v = job.onExit(0, false, /*inStudy=*/true);
  EXPECT_TRUE(v.endJob);
  EXPECT_EQ(v.failedRank, 0);
  EXPECT_FALSE(v.workerLost);
}

TEST(ServerJobTest, ServersIgnoreStudyDeclarations) {
  ServerJob job({0, 0, 0, 0}, 1);  // rank 3 is the server
  EXPECT_FALSE(job.wantsDeclaration(1, false));
  ServerJob::Verdict v = job.onExit(3, false, /*inStudy=*/true);
  EXPECT_TRUE(v.endJob);
  EXPECT_EQ(v.failedRank, 3);
}

// The declaration's round trip through a store like kolorun's: counted in
// and out per rank, readable only with the job's secret.
TEST(StudyDeclarationTest, RanksCountThemselvesInAndOutOfTheStore) {
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0, "job-secret");
  const std::string address = "tcp://127.0.0.1:" + std::to_string(server->port());
  auto launcher = rendezvous::TcpStore::connect("127.0.0.1", server->port(),
                                                std::chrono::seconds(5), "job-secret");
  rendezvous::StudyDeclaration rank3(address, std::chrono::seconds(5), "job-secret", 3);
  EXPECT_FALSE(rendezvous::studyDeclared(*launcher, 3));
  EXPECT_EQ(rank3.enter(), 1);
  EXPECT_TRUE(rendezvous::studyDeclared(*launcher, 3));
  EXPECT_FALSE(rendezvous::studyDeclared(*launcher, 2));  // per rank
  EXPECT_EQ(rank3.enter(), 2);                            // nested studies
  EXPECT_EQ(rank3.leave(), 1);
  EXPECT_TRUE(rendezvous::studyDeclared(*launcher, 3));
  EXPECT_EQ(rank3.leave(), 0);
  EXPECT_FALSE(rendezvous::studyDeclared(*launcher, 3));
  // Without the secret nothing is declared or read.
  rendezvous::StudyDeclaration stranger(address, std::chrono::seconds(5), "guess", 3);
  EXPECT_THROW(stranger.enter(), Error);
  EXPECT_THROW(rendezvous::TcpStore::connect("127.0.0.1", server->port(),
                                             std::chrono::seconds(5), "guess"),
               Error);
  EXPECT_FALSE(rendezvous::studyDeclared(*launcher, 3));
}

// kolo_study_declare as a rank under kolorun calls it: its own counter, in
// the store KOLO_RENDEZVOUS names, with KOLO_JOB_SECRET.
TEST(StudyDeclarationTest, TheCApiCountsItsRankInTheLaunchersStore) {
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0, "c-api-secret");
  auto launcher = rendezvous::TcpStore::connect("127.0.0.1", server->port(),
                                                std::chrono::seconds(5), "c-api-secret");
  setenv("KOLO_RANK", "2", 1);
  setenv("KOLO_SIZE", "4", 1);
  setenv("KOLO_RENDEZVOUS", ("tcp://127.0.0.1:" + std::to_string(server->port())).c_str(),
         1);
  setenv("KOLO_JOB_SECRET", "c-api-secret", 1);
  int told = -1;
  EXPECT_EQ(kolo_study_declare(1, &told), KOLO_OK) << kolo_last_error();
  EXPECT_EQ(told, 1);
  EXPECT_TRUE(rendezvous::studyDeclared(*launcher, 2));
  EXPECT_FALSE(rendezvous::studyDeclared(*launcher, 0));
  EXPECT_EQ(kolo_study_declare(0, nullptr), KOLO_OK) << kolo_last_error();
  EXPECT_FALSE(rendezvous::studyDeclared(*launcher, 2));
  for (const char* v : {"KOLO_RANK", "KOLO_SIZE", "KOLO_RENDEZVOUS", "KOLO_JOB_SECRET"}) {
    unsetenv(v);
  }
}

}  // namespace kolo::kolorun

// Parameter-server checkpoints (src/ps/checkpoint.h): the shard file and
// manifest formats and their checks, and Client::save / Client::load
// through real servers over shm (each rank a thread): downpour with
// RMSprop, whose state is three buffers.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ps/checkpoint.h"
#include "ps/client.h"
#include "ps/server.h"
#include "support/expect_error.h"
#include "support/thread_world.h"

namespace kolo::ps {
namespace {

using test::contains;
using test::expectError;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kolo-ps-ckpt-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

ShardState sample() {
  ShardState s;
  s.shard = 1;
  s.shards = 2;
  s.mode = Mode::kDownpour;
  s.hasRule = true;
  s.kind = OptimizerKind::kRmsprop;
  s.version = 17;
  s.updates = 17;
  s.rule.steps = 9;
  s.values = {0.5f, -1.25f, 3.0f};
  s.rule.a = {0.1f, 0.2f, 0.3f};
  s.rule.b = {1.0f, 2.0f, 3.0f};
  s.rule.c = {-0.1f, 0.0f, 0.1f};
  return s;
}

TEST(PsCheckpoint, ShardFileRoundTripsExactly) {
  TempDir dir;
  const std::string file = dir.path + "/shard";
  const ShardState s = sample();
  const Digest d = writeShardFile(file, s);
  const ShardState r = readShardFile(file, &d, 1, 2, 3);
  EXPECT_EQ(r.version, 17u);
  EXPECT_EQ(r.rule.steps, 9u);
  EXPECT_EQ(r.kind, OptimizerKind::kRmsprop);
  EXPECT_EQ(r.values, s.values);
  EXPECT_EQ(r.rule.a, s.rule.a);
  EXPECT_EQ(r.rule.b, s.rule.b);
  EXPECT_EQ(r.rule.c, s.rule.c);
}

TEST(PsCheckpoint, TornCorruptForeignAndMissingFilesAreClearErrors) {
  TempDir dir;
  const std::string file = dir.path + "/shard";
  const Digest d = writeShardFile(file, sample());
  const auto size = std::filesystem::file_size(file);
  // A different save's digest.
  Digest other = d;
  other[0] ^= 1;
  EXPECT_TRUE(contains(expectError([&] { readShardFile(file, &other, 1, 2, 3); }).what(),
                       "a shard file of another save"));
  // The wrong shard, the wrong size.
  EXPECT_TRUE(contains(expectError([&] { readShardFile(file, &d, 0, 2, 3); }).what(),
                       "shard 1 of 2, expected shard 0 of 2"));
  EXPECT_TRUE(contains(expectError([&] { readShardFile(file, &d, 1, 2, 4); }).what(),
                       "3 elements, this job's shard has 4"));
  // A flipped byte in the values.
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(84);
    f.put('\x7f');
  }
  EXPECT_TRUE(contains(expectError([&] { readShardFile(file, nullptr, 1, 2, 3); }).what(),
                       "checksum mismatch"));
  // Torn: shorter than its header says.
  std::filesystem::resize_file(file, size - 7);
  const Error torn = expectError([&] { readShardFile(file, nullptr, 1, 2, 3); });
  EXPECT_EQ(torn.code(), ErrorCode::kMismatch);
  EXPECT_TRUE(contains(torn.what(), "torn")) << torn.what();
  EXPECT_TRUE(contains(torn.what(), file)) << torn.what();
  const Error missing = expectError([&] { readShardFile(file + "x", &d, 1, 2, 3); });
  EXPECT_EQ(missing.code(), ErrorCode::kIo);
  EXPECT_TRUE(contains(missing.what(), file + "x")) << missing.what();
}

TEST(PsCheckpoint, ManifestRoundTripsAndNamesEveryDifference) {
  TempDir dir;
  PsConfig c;
  c.mode = Mode::kSync;
  c.tensorElements = {10, 4, 7};
  const ShardMap map = ShardMap::build(c.tensorElements, 2);
  Manifest m;
  m.mode = Mode::kSync;
  m.optimizer = "SGD";
  m.tensorElements = c.tensorElements;
  for (int s = 0; s < 2; ++s) {
    ManifestShard sh;
    sh.file = shardFileName(s, 2, "abc");
    sh.elements = map.shardElements[s];
    sh.version = 5;
    sh.digest[3] = static_cast<uint8_t>(s + 1);
    sh.pieces = map.shards[s];
    m.shards.push_back(sh);
  }
  writeManifest(dir.path, m);
  const Manifest r = readManifest(dir.path);
  EXPECT_EQ(r.shards.size(), 2u);
  EXPECT_EQ(r.shards[1].digest, m.shards[1].digest);
  EXPECT_EQ(r.shards[0].file, "shard-0-of-2.abc.kps");
  checkManifest(r, dir.path, c, 2);  // fits
  PsConfig other = c;
  other.mode = Mode::kDownpour;
  other.tensorElements[1] = 5;
  const std::string what =
      expectError([&] { checkManifest(r, dir.path, other, 3); }).what();
  EXPECT_TRUE(contains(what, "mode sync saved, downpour in this job")) << what;
  EXPECT_TRUE(contains(what, "2 servers saved, 3 in this job")) << what;
  EXPECT_TRUE(contains(what, "tensor 1 has 4 elements saved, 5 in this job")) << what;
  // A manifest cut short is named as such.
  std::filesystem::resize_file(manifestPath(dir.path),
                               std::filesystem::file_size(manifestPath(dir.path)) / 2);
  EXPECT_TRUE(contains(expectError([&] { readManifest(dir.path); }).what(), "is torn"));
}

// Two workers, two servers, downpour with RMSprop (centered, momentum):
// save, push on, load; the parameters come back exactly, and the same
// pushes from there give the same parameters as after the save (the
// optimizer's state and version came back too).
TEST(PsCheckpoint, ClientSaveAndLoadRestoreParametersStateAndVersion) {
  TempDir dir;
  PsConfig config;
  config.mode = Mode::kDownpour;
  config.stalenessBound = 100;
  config.optimizer.kind = OptimizerKind::kRmsprop;
  config.optimizer.momentum = 0.5f;
  config.optimizer.centered = true;
  config.tensorElements = {6, 3};
  constexpr int kRanks = 4;
  test::ThreadWorld world(test::ThreadWorld::Kind::kShm, kRanks);
  const Roles roles = assignRoles(std::vector<int>(kRanks, 0), 2);
  world.run([&](int rank) {
    const int s = roles.serverIndexOf(rank);
    if (s >= 0) {
      Server(world.transport(rank), roles, s).run();
      return;
    }
    const int w = roles.workerIndexOf(rank);
    std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1, 0, 1};
    Client client(world.transport(rank), roles, w, config);
    client.start({a.data(), b.data()});
    if (w == 0) {
      auto pushes = [&](int from, int to) {
        std::vector<std::vector<float>> trace;
        for (int k = from; k < to; ++k) {
          std::vector<float> ga(6, 0.1f * static_cast<float>(k + 1)), gb(3, -0.2f);
          client.push({ga.data(), gb.data()}, 0.01f);
          client.pull({a.data(), b.data()});
          std::vector<float> both = a;
          both.insert(both.end(), b.begin(), b.end());
          trace.push_back(both);
        }
        return trace;
      };
      pushes(0, 3);
      const std::vector<float> savedA = a, savedB = b;
      const uint64_t savedVersion = client.version();
      const Manifest m = client.save(dir.path);
      EXPECT_EQ(m.shards.size(), 2u);
      const auto after = pushes(3, 6);
      client.load(dir.path, {a.data(), b.data()});
      EXPECT_EQ(a, savedA);
      EXPECT_EQ(b, savedB);
      EXPECT_EQ(client.version(), savedVersion);
      EXPECT_EQ(pushes(3, 6), after);
      // A load that fails leaves the servers as they were.
      const std::vector<float> nowA = a;
      const std::string missing =
          expectError([&] {
            client.load(dir.path + "/nothing", {a.data(), b.data()});
          }).what();
      EXPECT_TRUE(contains(missing, "manifest")) << missing;
      client.pull({a.data(), b.data()});
      EXPECT_EQ(a, nowA);
    }
    client.bye();
  });
}

}  // namespace
}  // namespace kolo::ps

// The device path choice (collectives/cuda/device_path.h) over a table of
// topologies, its record codec, and across real processes on pretend hosts
// (KOLO_HOST_ID): the topology exchange, the choice without a usable
// device, forced paths failing by name on every rank, and the hierarchical
// composition (hier_collectives.h) with a host double of the devices,
// element by element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "api/communicator_impl.h"
#include "collectives/cuda/device_identity.h"
#include "collectives/cuda/device_path.h"
#include "collectives/cuda/device_runtime.h"
#include "support/comm_world.h"
#include "support/expect_error.h"
#include "support/process_ranks.h"

namespace kolo {
namespace {

using collectives::cuda::chooseDevicePath;
using collectives::cuda::DevicePath;
using collectives::cuda::DevicePathChoice;
using collectives::cuda::DeviceTopology;
using collectives::cuda::RankDevice;
using test::contains;
using test::expectError;

// A topology written as one string per rank: "host:gpu", e.g. {"a:0",
// "a:0", "b:1"}; every GPU of a host reaches every other (peer access)
// unless `noPeers`, NCCL and IPC usable unless said otherwise.
struct Spec {
  std::vector<std::string> ranks;
  std::string setting = "auto";
  bool nccl = true;
  bool noPeers = false;
  std::string inter = "tcp";
};

std::string uuidOf(const std::string& gpu) {
  return "GPU-" + gpu;
}

DeviceTopology topologyOf(const Spec& s) {
  DeviceTopology t;
  t.inter = s.inter;
  std::map<std::string, int> hostIndex;
  std::map<std::string, std::vector<std::string>> gpusOfHost;
  for (const std::string& r : s.ranks) {
    const std::string host = r.substr(0, r.find(':'));
    const std::string gpu = r.substr(r.find(':') + 1);
    hostIndex.emplace(host, static_cast<int>(hostIndex.size()));
    gpusOfHost[host].push_back(gpu);
  }
  for (const std::string& r : s.ranks) {
    RankDevice d;
    d.hostId = r.substr(0, r.find(':'));
    d.host = hostIndex[d.hostId];
    d.setting = s.setting;
    d.device = 0;
    const std::string gpu = r.substr(r.find(':') + 1);
    d.uuid = uuidOf(gpu);
    if (!s.noPeers) {
      for (const std::string& other : gpusOfHost[d.hostId]) {
        if (other != gpu) d.peers.push_back(uuidOf(other));
      }
    }
    if (!s.nccl) d.ncclUnusable = "libnccl.so.2: cannot open shared object file";
    t.ranks.push_back(d);
  }
  return t;
}

struct Expect {
  Spec spec;
  std::string text;    // DevicePathChoice::text()
  std::string reason;  // a part of the reason
};

// Host indices must be dense and in order of the lowest rank: topologyOf's
// map gives them in order of first appearance, as the communicator does.
TEST(DevicePathChoice, AutoOverTopologies) {
  const std::vector<Expect> table = {
      // One host.
      {{{"a:0"}}, "nccl", "one host, one rank per GPU"},
      {{{"a:0"}, "auto", false}, "ipc", "NCCL cannot run on rank 0"},
      {{{"a:0", "a:0"}}, "ipc", "ranks 0 and 1 share GPU GPU-0 on host a"},
      {{{"a:0", "a:0", "a:0"}, "auto", false}, "ipc", "share GPU"},
      {{{"a:0", "a:1"}}, "nccl", "NCCL available"},
      {{{"a:0", "a:1"}, "auto", false}, "ipc", "NCCL cannot run"},
      {{{"a:0", "a:1"}, "auto", false, true}, "staged", "cannot access GPU GPU-1"},
      {{{"a:0", "a:0", "a:1"}, "auto", true, true}, "staged", "share GPU GPU-0"},
      {{{"a:0", "a:0", "a:1", "a:1"}}, "ipc", "share GPU"},
      // Several hosts, one rank per GPU.
      {{{"a:0", "a:1", "b:2", "b:3"}}, "nccl", "one rank per GPU on 2 hosts"},
      {{{"a:0", "b:1", "c:2"}}, "nccl", "on 3 hosts"},
      {{{"a:0", "a:1", "b:2", "b:3"}, "auto", false},
       "hier (ipc inside hosts, tcp between)",
       "NCCL cannot run"},
      {{{"a:0", "a:1", "b:2", "b:3"}, "auto", false, false, "mpi"},
       "hier (ipc inside hosts, mpi between)",
       ""},
      {{{"a:0", "b:1"}, "auto", false}, "staged", "one rank per host"},
      {{{"a:0", "a:1", "b:2", "b:3"}, "auto", false, true}, "staged", "peer to peer"},
      // Uneven hosts.
      {{{"a:0", "a:1", "b:2", "c:3", "c:4", "c:5"}, "auto", false},
       "hier (ipc inside hosts, tcp between)",
       ""},
      // Sharing inside hosts.
      {{{"a:0", "a:0", "b:1", "b:1"}},
       "hier (ipc inside hosts, tcp between)",
       "share GPU GPU-0 on host a"},
      {{{"a:0", "a:0", "a:1", "b:2", "b:2"}, "auto", false},
       "hier (ipc inside hosts, tcp between)",
       ""},
      // Pretend hosts of one machine: one GPU seen from two "hosts".
      {{{"a:0", "a:0", "b:0", "b:0"}},
       "hier (ipc inside hosts, tcp between)",
       "share GPU GPU-0 on host a"},
      {{{"a:0", "b:0"}}, "staged", "(host a and host b: one machine); one rank per host"},
      {{{"a:0", "a:1", "b:0", "b:1"}},
       "hier (nccl inside hosts, tcp between)",
       "nccl inside each host"},
  };
  for (const Expect& e : table) {
    std::string where;
    for (const auto& r : e.spec.ranks) where += r + " ";
    where += "nccl=" + std::to_string(e.spec.nccl) +
             " noPeers=" + std::to_string(e.spec.noPeers);
    const DevicePathChoice c = chooseDevicePath(topologyOf(e.spec));
    EXPECT_EQ(c.text(), e.text) << where << ": " << c.reason;
    EXPECT_TRUE(contains(c.reason, e.reason)) << where << ": " << c.reason;
  }
}

TEST(DevicePathChoice, ARankWithoutDeviceStages) {
  DeviceTopology t = topologyOf({{"a:0", "a:1", "b:2"}});
  t.ranks[1].uuid.clear();
  t.ranks[1].unusable = "no CUDA device: cudaGetDeviceCount failed";
  DevicePathChoice c = chooseDevicePath(t);
  EXPECT_EQ(c.path, DevicePath::kStaged);
  EXPECT_EQ(c.reason,
            "rank 1 on host a has no usable CUDA device: no CUDA device: "
            "cudaGetDeviceCount failed");
  // IPC that cannot run on one rank of a shared GPU: staged, saying why.
  t = topologyOf({{"a:0", "a:0"}});
  t.ranks[1].ipcUnusable = "cudaIpcGetMemHandle is not supported";
  c = chooseDevicePath(t);
  EXPECT_EQ(c.text(), "staged");
  EXPECT_TRUE(contains(c.reason,
                       "CUDA IPC cannot run on rank 1 on host a: "
                       "cudaIpcGetMemHandle is not supported"))
      << c.reason;
}

struct Forced {
  Spec spec;
  std::string text;   // the choice, or empty when an error is expected
  std::string error;  // the whole message, or a part of it
};

TEST(DevicePathChoice, ForcedPathsRunOrSayWhyNot) {
  const std::vector<Forced> table = {
      {{{"a:0", "a:0"}, "staged"}, "staged", ""},
      {{{"a:0", "a:0"}, "ipc"}, "ipc", ""},
      {{{"a:0", "a:1"}, "ipc"}, "ipc", ""},
      {{{"a:0", "a:1"}, "nccl"}, "nccl", ""},
      {{{"a:0", "b:1"}, "nccl"}, "nccl", ""},
      {{{"a:0", "b:1"}, "hier"}, "hier (nccl inside hosts, tcp between)", ""},
      {{{"a:0", "a:0", "b:1", "b:1"}, "hier"},
       "hier (ipc inside hosts, tcp between)",
       ""},
      {{{"a:0"}, "hier"}, "hier (nccl inside hosts, tcp between)", ""},
      {{{"a:0", "a:0"}, "nccl"},
       "",
       "KOLO_DEVICE_PATH=nccl: ranks 0 and 1 share GPU GPU-0 on host a; NCCL takes one "
       "rank per GPU"},
      {{{"a:0", "b:0"}, "nccl"}, "", "(host a and host b: one machine)"},
      {{{"a:0", "a:1"}, "nccl", false},
       "",
       "KOLO_DEVICE_PATH=nccl: NCCL cannot run on rank 0 on host a: libnccl.so.2"},
      {{{"a:0", "a:1", "b:2"}, "ipc"},
       "",
       "KOLO_DEVICE_PATH=ipc: the ranks are on 2 hosts (host a: ranks 0,1; host b: rank "
       "2); CUDA IPC joins the ranks of one host"},
      {{{"a:0", "a:1"}, "ipc", true, true},
       "",
       "KOLO_DEVICE_PATH=ipc: GPU GPU-0 of rank 0 cannot access GPU GPU-1 of rank 1 peer "
       "to peer (host a)"},
      {{{"a:0", "a:0", "a:1", "b:2"}, "hier", false, true},
       "",
       "KOLO_DEVICE_PATH=hier: neither NCCL (ranks 0 and 1 share GPU GPU-0 on host a) "
       "nor "
       "CUDA IPC (GPU GPU-0 of rank 0 cannot access GPU GPU-1 of rank 2 peer to peer "
       "(host a)) can run inside the hosts"},
  };
  for (const Forced& f : table) {
    std::string where = f.spec.setting + ":";
    for (const auto& r : f.spec.ranks) where += " " + r;
    if (!f.text.empty()) {
      EXPECT_EQ(chooseDevicePath(topologyOf(f.spec)).text(), f.text) << where;
      continue;
    }
    const Error e = expectError([&] { chooseDevicePath(topologyOf(f.spec)); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << where;
    EXPECT_TRUE(contains(e.what(), f.error)) << where << ": " << e.what();
  }
  // Forced on a rank without a device: its reason; staged still runs.
  DeviceTopology t = topologyOf({{"a:0", "b:1"}, "hier"});
  t.ranks[1].unusable = "no CUDA device: this kolo build has no CUDA support";
  Error e = expectError([&] { chooseDevicePath(t); });
  EXPECT_STREQ(e.what(),
               "KOLO_DEVICE_PATH=hier: rank 1 on host b has no usable CUDA device: no "
               "CUDA device: this kolo build has no CUDA support");
  for (auto& r : t.ranks) r.setting = "staged";
  EXPECT_EQ(chooseDevicePath(t).path, DevicePath::kStaged);
}

TEST(DevicePathChoice, SettingsMustAgreeAndBePathNames) {
  DeviceTopology t = topologyOf({{"a:0", "a:1", "b:2"}});
  t.ranks[2].setting = "nccl";
  Error e = expectError([&] { chooseDevicePath(t); });
  EXPECT_EQ(e.code(), ErrorCode::kMismatch);
  EXPECT_STREQ(e.what(),
               "KOLO_DEVICE_PATH differs between ranks: rank 0 has 'auto', rank 2 has "
               "'nccl' (it must be the same on every rank)");
  for (auto& r : t.ranks) r.setting = "fast";
  e = expectError([&] { chooseDevicePath(t); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_STREQ(e.what(),
               "KOLO_DEVICE_PATH='fast' (expected auto, staged, ipc, nccl or hier)");
}

TEST(DevicePathChoice, RecordsSurviveTheWireAndTruncationIsAnError) {
  RankDevice d;
  d.host = 2;
  d.hostId = "node7";
  d.setting = "hier";
  d.device = 3;
  d.uuid = "GPU-12345678-9abc-def0-1234-56789abcdef0";
  d.peers = {"GPU-a", "GPU-b"};
  d.ipcUnusable = "x";
  d.ncclUnusable = "no libnccl";
  const std::vector<uint8_t> bytes = collectives::cuda::encodeRankDevice(d);
  const RankDevice back = collectives::cuda::decodeRankDevice(bytes);
  EXPECT_EQ(back.host, 2);
  EXPECT_EQ(back.hostId, "node7");
  EXPECT_EQ(back.setting, "hier");
  EXPECT_EQ(back.device, 3);
  EXPECT_EQ(back.uuid, d.uuid);
  EXPECT_EQ(back.peers, d.peers);
  EXPECT_EQ(back.unusable, "");
  EXPECT_EQ(back.ipcUnusable, "x");
  EXPECT_EQ(back.ncclUnusable, "no libnccl");
  for (size_t cut : {size_t{0}, size_t{5}, bytes.size() - 1}) {
    std::vector<uint8_t> shorter(bytes.begin(), bytes.begin() + cut);
    EXPECT_EQ(expectError([&] { collectives::cuda::decodeRankDevice(shorter); }).code(),
              ErrorCode::kInternal);
  }
  unsigned char raw[16];
  for (int i = 0; i < 16; ++i) raw[i] = static_cast<unsigned char>(i * 17);
  EXPECT_EQ(collectives::cuda::uuidText(raw), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

// ---- across real processes on pretend hosts ---------------------------------

// Runs body(comm) in n forked processes, rank r on pretend host hostOf[r]
// with KOLO_DEVICE_PATH settingOf(r); returns every rank's output after
// checking that each exited with 0 within the deadline.
std::vector<std::string> runJob(
    const std::vector<std::string>& hostOf,
    const std::function<std::string(int)>& settingOf,
    const std::function<int(api::CommunicatorImpl&, int rank)>& body) {
  const int n = static_cast<int>(hostOf.size());
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    Settings s = test::testSettings();
    s.devicePath = settingOf(rank);
    CommunicatorConfig config;
    config.rank = rank;
    config.size = n;
    config.rendezvous = address;
    config.hostStore = false;
    config.hostId = hostOf[rank];
    api::CommunicatorImpl comm(config, s);
    const int code = body(comm, rank);
    comm.barrier();
    return code;
  });
  std::vector<std::string> outputs;
  for (const test::RankOutcome& o : ranks.waitAll(std::chrono::seconds(60))) {
    EXPECT_TRUE(o.exited && o.exitCode == 0 && !o.hung)
        << "rank " << o.rank << " exit " << o.exitCode << " signal " << o.signal
        << (o.hung ? " hung" : "") << ":\n"
        << o.output;
    outputs.push_back(o.output);
  }
  return outputs;
}

// What deviceCollectives(device) answered, as one line.
std::string askPath(api::CommunicatorImpl& comm, int device) {
  try {
    collectives::cuda::DeviceCollectives* p = comm.deviceCollectives(device);
    return std::string("path ") + (p ? std::string(p->name()) : "staged") + " text '" +
           comm.devicePathText() + "'";
  } catch (const Error& e) {
    return "error " + std::to_string(static_cast<int>(e.code())) + ": " + e.what();
  }
}

int printPath(api::CommunicatorImpl& comm, int device) {
  std::printf("%s\n", askPath(comm, device).c_str());
  std::fflush(stdout);
  return 0;
}

// Every output holds exactly the same "error ..." line, which contains `part`.
void expectSameError(const std::vector<std::string>& outputs, const std::string& part) {
  ASSERT_FALSE(outputs.empty());
  const std::string line = outputs[0].substr(0, outputs[0].find('\n'));
  EXPECT_TRUE(contains(line, "error ") && contains(line, part)) << line;
  for (const std::string& o : outputs) EXPECT_EQ(o.substr(0, o.find('\n')), line);
}

class DevicePathProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    if (collectives::cuda::probeDevices().count > 0) {
      GTEST_SKIP() << "a CUDA device is present: these expectations are for a machine "
                      "without one (scripts/gpu-check.sh covers the device paths)";
    }
  }
};

TEST_F(DevicePathProcesses, WithoutADeviceEveryRankStages) {
  const auto outputs = runJob(
      {"a", "a", "b"}, [](int) { return "auto"; },
      [](api::CommunicatorImpl& comm, int) {
        printPath(comm, 0);
        printPath(comm, 0);  // the same, without communication
        return printPath(comm, 1);
      });
  for (const std::string& o : outputs) {
    EXPECT_TRUE(contains(o, "path staged text 'staged'\npath staged text 'staged'\n"))
        << o;
    EXPECT_TRUE(contains(o,
                         "collectives on CUDA device 1, but this communicator's device "
                         "path serves CUDA device 0 of this rank"))
        << o;
  }
}

// A job of one rank (no store): the same answer.
TEST_F(DevicePathProcesses, OneRankStagesToo) {
  const auto outputs = runJob(
      {"a"}, [](int) { return "auto"; },
      [](api::CommunicatorImpl& comm, int) { return printPath(comm, 0); });
  EXPECT_TRUE(contains(outputs.at(0), "path staged text 'staged'\n")) << outputs.at(0);
}

TEST_F(DevicePathProcesses, ForcedPathsFailByNameOnEveryRank) {
  for (const char* forced : {"ipc", "nccl", "hier"}) {
    const auto outputs = runJob(
        {"a", "b", "a"}, [&](int) { return forced; },
        [](api::CommunicatorImpl& comm, int) {
          printPath(comm, 0);
          return printPath(comm, 0);  // the same error again
        });
    expectSameError(outputs, "error 1: KOLO_DEVICE_PATH=" + std::string(forced) +
                                 ": rank 0 on host a has no usable CUDA device: ");
    for (const std::string& o : outputs) {
      const std::string first = o.substr(0, o.find('\n'));
      EXPECT_TRUE(contains(o, first + "\n" + first + "\n")) << o;
    }
  }
  // staged runs wherever.
  const auto outputs = runJob(
      {"a", "b"}, [](int) { return "staged"; },
      [](api::CommunicatorImpl& comm, int) { return printPath(comm, 0); });
  for (const std::string& o : outputs) EXPECT_TRUE(contains(o, "path staged")) << o;
}

TEST_F(DevicePathProcesses, DisagreeingSettingsFailOnEveryRank) {
  const auto outputs = runJob(
      {"a", "a", "b"}, [](int r) { return r == 2 ? "nccl" : "auto"; },
      [](api::CommunicatorImpl& comm, int) { return printPath(comm, 0); });
  expectSameError(outputs,
                  "error 4: KOLO_DEVICE_PATH differs between ranks: rank 0 has "
                  "'auto', rank 2 has 'nccl'");
}

// The exchange itself, with made-up devices (two ranks per GPU, GPUs
// numbered across pretend hosts): every rank gathers the same records, in
// rank order, and makes the same choice.
TEST(DevicePathExchange, EveryRankGathersTheSameTopology) {
  const std::vector<std::string> hosts = {"a", "b", "a", "b", "c"};
  const auto outputs = runJob(
      hosts, [](int) { return "auto"; },
      [](api::CommunicatorImpl& comm, int rank) {
        RankDevice mine;
        mine.host = comm.layout().crossRank;
        mine.hostId = comm.layout().hostId;
        mine.device = rank % 2;
        mine.uuid = "GPU-" + std::to_string(rank / 2);
        mine.peers = {"GPU-" + std::to_string(1 - rank / 2)};
        if (rank == 4) mine.ncclUnusable = "no NCCL here";
        const DeviceTopology t = comm.gatherDeviceTopology(mine);
        std::string line = "topology";
        for (const RankDevice& d : t.ranks) {
          line += " " + d.hostId + "/" + std::to_string(d.host) + "/" +
                  std::to_string(d.device) + "/" + d.uuid;
        }
        std::printf("%s\nchoice %s\n", line.c_str(), chooseDevicePath(t).text().c_str());
        return 0;
      });
  for (const std::string& o : outputs) {
    EXPECT_TRUE(contains(o,
                         "topology a/0/0/GPU-0 b/1/1/GPU-0 a/0/0/GPU-1 b/1/1/GPU-1 "
                         "c/2/0/GPU-2\n"))
        << o;
    EXPECT_TRUE(contains(o, "choice hier (ipc inside hosts, tcp between)\n")) << o;
  }
}

}  // namespace
}  // namespace kolo

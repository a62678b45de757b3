// The device path choice (device_path.h): facts drawn from the gathered
// topology (who shares a GPU, where NCCL or IPC cannot run, which GPUs of
// a host lack peer access), then the rules of the header, each a short
// function that either gives the path or the reason it cannot run.
#include "collectives/cuda/device_path.h"

#include <map>
#include <optional>
#include <sstream>

#include "collectives/cuda/device_identity.h"
#include "collectives/cuda/nccl_collectives.h"
#include "common/byte_codec.h"
#include "common/check.h"
#include "common/rank_text.h"

namespace kolo::collectives::cuda {
namespace {

constexpr std::string_view kSettingNames[] = {"auto", "staged", "ipc", "nccl", "hier"};

// What the rules ask of a topology, worked out once. Each "why" string is
// empty when nothing stands in the way.
struct Facts {
  std::vector<std::vector<int>> hosts;  // ranks of each host index
  std::string noDevice;                 // a rank without a usable device
  std::string sharedInJob;              // two ranks on one GPU anywhere
  std::string sharedOnHost;             // two ranks of one host on one GPU
  std::string noNccl;                   // a rank where NCCL cannot run
  std::string noIpc;                    // a host where IPC cannot serve its ranks
  bool severalPerHost = false;
};

std::string onHost(const RankDevice& d) {
  return "host " + (d.hostId.empty() ? std::to_string(d.host) : d.hostId);
}

std::string hostsText(const DeviceTopology& t,
                      const std::vector<std::vector<int>>& hosts) {
  std::ostringstream os;
  os << hosts.size() << " hosts (";
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (h > 0) os << "; ";
    os << onHost(t.ranks[hosts[h][0]]) << ": " << rankList(hosts[h], 8);
  }
  os << ")";
  return os.str();
}

bool canAccess(const RankDevice& from, const std::string& uuid) {
  for (const std::string& p : from.peers) {
    if (p == uuid) return true;
  }
  return false;
}

// Why IPC cannot join the ranks of one host: a rank that cannot take part,
// or two of its GPUs without peer access (either way round).
std::string ipcBlocker(const DeviceTopology& t, const std::vector<int>& ranks) {
  for (int r : ranks) {
    const RankDevice& d = t.ranks[r];
    if (!d.ipcUnusable.empty()) {
      return "CUDA IPC cannot run on " + rankText(r, d.hostId) + ": " + d.ipcUnusable;
    }
  }
  for (int a : ranks) {
    for (int b : ranks) {
      const RankDevice& da = t.ranks[a];
      const RankDevice& db = t.ranks[b];
      if (da.uuid == db.uuid || canAccess(da, db.uuid)) continue;
      return "GPU " + da.uuid + " of rank " + std::to_string(a) + " cannot access GPU " +
             db.uuid + " of rank " + std::to_string(b) + " peer to peer (" + onHost(da) +
             ")";
    }
  }
  return {};
}

std::string sharedText(const DeviceTopology& t, int a, int b) {
  const RankDevice& da = t.ranks[a];
  const RankDevice& db = t.ranks[b];
  std::string where = da.host == db.host
                          ? "on " + onHost(da)
                          : "(" + onHost(da) + " and " + onHost(db) + ": one machine)";
  return "ranks " + std::to_string(a) + " and " + std::to_string(b) + " share GPU " +
         da.uuid + " " + where;
}

void findSharing(const DeviceTopology& t, Facts& f) {
  std::map<std::string, int> firstOnGpu;  // uuid -> lowest rank using it
  for (int r = 0; r < static_cast<int>(t.ranks.size()); ++r) {
    auto [it, fresh] = firstOnGpu.emplace(t.ranks[r].uuid, r);
    if (fresh) continue;
    if (f.sharedInJob.empty()) f.sharedInJob = sharedText(t, it->second, r);
    // Another rank of this host on the GPU? (the first one may be elsewhere)
    for (int q = 0; q < r && f.sharedOnHost.empty(); ++q) {
      if (t.ranks[q].uuid == t.ranks[r].uuid && t.ranks[q].host == t.ranks[r].host) {
        f.sharedOnHost = sharedText(t, q, r);
      }
    }
  }
}

Facts factsOf(const DeviceTopology& t) {
  Facts f;
  for (int r = 0; r < static_cast<int>(t.ranks.size()); ++r) {
    const RankDevice& d = t.ranks[r];
    KOLO_CHECK(d.host >= 0);
    if (static_cast<size_t>(d.host) >= f.hosts.size()) f.hosts.resize(d.host + 1);
    f.hosts[d.host].push_back(r);
    if (f.noDevice.empty() && !d.unusable.empty()) {
      f.noDevice = rankText(r, d.hostId) + " has no usable CUDA device: " + d.unusable;
    }
    if (f.noNccl.empty() && !d.ncclUnusable.empty()) {
      f.noNccl = "NCCL cannot run on " + rankText(r, d.hostId) + ": " + d.ncclUnusable;
    }
  }
  for (const auto& ranks : f.hosts) {
    KOLO_CHECK(!ranks.empty());  // host indices are dense
    f.severalPerHost |= ranks.size() > 1;
  }
  if (!f.noDevice.empty()) return f;  // the rest compares devices
  findSharing(t, f);
  for (const auto& ranks : f.hosts) {
    if (f.noIpc.empty()) f.noIpc = ipcBlocker(t, ranks);
  }
  return f;
}

// The settings must agree; then one of kSettingNames.
const std::string& agreedSetting(const DeviceTopology& t) {
  KOLO_CHECK(!t.ranks.empty());
  const std::string& s = t.ranks[0].setting;
  for (size_t r = 1; r < t.ranks.size(); ++r) {
    if (t.ranks[r].setting != s) {
      KOLO_THROW(ErrorCode::kMismatch,
                 "KOLO_DEVICE_PATH differs between ranks: rank 0 has '"
                     << s << "', rank " << r << " has '" << t.ranks[r].setting
                     << "' (it must be the same on every rank)");
    }
  }
  for (std::string_view name : kSettingNames) {
    if (s == name) return s;
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "KOLO_DEVICE_PATH='" << s << "' (expected auto, staged, ipc, nccl or hier)");
}

DevicePathChoice make(DevicePath path, std::string reason) {
  DevicePathChoice c;
  c.path = path;
  c.reason = std::move(reason);
  return c;
}

// hier's inside: nccl where it can run, else ipc; nullopt with `why` set
// when neither can.
std::optional<DevicePathChoice> hierChoice(const DeviceTopology& t, const Facts& f,
                                           std::string& why) {
  DevicePathChoice c = make(DevicePath::kHier, "");
  c.inter = t.inter;
  if (f.sharedOnHost.empty() && f.noNccl.empty()) {
    c.intra = DevicePath::kNccl;
    c.reason = "nccl inside each host (one rank per GPU there), " + t.inter + " between";
    return c;
  }
  if (f.noIpc.empty()) {
    c.intra = DevicePath::kIpc;
    c.reason = "ipc inside each host (" +
               (!f.sharedOnHost.empty() ? f.sharedOnHost : f.noNccl) + "), " + t.inter +
               " between";
    return c;
  }
  why = "neither NCCL (" + (!f.sharedOnHost.empty() ? f.sharedOnHost : f.noNccl) +
        ") nor CUDA IPC (" + f.noIpc + ") can run inside the hosts";
  return std::nullopt;
}

DevicePathChoice chooseAuto(const DeviceTopology& t, const Facts& f) {
  if (!f.noDevice.empty()) return make(DevicePath::kStaged, f.noDevice);
  if (f.hosts.size() == 1) {
    if (f.sharedInJob.empty() && f.noNccl.empty()) {
      return make(DevicePath::kNccl, "one host, one rank per GPU, NCCL available");
    }
    const std::string notNccl = !f.sharedInJob.empty() ? f.sharedInJob : f.noNccl;
    if (f.noIpc.empty()) return make(DevicePath::kIpc, "one host; " + notNccl);
    return make(DevicePath::kStaged, notNccl + "; " + f.noIpc);
  }
  if (f.sharedInJob.empty() && f.noNccl.empty()) {
    return make(DevicePath::kNccl, "one rank per GPU on " +
                                       std::to_string(f.hosts.size()) +
                                       " hosts, NCCL available");
  }
  const std::string notNccl = !f.sharedInJob.empty() ? f.sharedInJob : f.noNccl;
  if (!f.severalPerHost) {
    return make(DevicePath::kStaged, notNccl +
                                         "; one rank per host: nothing to "
                                         "combine inside a host");
  }
  std::string why;
  if (auto c = hierChoice(t, f, why)) {
    c->reason = notNccl + "; " + c->reason;
    return *c;
  }
  return make(DevicePath::kStaged, why);
}

[[noreturn]] void cannot(const std::string& setting, const std::string& why) {
  KOLO_THROW(ErrorCode::kInvalidArgument, "KOLO_DEVICE_PATH=" << setting << ": " << why);
}

DevicePathChoice chooseForced(const std::string& s, const DeviceTopology& t,
                              const Facts& f) {
  if (s == "staged") return make(DevicePath::kStaged, "KOLO_DEVICE_PATH=staged");
  if (!f.noDevice.empty()) cannot(s, f.noDevice);
  if (s == "ipc") {
    if (f.hosts.size() > 1) {
      cannot(s, "the ranks are on " + hostsText(t, f.hosts) +
                    "; CUDA IPC joins the ranks of one host (KOLO_DEVICE_PATH=hier "
                    "composes it across hosts)");
    }
    if (!f.noIpc.empty()) cannot(s, f.noIpc);
    return make(DevicePath::kIpc, "KOLO_DEVICE_PATH=ipc");
  }
  if (s == "nccl") {
    if (!f.sharedInJob.empty())
      cannot(s, f.sharedInJob + "; NCCL takes one rank per GPU");
    if (!f.noNccl.empty()) cannot(s, f.noNccl);
    return make(DevicePath::kNccl, "KOLO_DEVICE_PATH=nccl");
  }
  KOLO_CHECK_EQ(s, std::string("hier"));
  std::string why;
  auto c = hierChoice(t, f, why);
  if (!c) cannot(s, why);
  c->reason = "KOLO_DEVICE_PATH=hier: " + c->reason;
  return *c;
}

}  // namespace

std::string_view devicePathName(DevicePath path) {
  switch (path) {
    case DevicePath::kStaged: return "staged";
    case DevicePath::kIpc: return "ipc";
    case DevicePath::kNccl: return "nccl";
    case DevicePath::kHier: return "hier";
  }
  return "?";
}

std::string DevicePathChoice::text() const {
  std::string s(devicePathName(path));
  if (path == DevicePath::kHier) {
    s += " (" + std::string(devicePathName(intra)) + " inside hosts, " + inter +
         " between)";
  }
  return s;
}

DevicePathChoice chooseDevicePath(const DeviceTopology& topology) {
  const std::string& setting = agreedSetting(topology);
  const Facts facts = factsOf(topology);
  if (setting == "auto") return chooseAuto(topology, facts);
  return chooseForced(setting, topology, facts);
}

// ---- the record on the wire ------------------------------------------------

namespace {

void putString(ByteWriter<std::vector<uint8_t>>& w, const std::string& s) {
  w.put<uint32_t>(static_cast<uint32_t>(s.size())).bytes(s);
}

std::string getString(ByteReader& r) {
  const auto n = r.get<uint32_t>();
  return std::string(r.bytes(n));
}

}  // namespace

std::vector<uint8_t> encodeRankDevice(const RankDevice& d) {
  std::vector<uint8_t> out;
  ByteWriter<std::vector<uint8_t>> w(out, kHostOrder);
  w.put<int32_t>(d.host).put<int32_t>(d.device);
  for (const std::string* s :
       {&d.hostId, &d.setting, &d.uuid, &d.unusable, &d.ipcUnusable, &d.ncclUnusable}) {
    putString(w, *s);
  }
  w.put<uint32_t>(static_cast<uint32_t>(d.peers.size()));
  for (const std::string& p : d.peers) putString(w, p);
  return out;
}

RankDevice decodeRankDevice(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes.data(), bytes.size(), kHostOrder);
  RankDevice d;
  d.host = r.get<int32_t>();
  d.device = r.get<int32_t>();
  for (std::string* s :
       {&d.hostId, &d.setting, &d.uuid, &d.unusable, &d.ipcUnusable, &d.ncclUnusable}) {
    *s = getString(r);
  }
  const auto peers = r.get<uint32_t>();
  for (uint32_t i = 0; i < peers && r.ok(); ++i) d.peers.push_back(getString(r));
  if (!r.ok() || r.remaining() != 0) {
    KOLO_THROW(ErrorCode::kInternal,
               "a device topology record of " << bytes.size() << " bytes is malformed");
  }
  return d;
}

// ---- this rank's record ----------------------------------------------------

std::string uuidText(const unsigned char (&bytes)[16]) {
  static const char* kHex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kHex[bytes[i] >> 4];
    s += kHex[bytes[i] & 15];
  }
  return s;
}

namespace {

// Why NCCL cannot run in this process; empty when it can.
std::string ncclUnusableHere() {
  return ncclAvailability().reason;  // empty when NCCL can run
}

// Why CUDA IPC collectives cannot run in this process; empty when they can.
// (Peer access between GPUs is the record's `peers`, judged per host by
// the choice; a usable device in a CUDA build is all IPC needs here.)
std::string ipcUnusableHere(int) {
  return {};
}

}  // namespace

RankDevice probeRankDevice(int device, int host, const std::string& hostId,
                           const std::string& setting) {
  RankDevice d;
  d.host = host;
  d.hostId = hostId;
  d.setting = setting;
  d.device = device;
  try {
    DeviceIdentity id = identifyDevice(device);
    d.uuid = std::move(id.uuid);
    d.peers = std::move(id.peers);
  } catch (const Error& e) {
    d.unusable = e.what();
    return d;
  }
  d.ipcUnusable = ipcUnusableHere(device);
  d.ncclUnusable = ncclUnusableHere();
  return d;
}

}  // namespace kolo::collectives::cuda

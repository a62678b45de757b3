// The device path of a communicator (communicator_impl.h,
// deviceCollectives): the ranks' device records gathered with two host
// allgathers (the records' lengths, then the records), the pure choice of
// collectives/cuda/device_path.h, then the chosen object built once and
// kept for the communicator's life.
#include <condition_variable>
#include <map>
#include <sstream>

#include "api/communicator_impl.h"
#include "collectives/cuda/hier_collectives.h"
#include "collectives/cuda/ipc_collectives.h"
#include "collectives/cuda/nccl_collectives.h"
#include "common/check.h"
#include "common/logging.h"

namespace kolo::api {

namespace dc = collectives::cuda;

// HierHost over this communicator: each run() is one operation of its
// queue, with a fresh context (the next tag block), under its failure rules
// (a lost peer breaks the communicator).
class CommunicatorImpl::DeviceHost : public dc::HierHost {
 public:
  explicit DeviceHost(CommunicatorImpl& comm) : comm_(comm) {}
  void run(const std::function<void(collectives::Context&)>& fn) override {
    comm_.queue_.runBlocking([&] {
      comm_.guarded([&] {
        collectives::Context ctx = comm_.nextContext();
        fn(ctx);
      });
    });
  }

 private:
  CommunicatorImpl& comm_;
};

struct CommunicatorImpl::DevicePath {
  int device = -1;
  dc::DevicePathChoice choice;
  std::exception_ptr failed;  // the first call's error, thrown again
  std::unique_ptr<dc::DeviceCollectives> collectives;
};

namespace {

// The store of a one-rank communicator, which has none: the device paths'
// factories meet their peers through a store, and with one rank there are
// none to meet.
class LocalStore : public rendezvous::Store {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    changed_.notify_all();
  }
  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      KOLO_THROW(ErrorCode::kTimeout, "store key '" << key << "' never set (one rank)");
    }
    return values_[key];
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_[key] += delta;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
  std::map<std::string, int64_t> counters_;
};

}  // namespace

dc::DeviceTopology CommunicatorImpl::gatherDeviceTopology(const dc::RankDevice& mine) {
  const std::vector<uint8_t> bytes = dc::encodeRankDevice(mine);
  const int64_t length = static_cast<int64_t>(bytes.size());
  std::vector<int64_t> lengths(size());
  AllgatherOptions o;
  o.send = &length;
  o.recv = lengths.data();
  o.count = 1;
  o.dtype = DataType::kInt64;
  allgather(o);
  std::vector<size_t> counts(lengths.begin(), lengths.end());
  std::vector<size_t> offsets(counts.size(), 0);
  size_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = total;
    total += counts[r];
  }
  std::vector<uint8_t> all(total);
  AllgatherOptions records;
  records.send = bytes.data();
  records.recv = all.data();
  records.counts = counts;
  records.dtype = DataType::kUInt8;
  allgather(records);

  dc::DeviceTopology topology;
  topology.inter = remoteMpi_ ? "mpi" : "tcp";
  for (size_t r = 0; r < counts.size(); ++r) {
    const auto* at = all.data() + offsets[r];
    topology.ranks.push_back(
        dc::decodeRankDevice(std::vector<uint8_t>(at, at + counts[r])));
  }
  return topology;
}

dc::DeviceCollectives* CommunicatorImpl::deviceCollectives(int device) {
  std::lock_guard<std::mutex> lock(deviceMu_);
  if (devicePath_) {
    if (device != devicePath_->device) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "rank " << rank() << ": collectives on CUDA device " << device
                         << ", but this communicator's device path serves CUDA device "
                         << devicePath_->device
                         << " of this rank (chosen at its first device collective): one "
                            "communicator runs on one device per rank");
    }
    if (devicePath_->failed) std::rethrow_exception(devicePath_->failed);
    return devicePath_->collectives.get();
  }
  auto path = std::make_shared<DevicePath>();
  path->device = device;
  devicePath_ = path;
  try {
    const dc::RankDevice mine = dc::probeRankDevice(
        device, layout().crossRank, layout().hostId, settings_.devicePath);
    path->choice = dc::chooseDevicePath(gatherDeviceTopology(mine));
    KOLO_LOG(kDebug) << "device path for CUDA device " << device << ": "
                     << path->choice.text() << " (" << path->choice.reason << ")";
    path->collectives = buildDevicePath(device, path->choice);
  } catch (const Error&) {
    path->failed = std::current_exception();
    throw;
  }
  return path->collectives.get();
}

std::string CommunicatorImpl::devicePathText() const {
  std::lock_guard<std::mutex> lock(deviceMu_);
  if (!devicePath_ || devicePath_->failed) return {};
  return devicePath_->choice.text();
}

std::unique_ptr<dc::DeviceCollectives> CommunicatorImpl::hierarchical(
    std::unique_ptr<dc::DeviceCollectives> intra,
    std::unique_ptr<dc::DeviceMemory> memory) {
  // One per communicator, kept by it: the objects refer to it.
  {
    std::lock_guard<std::mutex> lock(deviceHostMu_);
    if (!deviceHost_) deviceHost_ = std::make_shared<DeviceHost>(*this);
  }
  return std::make_unique<dc::HierCollectives>(
      std::move(intra), *deviceHost_, std::move(memory), topology_.hosts, rank());
}

// The chosen path's object; nullptr for staging. ipc serves the ranks of
// this host (for the flat path, all ranks); nccl the whole group, or the
// host's ranks inside hier. Store keys live under this communicator's name
// (its generation included).
std::unique_ptr<dc::DeviceCollectives> CommunicatorImpl::buildDevicePath(
    int device, const dc::DevicePathChoice& choice) {
  const bool flat = choice.path != dc::DevicePath::kHier;
  const dc::DevicePath kind = flat ? choice.path : choice.intra;
  if (kind == dc::DevicePath::kStaged) return nullptr;
  if (!store_ && !localStore_) localStore_ = std::make_shared<LocalStore>();
  rendezvous::Store& store = store_ ? *store_ : *localStore_;
  const std::string host = "/host" + std::to_string(layout().crossRank);
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(settings_.timeoutSeconds * 1000));
  std::unique_ptr<dc::DeviceCollectives> inner;
  if (kind == dc::DevicePath::kIpc) {
    dc::IpcOptions o;
    o.localRank = layout().localRank;
    o.localSize = layout().localSize;
    o.globalRanks = topology_.localRanks();
    o.device = device;
    o.timeout = timeout;
    o.name = config_.name + "/device/ipc" + host;
    inner = dc::makeIpcCollectives(o, store);
  } else {
    dc::NcclOptions o;
    o.rank = flat ? rank() : layout().localRank;
    o.size = flat ? size() : layout().localSize;
    if (!flat) o.globalRanks = topology_.localRanks();
    o.device = device;
    o.timeout = timeout;
    o.key = config_.name + "/device/nccl" + (flat ? std::string() : host);
    inner = dc::makeNcclCollectives(o, store);
  }
  if (flat) return inner;
  return hierarchical(std::move(inner), dc::cudaDeviceMemory(device));
}

}  // namespace kolo::api

#include "transport/cuda_ipc/ipc_group.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/backoff.h"
#include "common/check.h"
#include "rendezvous/store.h"
#include "transport/shm/shm_group.h"

namespace kolo::cuda_ipc {
namespace {

constexpr int kReady = 0;    // shm counter: this rank began step s
constexpr int kWritten = 1;  // shm counter: this rank enqueued its writes of step s
constexpr int kClosed = 2;   // shm counter: 1 once this rank closed its mappings

// A buffer as the step's descriptor carries it.
struct WireBuffer {
  Handle handle;
  uint64_t id;
  uint64_t offset;
  uint64_t bytes;
};

// The descriptor in a rank's staging slot (step parity); `values` follow.
struct Wire {
  uint64_t step;
  IpcGroup::Header header;
  uint32_t buffers;
  uint32_t values;
  WireBuffer buffer[IpcGroup::kMaxBuffers];
};

// What a rank publishes in the store once: its events and its pid.
struct WireEvents {
  Handle ready;
  Handle written;
  int64_t pid;
};

// True when the process is gone or a zombie.
bool processGone(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  return line[close + 2] == 'Z' || line[close + 2] == 'X';
}

const Wire& wireOf(shm::ShmGroup& shm, int r, uint64_t step) {
  return *reinterpret_cast<const Wire*>(shm.staging(r, static_cast<int>(step % 2)));
}

const uint64_t* valuesOf(const Wire& w) {
  return reinterpret_cast<const uint64_t*>(&w + 1);
}

}  // namespace

std::unique_ptr<IpcGroup> IpcGroup::create(const Options& options,
                                           rendezvous::Store& store,
                                           std::shared_ptr<IpcDevice> device) {
  KOLO_CHECK_GE(options.localSize, 1);
  KOLO_CHECK_EQ(static_cast<int>(options.globalRanks.size()), options.localSize);
  std::unique_ptr<IpcGroup> group(new IpcGroup(options, std::move(device)));
  shm::ShmGroup::Options so;
  so.localRank = options.localRank;
  so.localSize = options.localSize;
  so.globalRanks = options.globalRanks;
  so.slotBytes = sizeof(Wire) + sizeof(uint64_t) * kValuesPerRank * options.localSize;
  so.timeout = options.timeout;
  so.name = "cuda_ipc/" + options.name;
  group->shm_ = shm::ShmGroup::create(so, store);
  group->exchangeEvents(store);
  return group;
}

IpcGroup::IpcGroup(const Options& options, std::shared_ptr<IpcDevice> device)
    : options_(options),
      device_(std::move(device)),
      exports_(*device_, options.exportCacheEntries) {
  const size_t floor = 4 * static_cast<size_t>(options.localSize);
  mappings_ = std::make_unique<MappingCache>(*device_, options.mappingCacheEntries < floor
                                                           ? floor
                                                           : options.mappingCacheEntries);
  peerReady_.assign(options.localSize, nullptr);
  peerWritten_.assign(options.localSize, nullptr);
  pids_.assign(options.localSize, 0);
  mapped_.assign(static_cast<size_t>(options.localSize) * kMaxBuffers, nullptr);
}

IpcGroup::~IpcGroup() {
  mappings_.reset();  // unmaps the peers' buffers before their events go
  for (auto e : peerReady_)
    if (e != nullptr) device_->destroyEvent(e);
  for (auto e : peerWritten_)
    if (e != nullptr) device_->destroyEvent(e);
  for (auto e : {ready_, written_, done_})
    if (e != nullptr) device_->destroyEvent(e);
  for (auto& s : scratch_)
    if (s.data != nullptr) retired_.push_back(s.data);
  if (shm_ == nullptr) return;
  shm_->publish(kClosed, 1);
  if (retired_.empty() || !peersClosed()) return;  // left to the process's end
  for (void* p : retired_) device_->release(p);
}

bool IpcGroup::peersClosed() const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (int r = 0; r < options_.localSize; ++r) {
    if (r == options_.localRank) continue;
    while (shm_->counter(r, kClosed) < 1 && !processGone(pids_[r])) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return true;
}

// Each rank's two events and pid go through the store once (the n-th
// group under this name reads generation n's keys, as ShmGroup does).
void IpcGroup::exchangeEvents(rendezvous::Store& store) {
  ready_ = device_->createEvent();
  written_ = device_->createEvent();
  done_ = device_->createEvent();
  const std::string prefix = "cuda_ipc/" + options_.name;
  const std::string key =
      prefix + "/g" +
      std::to_string(
          store.add(prefix + "/generation/" + std::to_string(options_.localRank), 1)) +
      "/events/";
  WireEvents mine{device_->exportEvent(ready_), device_->exportEvent(written_),
                  static_cast<int64_t>(getpid())};
  std::vector<uint8_t> bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  store.set(key + std::to_string(options_.localRank), bytes);
  for (int r = 0; r < options_.localSize; ++r) {
    if (r == options_.localRank) continue;
    const std::vector<uint8_t> got = store.get(key + std::to_string(r), options_.timeout);
    if (got.size() != sizeof(WireEvents)) {
      KOLO_THROW_PEER(ErrorCode::kMismatch, globalRank(r),
                      "rank " << globalRank(options_.localRank)
                              << ": CUDA IPC events of rank " << globalRank(r) << " are "
                              << got.size() << " bytes, expected " << sizeof(WireEvents)
                              << " (a different kolo build?)");
    }
    WireEvents theirs{};
    std::memcpy(&theirs, got.data(), sizeof theirs);
    try {
      peerReady_[r] = device_->openEvent(theirs.ready);
      peerWritten_[r] = device_->openEvent(theirs.written);
    } catch (const Error& e) {
      KOLO_THROW_PEER(e.code(), globalRank(r),
                      "rank " << globalRank(options_.localRank)
                              << ": opening the CUDA IPC events of rank " << globalRank(r)
                              << " (pid " << theirs.pid << ") failed: " << e.what());
    }
    pids_[r] = theirs.pid;
  }
}

void IpcGroup::checkBuffers(const char* what, const std::vector<Buffer>& buffers) {
  for (const Buffer& buffer : buffers) {
    Allocation a;
    std::string why;
    if (buffer.bytes == 0 || device_->locate(buffer.data, &a, &why)) continue;
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalRank(options_.localRank) << ": " << what
                       << " through CUDA IPC: buffer " << buffer.data
                       << " is not memory of CUDA device " << device_->device() << ": "
                       << why);
  }
}

void IpcGroup::describe(int b, const Buffer& buffer, void* out, void* stream) {
  auto* wire = static_cast<WireBuffer*>(out);
  std::memset(wire, 0, sizeof *wire);
  wire->bytes = buffer.bytes;
  void*& local = mapped_[options_.localRank * kMaxBuffers + b];
  local = buffer.data;
  if (buffer.bytes == 0) return;
  Allocation a;
  std::string why;
  if (!device_->locate(buffer.data, &a, &why)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << globalRank(options_.localRank) << ": " << what_ << ": buffer "
                       << buffer.data << " is not memory of CUDA device "
                       << device_->device() << ": " << why);
  }
  if (exports_.handleFor(a, &wire->handle, &why)) {
    wire->id = a.id;
    wire->offset =
        static_cast<const uint8_t*>(buffer.data) - static_cast<const uint8_t*>(a.base);
    return;
  }
  // Not exportable (e.g. a virtual-memory allocation): through a kolo-owned
  // exported buffer, one more copy each way the data flows.
  Scratch& s = scratch_[b];
  if (s.bytes < buffer.bytes) {
    if (s.data != nullptr) retired_.push_back(s.data);
    s.data = nullptr;
    // Grown by half at least: the outgrown buffers stay allocated (retired_).
    const size_t bytes = std::max(buffer.bytes, s.bytes + s.bytes / 2);
    s.data = device_->allocate(bytes);
    s.bytes = bytes;
  }
  if (!device_->locate(s.data, &a, &why) || !exports_.handleFor(a, &wire->handle, &why)) {
    KOLO_THROW(ErrorCode::kInternal, "rank " << globalRank(options_.localRank) << ": "
                                             << what_
                                             << ": kolo's own staging buffer cannot be "
                                                "exported for CUDA IPC: "
                                             << why);
  }
  wire->id = a.id;
  wire->offset =
      static_cast<const uint8_t*>(s.data) - static_cast<const uint8_t*>(a.base);
  if (buffer.use != Use::kOutput)
    device_->copy(s.data, buffer.data, buffer.bytes, stream);
  local = s.data;
}

void IpcGroup::begin(const char* what, const Header& header,
                     const std::vector<Buffer>& buffers,
                     const std::vector<uint64_t>& values, void* stream) {
  KOLO_CHECK_LE(buffers.size(), static_cast<size_t>(kMaxBuffers));
  KOLO_CHECK_LE(values.size(), static_cast<size_t>(kValuesPerRank * options_.localSize));
  what_ = what;
  step_ = shm_->nextSequence();
  buffers_ = buffers;
  auto* wire = reinterpret_cast<Wire*>(shm_->staging(options_.localRank, step_ % 2));
  wire->step = step_;
  wire->header = header;
  wire->buffers = static_cast<uint32_t>(buffers.size());
  wire->values = static_cast<uint32_t>(values.size());
  for (size_t b = 0; b < buffers.size(); ++b)
    describe(static_cast<int>(b), buffers[b], &wire->buffer[b], stream);
  if (!values.empty()) {
    std::memcpy(reinterpret_cast<uint64_t*>(wire + 1), values.data(),
                values.size() * sizeof(uint64_t));
  }
  device_->record(ready_, stream);
  shm_->publish(kReady, step_);
}

void IpcGroup::checkHeaders() const {
  const Wire& mine = wireOf(*shm_, options_.localRank, step_);
  for (int r = 0; r < options_.localSize; ++r) {
    const Wire& w = wireOf(*shm_, r, step_);
    if (w.step != step_) {
      KOLO_THROW_PEER(ErrorCode::kInternal, globalRank(r),
                      "rank " << globalRank(options_.localRank) << ": " << what_
                              << ": rank " << globalRank(r) << " published step "
                              << w.step << " where step " << step_ << " was expected");
    }
    const IpcGroup::Header& a = mine.header;
    const IpcGroup::Header& b = w.header;
    if (a.kind != b.kind || a.dtype != b.dtype || a.op != b.op || a.root != b.root ||
        a.count != b.count || a.countsDigest != b.countsDigest) {
      KOLO_THROW_PEER(
          ErrorCode::kMismatch, globalRank(r),
          "rank " << globalRank(options_.localRank) << ": " << what_
                  << " through CUDA IPC: rank " << globalRank(r) << " called collective "
                  << b.kind << " (dtype " << b.dtype << ", op " << b.op << ", root "
                  << b.root << ", count " << b.count << ", counts digest "
                  << b.countsDigest << "), this rank collective " << a.kind << " (dtype "
                  << a.dtype << ", op " << a.op << ", root " << a.root << ", count "
                  << a.count << ", counts digest " << a.countsDigest << ")");
    }
  }
}

void IpcGroup::await(void* stream) {
  shm_->waitForAll(kReady, step_);
  checkHeaders();
  for (int r = 0; r < options_.localSize; ++r) {
    if (r == options_.localRank) continue;
    const Wire& w = wireOf(*shm_, r, step_);
    for (uint32_t b = 0; b < w.buffers; ++b) {
      const WireBuffer& wb = w.buffer[b];
      void* base = nullptr;
      try {
        if (wb.bytes != 0) base = mappings_->open(r, wb.id, wb.handle);
      } catch (const Error& e) {
        KOLO_THROW_PEER(e.code(), globalRank(r),
                        "rank " << globalRank(options_.localRank) << ": " << what_
                                << " through CUDA IPC: mapping buffer " << b
                                << " of rank " << globalRank(r) << " (" << wb.bytes
                                << " bytes) failed: " << e.what());
      }
      mapped_[r * kMaxBuffers + b] =
          base == nullptr ? nullptr : static_cast<uint8_t*>(base) + wb.offset;
    }
  }
  for (int r = 0; r < options_.localSize; ++r)
    if (r != options_.localRank) device_->streamWait(stream, peerReady_[r]);
}

uint64_t IpcGroup::value(int r, int k) const {
  const Wire& w = wireOf(*shm_, r, step_);
  KOLO_CHECK_LT(static_cast<uint32_t>(k), w.values);
  return valuesOf(w)[k];
}

void IpcGroup::finish(void* stream) {
  device_->record(written_, stream);
  shm_->publish(kWritten, step_);
  shm_->waitForAll(kWritten, step_);
  for (int r = 0; r < options_.localSize; ++r)
    if (r != options_.localRank) device_->streamWait(stream, peerWritten_[r]);
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& buffer = buffers_[b];
    void* local = mapped_[options_.localRank * kMaxBuffers + b];
    if (buffer.use != Use::kInput && local != buffer.data && buffer.bytes != 0)
      device_->copy(buffer.data, local, buffer.bytes, stream);
  }
  device_->record(done_, stream);
  pollDone();
}

// A peer whose process is gone while its written event of this step has
// not run is lost.
void IpcGroup::checkPeersAlive(const char* what) const {
  for (int r = 0; r < options_.localSize; ++r) {
    if (r == options_.localRank || !processGone(pids_[r])) continue;
    bool done = false;
    try {
      done = device_->query(peerWritten_[r]);
    } catch (const Error&) {
    }
    if (done) continue;
    KOLO_THROW_PEER(ErrorCode::kPeerLost, globalRank(r),
                    "rank " << globalRank(r) << " (pid " << pids_[r] << ") died during "
                            << what << " with rank " << globalRank(options_.localRank)
                            << " (CUDA IPC)");
  }
}

// Waits for the step's last event with the host polling it (never a
// blocking synchronize, which could not time out).
void IpcGroup::pollDone() {
  Backoff backoff(std::chrono::microseconds(50));
  auto lastCheck = Backoff::Clock::now();
  while (!device_->query(done_)) {
    if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
    const auto now = Backoff::Clock::now();
    if (now - lastCheck < std::chrono::milliseconds(100)) continue;
    lastCheck = now;
    checkPeersAlive(what_);
    if (backoff.idleFor() <= options_.timeout) continue;
    throwStuck();
  }
}

// Who holds the step up: this rank's stream still busy with work from
// before the collective, else the first peer whose stream is (its ready
// event has not run), else the first peer whose writes have not run.
void IpcGroup::throwStuck() const {
  auto done = [this](IpcDevice::Event e) {
    try {
      return device_->query(e);
    } catch (const Error&) {
      return false;
    }
  };
  int stuck = -1;
  std::string cause = "this rank's own work of the step has not finished";
  if (!done(ready_)) {
    cause =
        "this rank's stream has not reached the collective (work enqueued before it "
        "has not finished)";
  } else {
    for (int pass = 0; pass < 2 && stuck < 0; ++pass) {
      for (int r = 0; r < options_.localSize && stuck < 0; ++r) {
        if (r == options_.localRank) continue;
        if (!done(pass == 0 ? peerReady_[r] : peerWritten_[r])) {
          stuck = r;
          cause = "rank " + std::to_string(globalRank(r)) +
                  (pass == 0 ? "'s stream has not reached the collective"
                             : "'s writes have not run");
        }
      }
    }
  }
  const int peer = stuck < 0 ? -1 : globalRank(stuck);
  KOLO_THROW_PEER(ErrorCode::kTimeout, peer,
                  "rank " << globalRank(options_.localRank) << " timed out after "
                          << options_.timeout.count() / 1000.0 << " s waiting for "
                          << what_ << " through CUDA IPC to finish on the device: "
                          << cause << " (KOLO_TIMEOUT)");
}

}  // namespace kolo::cuda_ipc

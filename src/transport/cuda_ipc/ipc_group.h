// One step of a collective between the ranks of a host through CUDA IPC:
// who may touch whose buffers when. The collectives (collectives/cuda/
// ipc_collectives.h) are schedules of device work between begin() and
// finish(); this class owns the exchange of buffers, the events and the
// host-side step counters.
//
// A step, on every rank, with `s` its step number:
//  1. begin(): each buffer of the call is exported (handle cached by
//     allocation id; memory that cannot be exported is staged through a
//     kolo-owned exported buffer: inputs copied in on the stream here,
//     outputs copied out in finish()); the step's descriptor (header, the
//     buffers' handles, ids and offsets, per-rank values such as counts)
//     goes into this rank's slot of the shared-memory group; the "ready"
//     event is recorded on the caller's stream; counter kReady = s.
//  2. await(): waits until every peer's kReady >= s (so its ready event
//     holds step s's record: cudaStreamWaitEvent waits on the latest record
//     at the time of the call), checks that the headers agree, maps the
//     peers' buffers (cached by (peer, allocation id)), and makes the
//     caller's stream wait on every peer's ready event. The collective then
//     enqueues its kernel / copies, which may read and write peers' buffers.
//  3. finish(): records "written", counter kWritten = s; waits until every
//     peer's kWritten >= s and makes the stream wait on their written
//     events (no rank's stream goes on while a peer still writes its recv
//     or reads its send); copies staged outputs out; records "done" and
//     polls it until the step has run on the device.
// A peer reuses its events and slot only in step s+1's begin, which comes
// after its finish of step s, which waited for everyone's kWritten >= s,
// published after everyone's await of step s: no event is re-recorded
// before every peer has made its stream wait on the record of step s.
//
// Failures (never a hang): a peer not at the step within the timeout, or
// whose process is gone, is Error(kTimeout / kPeerLost) naming its global
// rank (shm::ShmGroup's waits); the final poll does the same for a step
// the device does not finish (naming the first peer whose written event
// has not run); disagreeing headers are Error(kMismatch) naming both
// ranks. After an error the caller must not use the group again.
//
// Lifetime: CUDA makes a cudaFree of memory that another process still
// maps undefined. A peer keeps this rank's allocations mapped (cache) until
// evicted or until its group ends; kolo's own staging buffers are freed
// only after every peer's group ended (else left to the process's end). A
// caller's buffers are the caller's: see docs/gpu.md ("CUDA IPC").
//
// Thread safety: one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/cuda_ipc/ipc_caches.h"
#include "transport/cuda_ipc/ipc_device.h"

namespace kolo::rendezvous {
class Store;
}
namespace kolo::shm {
class ShmGroup;
}

namespace kolo::cuda_ipc {

class IpcGroup {
 public:
  struct Options {
    int localRank = 0;
    int localSize = 1;
    std::vector<int> globalRanks;  // global rank of each local rank (errors)
    std::chrono::milliseconds timeout{30000};
    std::string name;  // unique per job and group: store keys, segment name
    size_t mappingCacheEntries = 64;  // per group; raised to 4 * localSize
    size_t exportCacheEntries = 256;
  };

  // What every rank must agree on in a step (compared field by field).
  struct Header {
    uint32_t kind = 0;  // the collective
    int32_t dtype = 0;
    int32_t op = 0;
    int32_t root = 0;
    uint64_t count = 0;
    uint64_t countsDigest = 0;  // of the per-rank counts that must agree
  };
  // How the step uses a buffer of this rank.
  enum class Use : uint32_t { kInput, kOutput, kInOut };
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    Use use = Use::kInput;
  };
  static constexpr int kMaxBuffers = 2;
  // begin() takes up to kValuesPerRank * localSize values.
  static constexpr int kValuesPerRank = 2;

  // Collective over the local ranks: the shared-memory group, each rank's
  // ready / written events exported and opened by every peer.
  static std::unique_ptr<IpcGroup> create(const Options& options,
                                          rendezvous::Store& store,
                                          std::shared_ptr<IpcDevice> device);
  ~IpcGroup();
  IpcGroup(const IpcGroup&) = delete;
  IpcGroup& operator=(const IpcGroup&) = delete;

  int localRank() const { return options_.localRank; }
  int localSize() const { return options_.localSize; }
  int globalRank(int local) const { return options_.globalRanks[local]; }
  IpcDevice& device() { return *device_; }

  // Error(kInvalidArgument) naming `what` when a buffer with bytes is not
  // memory of the device (before any step: nothing changes).
  void checkBuffers(const char* what, const std::vector<Buffer>& buffers);

  // Step 1. `values`: up to kValuesPerRank * localSize numbers peers may
  // read (value()).
  // `what` names the collective in errors.
  void begin(const char* what, const Header& header, const std::vector<Buffer>& buffers,
             const std::vector<uint64_t>& values, void* stream);
  // Step 2.
  void await(void* stream);
  // After await: buffer b of local rank r as this process addresses it
  // (this rank's own: its memory, or the staging buffer that stands for it).
  void* buffer(int r, int b) const { return mapped_[r * kMaxBuffers + b]; }
  uint64_t value(int r, int k) const;
  // Step 3.
  void finish(void* stream);

  // For tests: the caches.
  const MappingCache& mappings() const { return *mappings_; }
  const ExportCache& exports() const { return exports_; }

 private:
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };
  IpcGroup(const Options& options, std::shared_ptr<IpcDevice> device);
  void exchangeEvents(rendezvous::Store& store);
  // Fills the wire form of buffer b (exporting, or staging it).
  void describe(int b, const Buffer& buffer, void* wire, void* stream);
  void checkHeaders() const;
  void pollDone();
  [[noreturn]] void throwStuck() const;
  void checkPeersAlive(const char* what) const;
  // The destructor's half: true once every peer closed its mappings of
  // this rank's memory (or is gone), waiting at most ~1 s.
  bool peersClosed() const;

  Options options_;
  std::shared_ptr<IpcDevice> device_;
  std::unique_ptr<shm::ShmGroup> shm_;
  ExportCache exports_;
  std::unique_ptr<MappingCache> mappings_;
  IpcDevice::Event ready_ = nullptr;
  IpcDevice::Event written_ = nullptr;
  IpcDevice::Event done_ = nullptr;
  std::vector<IpcDevice::Event> peerReady_;    // by local rank (own: null)
  std::vector<IpcDevice::Event> peerWritten_;  // by local rank (own: null)
  std::vector<int64_t> pids_;                  // by local rank
  Scratch scratch_[kMaxBuffers];
  // Staging buffers outgrown: peers may still map them (CUDA leaves a
  // cudaFree of memory another process maps undefined), so they are freed
  // only by the destructor, once the peers closed their mappings.
  std::vector<void*> retired_;
  // The current step.
  const char* what_ = "";
  uint64_t step_ = 0;
  std::vector<Buffer> buffers_;
  std::vector<void*> mapped_;  // localSize * kMaxBuffers
};

}  // namespace kolo::cuda_ipc

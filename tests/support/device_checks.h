// Checks of a DeviceCollectives (any path: hierarchical over host doubles
// in device_path_hier_test, the chosen path on a GPU in device_path_check):
// every collective, element by element, against kolo's CPU kernels on
// values that every dtype holds exactly (small whole numbers), so any
// order of reduction gives the same bits.
//
// A Rig says how to reach the buffers: put(i, bytes) writes buffer i from
// its start, get(i) reads kRigBufferBytes of it, each once the work
// enqueued on the stream before has run. Each check prints "MISMATCH
// <what> at byte N" for a wrong result and returns false.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/cuda/device_collectives.h"

namespace kolo::test {

inline constexpr size_t kRigBufferBytes = 16 * 1024;

struct Rig {
  collectives::cuda::DeviceCollectives* paths = nullptr;
  void* buf[2] = {nullptr, nullptr};  // kRigBufferBytes each
  void* stream = nullptr;
  std::function<void(int, const std::vector<uint8_t>&)> put;
  std::function<std::vector<uint8_t>(int)> get;

  // put/get by memcpy, for buffers the host can address, after sync().
  static Rig hostAddressable(collectives::cuda::DeviceCollectives* paths, void* a,
                             void* b, void* stream, std::function<void()> sync);
};

// This rank's input and every rank's reduction (kolo's CPU kernels).
std::vector<uint8_t> inputOf(int rank, size_t count, DataType t, ReduceOp op);
std::vector<uint8_t> expectedOf(int size, size_t count, DataType t, ReduceOp op);

// Every dtype and op, 0/1/4/1003 elements, out of place and in place.
bool checkAllreduce(Rig& rig, int rank, int size);
// Broadcast from every root; allgather with counts that differ by rank.
bool checkBroadcastAndAllgather(Rig& rig, int rank, int size);
// Reducescatter (sum, average, max) and alltoall with counts that differ.
bool checkReduceScatterAndAlltoall(Rig& rig, int rank, int size);
// All of the above; every rank runs every check whatever failed before.
bool checkAll(Rig& rig, int rank, int size);

}  // namespace kolo::test

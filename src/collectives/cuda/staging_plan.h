// Which device buffers of one collective move to and from host memory
// together (docs/gpu.md, "The host-staged path"). Pure logic, no CUDA:
// compiled in every build and tested without a GPU.
//
// A fused collective lays its tensors out back to back in one host buffer
// (the fusion buffer). On the device side, tensors on one device that sit
// next to each other in that layout form a run: gathered into a device
// fusion buffer (one device-to-device copy each), then copied to the host
// in ONE copy; back the same way. A run of one tensor is copied directly.
//
// Contract
// - planRuns(pieces): pieces in layout order (offset ascending). A run is a
//   maximal sequence of consecutive pieces with the same device whose
//   offsets are contiguous (each starts where the previous ends). A piece
//   with device < 0 (no device data: a joined rank's share, a host tensor)
//   belongs to no run. Zero-byte pieces join their neighbours' run and
//   make no copy. Throws Error(kInvalidArgument) naming the piece when the
//   offsets go backwards or overlap.
// - Deterministic; thread-compatible.
#pragma once

#include <cstddef>
#include <vector>

namespace kolo::collectives::cuda {

struct StagedPiece {
  int device = -1;              // CUDA device ordinal of the tensor; < 0: none
  size_t offset = 0;            // byte offset in the host (fusion) buffer
  size_t bytes = 0;             // byte size
  const void* input = nullptr;  // device memory read into the host buffer (may be null)
  void* output = nullptr;       // device memory written from it (may be null)
  const void* entry = nullptr;  // the piece's DeviceEntry (device_staging.h)
};

struct StagingRun {
  int device = -1;
  size_t first = 0;   // index of the first piece
  size_t count = 0;   // pieces in the run
  size_t offset = 0;  // the run's byte offset in the host buffer
  size_t bytes = 0;   // the run's bytes: one host copy each way
};

std::vector<StagingRun> planRuns(const std::vector<StagedPiece>& pieces);

}  // namespace kolo::collectives::cuda

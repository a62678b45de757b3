// What every rank must agree on for one named operation, and how two specs
// are compared.
#pragma once

#include <kolo/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/byte_codec.h"

namespace kolo::runtime {

enum class OpKind : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReduceScatter,
  kBarrier,
  kJoin,  // internal: the join() marker
};

const char* toString(OpKind kind);

struct OpSpec {
  std::string name;  // unique among the operations pending on a rank
  OpKind kind = OpKind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // allreduce, reducescatter
  std::vector<int64_t> shape;    // allgather: the first dimension may differ
  int root = 0;                  // broadcast
  double prescale = 1.0;         // allreduce: input multiplied before, output after
  double postscale = 1.0;
  // Operations submitted together (enqueueGroup) share a non-zero group id
  // and always run in one bucket. The id is a hash of the members' sorted
  // names (groupId()), so it is the same on every rank and in every step
  // whatever the submission order, and a repeated group stays cached.
  uint64_t group = 0;
  uint32_t groupSize = 0;
  // The tensor is CUDA device memory (a `_cuda` submission; staged through
  // host memory, docs/gpu.md). Agreed across ranks (a mismatch names field
  // "memory") and part of the fusion key: device and host tensors never
  // share a bucket. The device ordinal is the rank's own (not agreed).
  bool onDevice = false;
  // The submitting rank's CUDA device ordinal of a device tensor (-1: host
  // memory). Not compared (each rank's own), but carried to every rank
  // (ReadyOp::devices), so that every rank decides alike whether the
  // operation can run on the communicator's device path
  // (runtime_device.cc).
  int32_t device = -1;

  int64_t elements() const;  // product of shape (1 for a scalar)
  size_t bytes() const;

  // Byte encoding for the negotiation messages (host byte order, the
  // negotiation's; versioned); decode throws Error(kInvalidArgument) on
  // malformed input. The reader (or p) moves past the spec.
  void encode(std::vector<uint8_t>& out) const;
  static OpSpec decode(ByteReader& in);
  static OpSpec decode(const uint8_t*& p, const uint8_t* end);
};

// The first field on which a and b disagree, for the mismatch error: e.g.
// {"shape", "[128, 64]", "[128, 65]"}; nullopt when they agree. For
// allgather the first dimension may differ; for alltoall the first
// dimension must divide by the team size (checked elsewhere).
struct SpecDifference {
  std::string field;
  std::string a;
  std::string b;
};
std::optional<SpecDifference> compareSpecs(const OpSpec& a, const OpSpec& b);

// Kinds whose first dimension may differ between ranks (allgather, and
// alltoall, whose splits may differ).
bool firstDimMayDiffer(OpKind kind);

// compareSpecs finds no difference and the first dimensions are equal too
// (fields that do not matter for the kind, e.g. the root of an allreduce,
// are ignored).
bool sameSpec(const OpSpec& a, const OpSpec& b);

// The value of one field as compareSpecs writes it ("shape" -> "[128, 64]"),
// for the mismatch text listing each rank's value.
std::string fieldValue(const OpSpec& spec, const std::string& field);

// "[128, 64]"; "[]" for a scalar.
std::string shapeString(const std::vector<int64_t>& shape);

// The group id of operations submitted together under these names: a
// non-zero hash of the sorted names.
uint64_t groupId(std::vector<std::string> names);

}  // namespace kolo::runtime

#include "runtime/op_spec.h"

#include <algorithm>
#include <sstream>

#include "common/check.h"

namespace kolo::runtime {

namespace {

// Encoding, version 3, in host byte order (both ends are one build of
// kolo):
//   u8 version, u32 name length, name bytes, u8 kind, u8 dtype, u8 op,
//   u32 dims, i64 x dims, i32 root, f64 prescale, f64 postscale,
//   u64 group, u32 groupSize, u8 onDevice, i32 device.
constexpr uint8_t kVersion = 3;
constexpr uint32_t kMaxNameBytes = 1 << 20;
constexpr uint32_t kMaxDims = 64;
constexpr ByteOrder kOrder = kHostOrder;

template <typename T>
T take(ByteReader& in) {
  if (in.remaining() < sizeof(T)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "malformed operation spec: truncated ("
                                                << in.remaining() << " bytes left, "
                                                << sizeof(T) << " needed)");
  }
  return in.get<T>();
}

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

const char* toString(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAlltoall: return "alltoall";
    case OpKind::kReduceScatter: return "reducescatter";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kJoin: return "join";
  }
  return "invalid-kind";
}

int64_t OpSpec::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t OpSpec::bytes() const {
  if (kind == OpKind::kBarrier || kind == OpKind::kJoin) return 0;
  return static_cast<size_t>(elements()) * elementSize(dtype);
}

void OpSpec::encode(std::vector<uint8_t>& out) const {
  ByteWriter w(out, kOrder);
  w.put<uint8_t>(kVersion);
  w.put<uint32_t>(static_cast<uint32_t>(name.size()));
  w.bytes(name);
  w.put<uint8_t>(static_cast<uint8_t>(kind));
  w.put<uint8_t>(static_cast<uint8_t>(dtype));
  w.put<uint8_t>(static_cast<uint8_t>(op));
  w.put<uint32_t>(static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) w.put<int64_t>(d);
  w.put<int32_t>(root);
  w.put<double>(prescale);
  w.put<double>(postscale);
  w.put<uint64_t>(group);
  w.put<uint32_t>(groupSize);
  w.put<uint8_t>(onDevice ? 1 : 0);
  w.put<int32_t>(device);
}

OpSpec OpSpec::decode(const uint8_t*& p, const uint8_t* end) {
  ByteReader in(p, static_cast<size_t>(end - p), kOrder);
  OpSpec s = decode(in);
  p = in.cursor();
  return s;
}

OpSpec OpSpec::decode(ByteReader& in) {
  OpSpec s;
  const auto version = take<uint8_t>(in);
  if (version != kVersion) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "malformed operation spec: version "
                                                << int(version) << ", expected "
                                                << int(kVersion));
  }
  const auto nameBytes = take<uint32_t>(in);
  if (nameBytes > kMaxNameBytes || in.remaining() < nameBytes) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "malformed operation spec: name of "
                                                << nameBytes << " bytes, "
                                                << in.remaining() << " left");
  }
  s.name.assign(in.bytes(nameBytes));
  const auto kind = take<uint8_t>(in);
  if (kind > static_cast<uint8_t>(OpKind::kJoin)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "malformed operation spec '" << s.name << "': kind " << int(kind));
  }
  s.kind = static_cast<OpKind>(kind);
  s.dtype = static_cast<DataType>(take<uint8_t>(in));
  s.op = static_cast<ReduceOp>(take<uint8_t>(in));
  if (!isValid(s.dtype) || !isValid(s.op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "malformed operation spec '"
                                                << s.name << "': dtype " << int(s.dtype)
                                                << ", op " << int(s.op));
  }
  const auto dims = take<uint32_t>(in);
  if (dims > kMaxDims) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "malformed operation spec '" << s.name << "': " << dims << " dimensions");
  }
  s.shape.resize(dims);
  for (auto& d : s.shape) d = take<int64_t>(in);
  s.root = take<int32_t>(in);
  s.prescale = take<double>(in);
  s.postscale = take<double>(in);
  s.group = take<uint64_t>(in);
  s.groupSize = take<uint32_t>(in);
  s.onDevice = take<uint8_t>(in) != 0;
  s.device = take<int32_t>(in);
  return s;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool firstDimMayDiffer(OpKind kind) {
  return kind == OpKind::kAllgather || kind == OpKind::kAlltoall;
}

std::string fieldValue(const OpSpec& spec, const std::string& field) {
  if (field == "name") return "'" + spec.name + "'";
  if (field == "kind") return toString(spec.kind);
  if (field == "dtype") return std::string(toString(spec.dtype));
  if (field == "reduction") return std::string(toString(spec.op));
  if (field == "shape") return shapeString(spec.shape);
  if (field == "root") return std::to_string(spec.root);
  if (field == "prescale") return number(spec.prescale);
  if (field == "postscale") return number(spec.postscale);
  if (field == "memory") return spec.onDevice ? "CUDA device memory" : "host memory";
  if (field == "group") {
    if (spec.group == 0) return "no group";
    std::ostringstream os;
    os << "group " << std::hex << spec.group << std::dec << " of " << spec.groupSize;
    return os.str();
  }
  return "?";
}

// Fields in the order they are compared; the first that differs is
// reported. The reduction matters only where something is reduced, the
// root only for broadcast, the scale factors only for reductions.
std::optional<SpecDifference> compareSpecs(const OpSpec& a, const OpSpec& b) {
  auto diff = [&](const char* field) {
    return SpecDifference{field, fieldValue(a, field), fieldValue(b, field)};
  };
  if (a.name != b.name) return diff("name");
  if (a.kind != b.kind) return diff("kind");
  if (a.kind == OpKind::kBarrier || a.kind == OpKind::kJoin) {
    if (a.group != b.group || a.groupSize != b.groupSize) return diff("group");
    return std::nullopt;
  }
  if (a.dtype != b.dtype) return diff("dtype");
  if (a.onDevice != b.onDevice) return diff("memory");
  const bool reduces = a.kind == OpKind::kAllreduce || a.kind == OpKind::kReduceScatter;
  if (reduces && a.op != b.op) return diff("reduction");
  if (a.shape.size() != b.shape.size()) return diff("shape");
  const size_t from = firstDimMayDiffer(a.kind) ? 1 : 0;
  for (size_t i = from; i < a.shape.size(); ++i) {
    if (a.shape[i] != b.shape[i]) return diff("shape");
  }
  if (a.kind == OpKind::kBroadcast && a.root != b.root) return diff("root");
  if (reduces && a.prescale != b.prescale) return diff("prescale");
  if (reduces && a.postscale != b.postscale) return diff("postscale");
  if (a.group != b.group || a.groupSize != b.groupSize) return diff("group");
  return std::nullopt;
}

bool sameSpec(const OpSpec& a, const OpSpec& b) {
  if (compareSpecs(a, b)) return false;
  return a.shape.empty() || a.shape[0] == b.shape[0];
}

uint64_t groupId(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  // FNV-1a over the names, each followed by a 0 byte.
  uint64_t h = 1469598103934665603ull;
  for (const auto& n : names) {
    for (unsigned char c : n) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0;
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

}  // namespace kolo::runtime

#include "frameworks/torch/byte_collectives.h"

#include <cstdint>
#include <cstring>

namespace kolo::torch {
namespace {

using runtime::OpKind;
using runtime::OpRequest;

OpRequest request(const std::string& name, OpKind kind, DataType dtype, int64_t count) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = kind;
  r.spec.dtype = dtype;
  r.spec.shape = {count};
  return r;
}

}  // namespace

// The length first, then the bytes (the others size their buffer by it).
std::string broadcastBytes(Context& context, const std::string& name, std::string bytes,
                           int root) {
  int64_t length = static_cast<int64_t>(bytes.size());
  OpRequest r = request(name + "/length", OpKind::kBroadcast, DataType::kInt64, 1);
  r.spec.root = root;
  r.input = r.output = &length;
  context.runtime().enqueue(r)->wait();
  bytes.resize(static_cast<size_t>(length));
  if (length == 0) return bytes;
  r = request(name + "/data", OpKind::kBroadcast, DataType::kUInt8, length);
  r.spec.root = root;
  r.input = r.output = bytes.data();
  context.runtime().enqueue(r)->wait();
  return bytes;
}

// Each rank's length first, then the rows, whose first dimension may differ
// by rank: the output is the ranks' bytes end to end, in rank order.
std::vector<std::string> allgatherBytes(Context& context, const std::string& name,
                                        const std::string& bytes) {
  const int n = context.size();
  int64_t length = static_cast<int64_t>(bytes.size());
  OpRequest r = request(name + "/length", OpKind::kAllgather, DataType::kInt64, 1);
  r.input = &length;
  auto lengths = context.runtime().enqueue(r);
  lengths->wait();
  std::vector<int64_t> sizes(static_cast<size_t>(n));
  std::memcpy(sizes.data(), lengths->output().data(), sizes.size() * sizeof(int64_t));

  r = request(name + "/data", OpKind::kAllgather, DataType::kUInt8, length);
  r.input = bytes.data();
  auto data = context.runtime().enqueue(r);
  data->wait();
  std::vector<std::string> out;
  size_t at = 0;
  for (int64_t size : sizes) {
    out.emplace_back(reinterpret_cast<const char*>(data->output().data()) + at,
                     static_cast<size_t>(size));
    at += static_cast<size_t>(size);
  }
  return out;
}

}  // namespace kolo::torch

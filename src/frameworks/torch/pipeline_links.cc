#include "frameworks/torch/pipeline_links.h"

#include "common/check.h"

namespace kolo::torch::pipeline {

namespace {

// A descriptor's fixed part: status, stage, text length, dtype, ndim, dims.
constexpr size_t kMaxDims = 8;
constexpr size_t kFixed = 5 + kMaxDims;

// A point-to-point message's options (SendOptions or RecvOptions).
template <class Options, class Buffer>
Options messageOptions(Buffer data, size_t count, DataType dtype, int peer, int tag,
                       uint32_t channel) {
  Options o;
  o.buffer = data;
  o.count = count;
  o.dtype = dtype;
  o.peer = peer;
  o.tag = tag;
  o.channel = channel;
  return o;
}

SendOptions sendOptions(const void* data, size_t count, DataType dtype, int peer, int tag,
                        uint32_t channel) {
  return messageOptions<SendOptions>(data, count, dtype, peer, tag, channel);
}

RecvOptions recvOptions(void* data, size_t count, DataType dtype, int peer, int tag,
                        uint32_t channel) {
  return messageOptions<RecvOptions>(data, count, dtype, peer, tag, channel);
}

}  // namespace

void Links::sendDescriptor(int stage, int tag, const Descriptor& d) {
  if (d.shape.size() > kMaxDims) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline: an activation of " << d.shape.size() << " dimensions (at most "
                                             << kMaxDims << ")");
  }
  int64_t fixed[kFixed] = {d.status, d.stage, static_cast<int64_t>(d.text.size()),
                           static_cast<int64_t>(d.dtype),
                           static_cast<int64_t>(d.shape.size())};
  for (size_t i = 0; i < d.shape.size(); ++i) fixed[5 + i] = d.shape[i];
  comm_.send(sendOptions(fixed, kFixed, DataType::kInt64, stage, tag, channel_));
  if (!d.text.empty()) {
    comm_.send(sendOptions(d.text.data(), d.text.size(), DataType::kUInt8, stage, tag,
                           channel_));
  }
}

Descriptor Links::recvDescriptor(int stage, int tag) {
  int64_t fixed[kFixed] = {};
  comm_.recv(recvOptions(fixed, kFixed, DataType::kInt64, stage, tag, channel_));
  Descriptor d;
  d.status = fixed[0];
  d.stage = static_cast<int>(fixed[1]);
  d.dtype = static_cast<at::ScalarType>(fixed[3]);
  d.shape.assign(fixed + 5, fixed + 5 + std::min<int64_t>(fixed[4], kMaxDims));
  if (fixed[2] > 0) {
    d.text.resize(static_cast<size_t>(fixed[2]));
    comm_.recv(recvOptions(d.text.data(), d.text.size(), DataType::kUInt8, stage, tag,
                           channel_));
  }
  return d;
}

void Links::isendTensor(int stage, int tag, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  auto work = comm_.isend(
      sendOptions(c.data_ptr(), c.nbytes(), DataType::kUInt8, stage, tag, channel_));
  pending_.emplace_back(std::move(work), std::move(c));
}

at::Tensor Links::recvTensor(int stage, int tag, at::ScalarType dtype,
                             const std::vector<int64_t>& shape) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
  try {
    comm_.recv(
        recvOptions(t.data_ptr(), t.nbytes(), DataType::kUInt8, stage, tag, channel_));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kMismatch) throw;
    return at::Tensor();
  }
  return t;
}

void Links::sendPoison(int stage, int tag) {
  int64_t poison = 0;
  comm_.send(sendOptions(&poison, 1, DataType::kInt64, stage, tag, channel_));
}

void Links::flush(bool quiet) {
  auto pending = std::move(pending_);
  pending_.clear();
  std::exception_ptr first;
  for (auto& [work, tensor] : pending) {
    try {
      work->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first && !quiet) std::rethrow_exception(first);
}

}  // namespace kolo::torch::pipeline

#include "frameworks/torch/distributed_optimizer.h"

#include <map>
#include <sstream>

#include "common/check.h"
#include "frameworks/torch/device_memory.h"

namespace kolo::torch {
namespace {

using runtime::HandlePtr;
using runtime::OpKind;
using runtime::OpRequest;

std::vector<int64_t> shapeOf(const ::torch::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}

// Waits for every handle; rethrows the first error after all finished, so
// no operation is left writing into a buffer the caller frees.
void waitAll(const std::vector<HandlePtr>& handles) {
  std::exception_ptr first;
  for (const auto& h : handles) {
    try {
      h->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

// "float32 [10, 5]" per name, in the list's order.
std::vector<std::pair<std::string, std::string>> parseDescriptor(
    const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

}  // namespace

std::vector<std::string> allgatherStrings(runtime::Runtime& rt, const std::string& name,
                                          const std::string& bytes, int size) {
  int64_t length = static_cast<int64_t>(bytes.size());
  OpRequest lengths;
  lengths.spec.name = name + "/length";
  lengths.spec.kind = OpKind::kAllgather;
  lengths.spec.dtype = DataType::kInt64;
  lengths.spec.shape = {1};
  lengths.input = &length;
  HandlePtr h = rt.enqueue(lengths);
  h->wait();
  std::vector<int64_t> all(static_cast<size_t>(size));
  KOLO_CHECK_EQ(h->output().size(), all.size() * sizeof(int64_t));
  std::memcpy(all.data(), h->output().data(), h->output().size());

  OpRequest data;
  data.spec.name = name + "/data";
  data.spec.kind = OpKind::kAllgather;
  data.spec.dtype = DataType::kUInt8;
  data.spec.shape = {length};
  data.input = bytes.data();
  h = rt.enqueue(data);
  h->wait();
  std::vector<std::string> out;
  size_t offset = 0;
  for (int64_t n : all) {
    KOLO_CHECK_LE(offset + static_cast<size_t>(n), h->output().size());
    out.emplace_back(reinterpret_cast<const char*>(h->output().data()) + offset,
                     static_cast<size_t>(n));
    offset += static_cast<size_t>(n);
  }
  return out;
}

NamedTensors namedTensors(
    const ::torch::OrderedDict<std::string, ::torch::Tensor>& dict) {
  NamedTensors out;
  for (const auto& item : dict) out.emplace_back(item.key(), item.value());
  return out;
}

DataType toKoloType(::torch::ScalarType type, const std::string& what) {
  switch (type) {
    case ::torch::kFloat: return DataType::kFloat32;
    case ::torch::kDouble: return DataType::kFloat64;
    case ::torch::kHalf: return DataType::kFloat16;
    case ::torch::kBFloat16: return DataType::kBFloat16;
    case ::torch::kInt: return DataType::kInt32;
    case ::torch::kLong: return DataType::kInt64;
    case ::torch::kByte: return DataType::kUInt8;
    default: break;
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             what << ": tensor type " << c10::toString(type)
                  << " is not supported by kolo (float32, float64, float16, bfloat16, "
                     "int32, int64, uint8)");
}

// ---- DistributedOptimizer ------------------------------------------------------

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           NamedTensors namedParameters,
                                           std::shared_ptr<Context> context,
                                           DistributedOptimizerOptions options)
    : optimizer_(optimizer), context_(std::move(context)), options_(options) {
  KOLO_CHECK(context_ != nullptr);
  if (options_.backwardPassesPerStep < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "DistributedOptimizer: backwardPassesPerStep "
                                                << options_.backwardPassesPerStep
                                                << " < 1");
  }
  if (options_.op != ReduceOp::kAverage && options_.op != ReduceOp::kSum) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "DistributedOptimizer: reduction "
                                                << toString(options_.op)
                                                << " (expected average or sum)");
  }
  if (!(options_.gradientPredivideFactor > 0)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "DistributedOptimizer: gradientPredivideFactor "
                   << options_.gradientPredivideFactor);
  }
  std::map<std::string, int> seen;
  for (auto& [name, tensor] : namedParameters) {
    if (!tensor.requires_grad()) continue;  // frozen: never has a gradient
    if (!seen.emplace(name, 0).second) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "DistributedOptimizer: parameter name '" << name << "' appears twice");
    }
    if (!tensor.is_leaf()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "DistributedOptimizer: parameter '" << name << "' is not a leaf tensor");
    }
    toKoloType(tensor.scalar_type(), "parameter '" + name + "'");
    Param p;
    p.name = name;
    p.tensor = tensor;
    params_.push_back(std::move(p));
  }
  checkModelsAgree();
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].hook =
        std::make_unique<GradientHook>(params_[i].tensor, [this, i] { onGradient(i); });
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  std::vector<HandlePtr> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Param& p : params_) {
      p.hook.reset();
      if (p.handle) pending.push_back(p.handle);
    }
  }
  try {
    waitAll(pending);
  } catch (...) {  // the buffers stay valid; errors were the caller's to see
  }
}

// Every rank allgathers "name\tdtype shape" lines and compares them with
// rank 0's, so a model built differently on some rank fails here, by name,
// on every rank, rather than in the first step (or never, for a parameter
// that exists on one rank only, which would wait for ever).
void DistributedOptimizer::checkModelsAgree() {
  std::ostringstream mine;
  for (const Param& p : params_) {
    mine << p.name << '\t' << toString(toKoloType(p.tensor.scalar_type(), p.name)) << ' '
         << runtime::shapeString(shapeOf(p.tensor)) << '\n';
  }
  const int size = context_->size();
  const auto all = allgatherStrings(context_->runtime(),
                                    "kolo.torch.optimizer.parameters", mine.str(), size);
  const auto reference = parseDescriptor(all[0]);
  std::map<std::string, std::string> byName(reference.begin(), reference.end());
  for (int r = 1; r < size; ++r) {
    const auto theirs = parseDescriptor(all[static_cast<size_t>(r)]);
    std::map<std::string, std::string> theirsByName(theirs.begin(), theirs.end());
    for (const auto& [name, desc] : reference) {
      auto it = theirsByName.find(name);
      if (it == theirsByName.end()) {
        KOLO_THROW_PEER(ErrorCode::kMismatch, r,
                        "DistributedOptimizer: parameter '"
                            << name << "' (" << desc << ") of rank 0 is missing on rank "
                            << r << ": the ranks built different models");
      }
      if (it->second != desc) {
        KOLO_THROW_PEER(ErrorCode::kMismatch, r,
                        "DistributedOptimizer: parameter '"
                            << name << "' differs: rank 0 has " << desc << ", rank " << r
                            << " has " << it->second);
      }
    }
    for (const auto& [name, desc] : theirs) {
      if (byName.find(name) == byName.end()) {
        KOLO_THROW_PEER(ErrorCode::kMismatch, r,
                        "DistributedOptimizer: parameter '"
                            << name << "' (" << desc << ") of rank " << r
                            << " is missing on rank 0: the ranks built different models");
      }
    }
  }
}

void DistributedOptimizer::onGradient(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  Param& p = params_[index];
  synchronized_ = false;
  if (p.handle) return;  // already submitted this step (extra backward)
  if (++p.passes >= options_.backwardPassesPerStep) submit(p);
}

OpRequest DistributedOptimizer::request(Param& p) {
  ::torch::Tensor grad = p.tensor.grad();
  if (!grad.defined()) {  // unused on this rank: contribute zeros
    p.tensor.mutable_grad() = ::torch::zeros_like(p.tensor);
    grad = p.tensor.grad();
  }
  // A contiguous gradient is reduced in place; another one through a
  // contiguous copy, written back in synchronize().
  p.buffer = grad.is_contiguous() ? grad : grad.contiguous();
  OpRequest r;
  r.spec.name = "grad/" + p.name;
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = toKoloType(p.buffer.scalar_type(), p.name);
  r.spec.op = options_.op;
  r.spec.shape = shapeOf(p.buffer);
  if (options_.op == ReduceOp::kAverage && options_.gradientPredivideFactor != 1.0) {
    r.spec.prescale = 1.0 / options_.gradientPredivideFactor;
    r.spec.postscale = options_.gradientPredivideFactor;
  }
  r.input = p.buffer.data_ptr();
  r.output = p.buffer.data_ptr();
  // A CUDA gradient: read after the backward kernels that produced it (the
  // hook runs with their stream current), staged by the runtime.
  deviceRequest(r, p.buffer, "DistributedOptimizer '" + r.spec.name + "': allreduce");
  return r;
}

void DistributedOptimizer::submit(Param& p) {
  p.handle = context_->runtime().enqueue(request(p));
}

void DistributedOptimizer::synchronize() {
  std::vector<HandlePtr> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (synchronized_) return;
    for (Param& p : params_) {
      if (!p.handle) submit(p);  // unused, or fewer passes than expected
      handles.push_back(p.handle);
    }
  }
  std::exception_ptr error;
  try {
    waitAll(handles);
  } catch (...) {
    error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (Param& p : params_) {
    if (!error && !p.buffer.is_same(p.tensor.grad())) {
      ::torch::NoGradGuard noGrad;
      p.tensor.mutable_grad().copy_(p.buffer);
    }
    p.buffer = ::torch::Tensor();
    p.handle.reset();
    p.passes = 0;
  }
  if (error) std::rethrow_exception(error);
  synchronized_ = true;
}

void DistributedOptimizer::step() {
  synchronize();
  optimizer_.step();
  std::lock_guard<std::mutex> lock(mu_);
  synchronized_ = false;
}

void DistributedOptimizer::zeroGrad() {
  optimizer_.zero_grad();
}

// ---- broadcasts and metrics ------------------------------------------------------

void broadcastParameters(Context& context, const NamedTensors& tensors, int root) {
  ::torch::NoGradGuard noGrad;
  std::vector<::torch::Tensor> buffers;
  std::vector<HandlePtr> handles;
  for (const auto& [name, t] : tensors) {
    buffers.push_back(t.is_contiguous() ? t : t.contiguous());
    OpRequest r;
    r.spec.name = "broadcast/" + name;
    r.spec.kind = OpKind::kBroadcast;
    r.spec.dtype = toKoloType(t.scalar_type(), name);
    r.spec.shape = shapeOf(t);
    r.spec.root = root;
    r.input = r.output = buffers.back().data_ptr();
    deviceRequest(r, buffers.back(), "broadcastParameters '" + r.spec.name + "'");
    handles.push_back(context.runtime().enqueue(std::move(r)));
  }
  waitAll(handles);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!buffers[i].is_same(tensors[i].second)) tensors[i].second.copy_(buffers[i]);
  }
}

void broadcastParameters(
    Context& context, const ::torch::OrderedDict<std::string, ::torch::Tensor>& tensors,
    int root) {
  broadcastParameters(context, namedTensors(tensors), root);
}

void broadcastOptimizerState(Context& context, ::torch::optim::Optimizer& optimizer,
                             int root) {
  runtime::Runtime& rt = context.runtime();
  const bool isRoot = context.rank() == root;
  // Per-parameter state through libtorch's own serialization, which maps
  // the saved state to parameters by position in the param groups.
  std::string bytes;
  if (isRoot) {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to([&](const void* data, size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  }
  int64_t length = static_cast<int64_t>(bytes.size());
  OpRequest r;
  r.spec.name = "kolo.torch.optimizer_state/length";
  r.spec.kind = OpKind::kBroadcast;
  r.spec.dtype = DataType::kInt64;
  r.spec.shape = {1};
  r.spec.root = root;
  r.input = r.output = &length;
  rt.enqueue(r)->wait();
  bytes.resize(static_cast<size_t>(length));
  r.spec.name = "kolo.torch.optimizer_state/data";
  r.spec.dtype = DataType::kUInt8;
  r.spec.shape = {length};
  r.input = r.output = bytes.data();
  rt.enqueue(r)->wait();
  // The param groups' learning rates (Optimizer::load restores state only).
  std::vector<double> lrs;
  for (auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  r.spec.name = "kolo.torch.optimizer_state/lr";
  r.spec.dtype = DataType::kFloat64;
  r.spec.shape = {static_cast<int64_t>(lrs.size())};
  r.input = r.output = lrs.data();
  rt.enqueue(r)->wait();
  if (isRoot) return;
  for (size_t i = 0; i < lrs.size(); ++i) {
    optimizer.param_groups()[i].options().set_lr(lrs[i]);
  }
  ::torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  optimizer.state().clear();
  optimizer.load(archive);
}

double allreduceMetric(Context& context, double value, const std::string& name,
                       ReduceOp op) {
  OpRequest r;
  r.spec.name = "metric/" + name;
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = DataType::kFloat64;
  r.spec.op = op;
  r.spec.shape = {};
  r.input = r.output = &value;
  context.runtime().enqueue(std::move(r))->wait();
  return value;
}

}  // namespace kolo::torch

// kolo::torch::zero::Unit: the layout and the storage juggling are
// described in zero_unit.h.
#include "frameworks/torch/zero_unit.h"

#include <ATen/native/Resize.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "common/check.h"
#include "frameworks/torch/distributed_optimizer.h"

namespace kolo::torch::zero {

Unit::Unit(std::string module,
           std::vector<std::pair<std::string, ::torch::Tensor>> params,
           std::shared_ptr<Context> context)
    : module_(std::move(module)), context_(std::move(context)) {
  KOLO_CHECK(!params.empty());
  constexpr const char* kWhat = "kolo::torch::zero::wrap";
  dtype_ = params[0].second.scalar_type();
  for (auto& [name, p] : params) {
    if (p.scalar_type() != dtype_) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 kWhat << ": module '" << module_ << "' mixes parameter dtypes ("
                       << params[0].first << " is " << dtype_ << ", " << name << " is "
                       << p.scalar_type() << "); a wrapped module needs one dtype");
    }
    if (p.is_sparse() || !p.is_contiguous() || !p.device().is_cpu()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 kWhat << ": parameter '" << name
                       << "' must be a dense contiguous CPU tensor to be sharded");
    }
    toKoloType(dtype_, "parameter '" + name + "'");
    members_.push_back({name, p, total_, p.numel()});
    total_ += p.numel();
  }
  size_ = context_->size();
  const int64_t rank = context_->rank();
  shard_ = (total_ + size_ - 1) / size_;
  begin_ = std::min(rank * shard_, total_);
  end_ = std::min((rank + 1) * shard_, total_);
  ::torch::NoGradGuard noGrad;
  flat_ = ::torch::zeros({padded()}, ::torch::TensorOptions().dtype(dtype_));
  for (Member& m : members_) {
    flat_.narrow(0, m.offset, m.numel).copy_(m.param.detach().reshape({-1}));
    m.param.set_data(flat_.narrow(0, m.offset, m.numel).view(m.param.sizes()));
  }
  shardTensor_ = flat_.narrow(0, rank * shard_, shard_).clone();
  release();
}

Unit::~Unit() {
  try {
    if (handle_) handle_->wait();
  } catch (...) {  // the buffers stay valid until here; the error was the caller's
  }
}

bool Unit::trainable() const {
  return std::any_of(members_.begin(), members_.end(),
                     [](const Member& m) { return m.param.requires_grad(); });
}

// The flat vector's storage to `elements` elements (0 frees it); the
// members' views keep pointing at it.
void Unit::resizeFlat(int64_t elements) {
  at::native::resize_bytes_cpu(flat_.storage().unsafeGetStorageImpl(),
                               static_cast<size_t>(elements) * flat_.element_size());
}

int64_t Unit::heldBytes() const {
  return static_cast<int64_t>(flat_.storage().nbytes());
}

void Unit::startGather() {
  if (gathered_ || handle_) return;
  runtime::OpRequest r;
  r.spec.name = opName_;
  r.spec.kind = runtime::OpKind::kAllgather;
  r.spec.dtype = toKoloType(dtype_, opName_);
  r.spec.shape = {shard_};
  r.input = shardTensor_.data_ptr();
  handle_ = context_->runtime().enqueue(std::move(r));
}

void Unit::gather() {
  if (gathered_) return;
  startGather();
  runtime::HandlePtr h = std::move(handle_);
  handle_ = nullptr;
  h->wait();
  const auto& out = h->output();
  const size_t bytes = static_cast<size_t>(padded()) * flat_.element_size();
  KOLO_CHECK_EQ(out.size(), bytes);
  resizeFlat(padded());
  if (bytes > 0) std::memcpy(flat_.data_ptr(), out.data(), bytes);
  gathered_ = true;
}

void Unit::release() {
  if (pinned_) return;
  if (handle_) {
    runtime::HandlePtr h = std::move(handle_);
    handle_ = nullptr;
    h->wait();
  }
  resizeFlat(0);
  gathered_ = false;
}

void Unit::writeBack() {
  KOLO_CHECK(gathered_);
  ::torch::NoGradGuard noGrad;
  shardTensor_.narrow(0, 0, end_ - begin_).copy_(flat_.narrow(0, begin_, end_ - begin_));
}

}  // namespace kolo::torch::zero

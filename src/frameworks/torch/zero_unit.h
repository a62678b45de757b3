// One module's parameters sharded across the ranks (ZeRO stage 3 in
// libtorch; docs/zero.md): the storage behind kolo::torch::zero::wrap.
//
// Layout: the module's parameters, flattened and concatenated in
// named_parameters() order, form the unit's flat vector of `total`
// elements, padded to `padded = shard * N` with `shard = ceil(total / N)`;
// rank r owns elements [r * shard, (r + 1) * shard) (clipped to total:
// [begin, end)). shard() holds those elements (zero padded) and is all the
// parameter memory a rank keeps between steps.
//
// Every parameter stays the same tensor object (the optimizer, the
// autograd graph and named_parameters() keep working) with its shape, but
// its data is a view of `flat`, whose storage is resized to 0 bytes while
// the unit is released: it then holds no memory, also where the autograd
// graph saved a view of it (a linear layer saves its weight). gather()
// allocates the storage again and fills it with the allgather of every
// rank's shard, so the saved views see the values again (without a
// version bump: autograd's checks pass).
//
// Contract
// - Construction copies this rank's block of the parameters' current
//   values into shard() (every rank must hold the same values), then
//   releases. The parameters must be dense, contiguous, of one dtype.
// - startGather() submits the allgather (prefetch); gather() waits for it
//   (submitting it first when needed) and leaves the unit gathered;
//   release() waits for a pending allgather (the runtime never writes into
//   freed memory), then frees the storage, unless pinned.
// - Not thread-safe: ShardedModel serializes the calls. The allgather
//   is named by setOpName() (wrap(): "zero3.<model id>/gather/<unit>",
//   the same on every rank).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frameworks/torch/context.h"

namespace kolo::torch::zero {

class Unit {
 public:
  struct Member {
    std::string name;
    ::torch::Tensor param;
    int64_t offset = 0;  // in the flat vector
    int64_t numel = 0;
  };

  Unit(std::string module, std::vector<std::pair<std::string, ::torch::Tensor>> params,
       std::shared_ptr<Context> context);
  ~Unit();
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  const std::string& module() const { return module_; }
  const std::vector<Member>& members() const { return members_; }
  ::torch::ScalarType dtype() const { return dtype_; }
  int64_t total() const { return total_; }
  int64_t shardSize() const { return shard_; }
  int64_t padded() const { return shard_ * size_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  // This rank's block (shardSize() elements, zero past end() - begin()).
  const ::torch::Tensor& shard() const { return shardTensor_; }
  // Some member requires a gradient.
  bool trainable() const;

  void setOpName(std::string name) { opName_ = std::move(name); }
  void startGather();
  void gather();
  void release();
  bool gathered() const { return gathered_; }
  bool pending() const { return handle_ != nullptr; }
  void setPinned(bool pinned) { pinned_ = pinned; }
  // The gathered parameters' owned elements back into shard().
  void writeBack();
  // Bytes the flat storage holds now (0 while released).
  int64_t heldBytes() const;

 private:
  void resizeFlat(int64_t elements);

  std::string module_;
  std::shared_ptr<Context> context_;
  std::vector<Member> members_;
  ::torch::ScalarType dtype_ = ::torch::kFloat;
  int64_t size_ = 1, total_ = 0, shard_ = 0, begin_ = 0, end_ = 0;
  ::torch::Tensor flat_, shardTensor_;
  std::string opName_;
  runtime::HandlePtr handle_;  // pending allgather
  bool gathered_ = true;
  bool pinned_ = false;
};

}  // namespace kolo::torch::zero

// The reduce-scatter in rank order; the algorithm is described in
// zero_ordered_reduce.h.
#include "frameworks/torch/zero_ordered_reduce.h"

#include <vector>

#include "collectives/reduce.h"
#include "common/check.h"
#include "frameworks/torch/distributed_optimizer.h"

namespace kolo::torch::zero {

runtime::HandlePtr startOrderedReduceScatter(runtime::Runtime& runtime,
                                             const std::string& name,
                                             const ::torch::Tensor& flat, int size) {
  KOLO_CHECK(flat.is_contiguous());
  KOLO_CHECK_EQ(flat.numel() % size, 0);
  runtime::OpRequest r;
  r.spec.name = name;
  r.spec.kind = runtime::OpKind::kAlltoall;
  r.spec.dtype = toKoloType(flat.scalar_type(), name);
  r.spec.shape = {flat.numel()};
  r.input = flat.data_ptr();
  return runtime.enqueue(std::move(r));
}

// Rank q's block of our share arrived as the q-th block of the output.
::torch::Tensor finishOrderedReduceScatter(const runtime::HandlePtr& handle,
                                           ::torch::ScalarType dtype, int64_t shard,
                                           int size) {
  handle->wait();
  const size_t count = static_cast<size_t>(shard);
  const DataType type = toKoloType(dtype, "zero reduce-scatter");
  const size_t es = elementSize(type);
  const auto& out = handle->output();
  KOLO_CHECK_EQ(out.size(), count * es * static_cast<size_t>(size));
  ::torch::Tensor block = ::torch::empty({shard}, ::torch::TensorOptions().dtype(dtype));
  if (count > 0) {
    std::vector<const void*> srcs;
    for (int q = 0; q < size; ++q) {
      srcs.push_back(out.data() + static_cast<size_t>(q) * count * es);
    }
    collectives::reduceMany(block.data_ptr(), srcs.data(), size, count, type,
                            ReduceOp::kSum);
    collectives::divideInPlace(block.data_ptr(), count, type, size);
  }
  return block;
}

}  // namespace kolo::torch::zero

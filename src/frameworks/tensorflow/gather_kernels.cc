// Kernels of the ops whose output size kolo decides: allgather, alltoall,
// reducescatter and their grouped forms (op_definitions.cc). kolo
// allocates their output; the op copies it into TensorFlow's output tensor
// when the operation has ended (PendingOp's finish step).
#include <kolo/runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pending_op.h"
#include "reduce_attrs.h"
#include "tensor_layout.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/errors.h"

namespace kolo::tf {
namespace {

using absl::Status;
using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Output `index` of `ctx` with kolo's output of handle `handle`: dims as
// kolo gives them (less the element-size dimension of a byte layout).
Status copyOutput(OpKernelContext* ctx, const PendingOp& op, size_t handle, int index,
                  bool bytes) {
  const void* data = nullptr;
  size_t size = 0;
  std::vector<int64_t> dims;
  TF_RETURN_IF_ERROR(op.output(handle, &data, &size, &dims));
  if (bytes && !dims.empty()) dims.pop_back();
  TensorShape shape;
  for (int64_t d : dims) TF_RETURN_IF_ERROR(shape.AddDimWithStatus(d));
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
  if (out->TotalBytes() != size) {
    return absl::InternalError(absl::StrCat(
        "KoloError: output of ", size, " bytes for a tensor of ", out->TotalBytes()));
  }
  if (size > 0) std::memcpy(const_cast<char*>(out->tensor_data().data()), data, size);
  return absl::OkStatus();
}

Status needsDims(const Tensor& t, const std::string& what, const std::string& name) {
  if (t.dims() >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("InvalidArgumentError: ", what, " '", name,
                   "': needs a tensor of at least one dimension (got a scalar)"));
}

class AllgatherOp : public AsyncOpKernel {
 public:
  explicit AllgatherOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (c->HasAttr("num_tensors")) OP_REQUIRES_OK(c, c->GetAttr("num_tensors", &n_));
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignoreNameScope_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &processSet_));
    grouped_ = c->HasAttr("num_tensors");
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const std::string base = operationName(ctx, n_, name(), ignoreNameScope_);
    for (int i = 0; i < n_; ++i) {
      OP_REQUIRES_OK_ASYNC(ctx, needsDims(ctx->input(i), "allgather", base), done);
    }
    auto* op = new PendingOp(ctx, std::move(done));
    std::vector<bool> bytes(n_);
    for (int i = 0; i < n_ && !op->failed(); ++i) {
      const Tensor& in = ctx->input(i);
      const MovedLayout layout = movedLayout(in);
      bytes[i] = layout.bytes;
      const std::string opName = grouped_ ? base + "_" + std::to_string(i) : base;
      kolo_handle h = 0;
      const int rc = kolo_allgather_async(
          opName.c_str(), in.tensor_data().data(), static_cast<int>(layout.dims.size()),
          layout.dims.data(), layout.dtype, processSet_, &h);
      op->submitted(rc, h);
    }
    op->start([ctx, op, bytes]() -> Status {
      for (size_t i = 0; i < bytes.size(); ++i) {
        TF_RETURN_IF_ERROR(copyOutput(ctx, *op, i, static_cast<int>(i), bytes[i]));
      }
      return absl::OkStatus();
    });
  }

 private:
  int n_ = 1;
  bool grouped_ = false;
  bool ignoreNameScope_ = false;
  int processSet_ = 0;
};

class AlltoallOp : public AsyncOpKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignoreNameScope_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &processSet_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    const Tensor& splitsIn = ctx->input(1);
    const std::string opName = operationName(ctx, 2, name(), ignoreNameScope_);
    OP_REQUIRES_OK_ASYNC(ctx, needsDims(in, "alltoall", opName), done);
    int size = 0;
    OP_REQUIRES_ASYNC(ctx, kolo_process_set_size(processSet_, &size) == KOLO_OK,
                      statusFor(KOLO_ERR_INVALID_ARGUMENT, kolo_last_error()), done);
    // The rows sent to each rank, as int64 (kolo's splits); empty: equal.
    auto splits = std::make_shared<std::vector<int64_t>>();
    const auto given = splitsIn.flat<int32_t>();
    for (int64_t i = 0; i < given.size(); ++i) splits->push_back(given(i));
    // No splits: an equal split, passed to kolo explicitly (kolo's own
    // equal split assumes every rank sends as many rows).
    if (splits->empty()) {
      OP_REQUIRES_ASYNC(
          ctx, size > 0 && in.dim_size(0) % size == 0,
          absl::InvalidArgumentError(absl::StrCat(
              "InvalidArgumentError: alltoall '", opName, "': first dimension ",
              in.dim_size(0), " does not divide into ", size,
              " equal splits (pass splits) on rank ", kolo_rank())),
          done);
      splits->assign(size, in.dim_size(0) / size);
    }
    const MovedLayout layout = movedLayout(in);
    auto* op = new PendingOp(ctx, std::move(done));
    kolo_handle h = 0;
    const int rcData = kolo_alltoall_async(
        opName.c_str(), in.tensor_data().data(), static_cast<int>(layout.dims.size()),
        layout.dims.data(), splits->data(), static_cast<int>(splits->size()),
        layout.dtype, processSet_, &h);
    if (op->submitted(rcData, h)) {
      // The rows received from each rank: an equal alltoall of the splits.
      const std::string splitsName = opName + ".splits";
      const int64_t splitsDims[1] = {static_cast<int64_t>(splits->size())};
      const int rc =
          kolo_alltoall_async(splitsName.c_str(), splits->data(), 1, splitsDims, nullptr,
                              0, KOLO_INT64, processSet_, &h);
      op->submitted(rc, h);
    }
    const bool bytes = layout.bytes;
    op->start([ctx, op, bytes, splits]() -> Status {
      TF_RETURN_IF_ERROR(copyOutput(ctx, *op, 0, 0, bytes));
      const void* data = nullptr;
      size_t size = 0;
      std::vector<int64_t> dims;
      TF_RETURN_IF_ERROR(op->output(1, &data, &size, &dims));
      const int64_t n = static_cast<int64_t>(size / sizeof(int64_t));
      Tensor* received = nullptr;
      TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({n}), &received));
      auto flat = received->flat<int32_t>();
      for (int64_t i = 0; i < n; ++i)
        flat(i) = static_cast<int32_t>(static_cast<const int64_t*>(data)[i]);
      return absl::OkStatus();
    });
  }

 private:
  bool ignoreNameScope_ = false;
  int processSet_ = 0;
};

// One reducescatter of `in` over `size` ranks, this rank being `rank`:
// rows split as Horovod splits them (the first rows % size ranks get one
// row more). An uneven split, or a dtype kolo widens, runs over a copy in
// which every rank's block has the largest block's rows (zeros after its
// own); this rank keeps the first rows of its reduced block.
struct ScatterPlan {
  std::vector<int64_t> dims;  // as submitted (first dimension padded)
  int64_t myRows = 0;
  int64_t rowElems = 1;
  kolo_dtype dtype = KOLO_FLOAT32;
  bool widened = false;
  std::vector<uint8_t> copy;  // empty: the input itself is sent

  Status make(const Tensor& in, int rank, int size) {
    dims = dimsOf(in.shape());
    const int64_t rows = dims[0];
    for (size_t i = 1; i < dims.size(); ++i) rowElems *= dims[i];
    const int64_t q = rows / size, rem = rows % size;
    myRows = q + (rank < rem ? 1 : 0);
    widened = !nativeDtype(in.dtype(), &dtype);
    if (widened) {
      if (!widenable(in.dtype())) {
        return absl::InvalidArgumentError(
            absl::StrCat("InvalidArgumentError: kolo cannot reduce tensors of dtype ",
                         ::tensorflow::DataTypeString(in.dtype())));
      }
      dtype = KOLO_INT32;
    }
    if (rem == 0 && !widened) return absl::OkStatus();
    const int64_t block = q + (rem > 0 ? 1 : 0);
    const size_t inElem = ::tensorflow::DataTypeSize(in.dtype());
    const size_t elem = widened ? sizeof(int32_t) : inElem;
    copy.assign(static_cast<size_t>(size * block * rowElems) * elem, 0);
    const char* src = in.tensor_data().data();
    for (int k = 0; k < size; ++k) {
      const int64_t offset = k * q + std::min<int64_t>(k, rem);
      const int64_t n = (q + (k < rem ? 1 : 0)) * rowElems;
      char* dst = reinterpret_cast<char*>(copy.data()) + k * block * rowElems * elem;
      if (widened) {
        widen(src + offset * rowElems * inElem, in.dtype(),
              reinterpret_cast<int32_t*>(dst), n);
      } else {
        std::memcpy(dst, src + offset * rowElems * inElem, n * elem);
      }
    }
    dims[0] = size * block;
    return absl::OkStatus();
  }

  const void* send(const Tensor& in) const {
    return copy.empty() ? static_cast<const void*>(in.tensor_data().data()) : copy.data();
  }

  // Output `index`: this rank's rows of the reduced block kolo returned.
  Status finish(OpKernelContext* ctx, const PendingOp& op, size_t handle, int index,
                ::tensorflow::DataType type) const {
    const void* data = nullptr;
    size_t bytes = 0;
    std::vector<int64_t> got;
    TF_RETURN_IF_ERROR(op.output(handle, &data, &bytes, &got));
    TensorShape shape = ctx->input(index).shape();
    shape.set_dim(0, myRows);
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
    const int64_t n = myRows * rowElems;
    char* dst = const_cast<char*>(out->tensor_data().data());
    if (widened) {
      ReduceBuffers::narrow(static_cast<const int32_t*>(data), type, dst, n);
    } else if (n > 0) {
      std::memcpy(dst, data, out->TotalBytes());
    }
    return absl::OkStatus();
  }
};

class ReducescatterOp : public AsyncOpKernel {
 public:
  explicit ReducescatterOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    attrs_.read(c, false);
    grouped_ = c->HasAttr("num_tensors");
    if (grouped_) OP_REQUIRES_OK(c, c->GetAttr("num_tensors", &n_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const std::string base = operationName(ctx, n_, name(), attrs_.ignoreNameScope);
    int rank = -1, size = 0;
    OP_REQUIRES_ASYNC(ctx,
                      kolo_process_set_rank(attrs_.processSet, &rank) == KOLO_OK &&
                          kolo_process_set_size(attrs_.processSet, &size) == KOLO_OK,
                      statusFor(KOLO_ERR_INVALID_ARGUMENT, kolo_last_error()), done);
    auto plans = std::make_shared<std::vector<ScatterPlan>>(n_);
    for (int i = 0; i < n_; ++i) {
      OP_REQUIRES_OK_ASYNC(ctx, needsDims(ctx->input(i), "reducescatter", base), done);
      OP_REQUIRES_OK_ASYNC(ctx, (*plans)[i].make(ctx->input(i), rank, size), done);
    }
    auto* op = new PendingOp(ctx, std::move(done));
    for (int i = 0; i < n_ && !op->failed(); ++i) {
      const ScatterPlan& p = (*plans)[i];
      const std::string opName = grouped_ ? base + "_" + std::to_string(i) : base;
      kolo_handle h = 0;
      const int rc = kolo_reducescatter_async(
          opName.c_str(), p.send(ctx->input(i)), static_cast<int>(p.dims.size()),
          p.dims.data(), p.dtype, static_cast<kolo_op>(attrs_.op), attrs_.processSet, &h);
      op->submitted(rc, h);
    }
    op->start([ctx, op, plans]() -> Status {
      for (size_t i = 0; i < plans->size(); ++i) {
        const int index = static_cast<int>(i);
        TF_RETURN_IF_ERROR(
            (*plans)[i].finish(ctx, *op, i, index, ctx->input(index).dtype()));
      }
      return absl::OkStatus();
    });
  }

 private:
  ReduceAttrs attrs_;
  bool grouped_ = false;
  int n_ = 1;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("KoloAllgather").Device(::tensorflow::DEVICE_CPU),
                        AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("KoloGroupedAllgather").Device(::tensorflow::DEVICE_CPU),
                        AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("KoloAlltoall").Device(::tensorflow::DEVICE_CPU),
                        AlltoallOp);
REGISTER_KERNEL_BUILDER(Name("KoloReducescatter").Device(::tensorflow::DEVICE_CPU),
                        ReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("KoloGroupedReducescatter").Device(::tensorflow::DEVICE_CPU),
                        ReducescatterOp);

}  // namespace kolo::tf

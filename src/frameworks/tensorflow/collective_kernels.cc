// Kernels of the ops whose output has the input's shape: allreduce,
// grouped allreduce, broadcast (op_definitions.cc). Each submits to kolo's
// runtime and completes through PendingOp (pending_op.h).
#include <kolo/runtime.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pending_op.h"
#include "reduce_attrs.h"
#include "tensor_layout.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace kolo::tf {
namespace {

using absl::Status;
using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

class AllreduceOp : public AsyncOpKernel {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    attrs_.read(c, true);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    const std::string opName = operationName(ctx, 1, name(), attrs_.ignoreNameScope);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out), done);
    auto buffers = std::make_shared<ReduceBuffers>();
    OP_REQUIRES_OK_ASYNC(ctx, ReduceBuffers::make(in, out, buffers.get()), done);
    auto* op = new PendingOp(ctx, std::move(done));
    const std::vector<int64_t> dims = dimsOf(in.shape());
    kolo_handle h = 0;
    const int rc = kolo_allreduce_async(
        opName.c_str(), buffers->send(), buffers->recv(), static_cast<int>(dims.size()),
        dims.data(), buffers->dtype(), static_cast<kolo_op>(attrs_.op), attrs_.prescale,
        attrs_.postscale, attrs_.processSet, &h);
    op->submitted(rc, h);
    op->start([buffers, out] {
      buffers->narrowInto(out);
      return absl::OkStatus();
    });
  }

 private:
  ReduceAttrs attrs_;
};

class GroupedAllreduceOp : public AsyncOpKernel {
 public:
  explicit GroupedAllreduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    attrs_.read(c, true);
    OP_REQUIRES_OK(c, c->GetAttr("num_tensors", &n_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const std::string base = operationName(ctx, n_, name(), attrs_.ignoreNameScope);
    auto buffers = std::make_shared<std::vector<ReduceBuffers>>(n_);
    std::vector<Tensor*> outs(n_);
    std::vector<std::string> names(n_);
    std::vector<std::vector<int64_t>> dims(n_);
    for (int i = 0; i < n_; ++i) {
      const Tensor& in = ctx->input(i);
      OP_REQUIRES_OK_ASYNC(
          ctx, ctx->forward_input_or_allocate_output({i}, i, in.shape(), &outs[i]), done);
      OP_REQUIRES_OK_ASYNC(ctx, ReduceBuffers::make(in, outs[i], &(*buffers)[i]), done);
      names[i] = base + "_" + std::to_string(i);
      dims[i] = dimsOf(in.shape());
    }
    std::vector<const char*> namePtrs(n_);
    std::vector<const void*> sends(n_);
    std::vector<void*> recvs(n_);
    std::vector<int> ndims(n_);
    std::vector<const int64_t*> shapes(n_);
    for (int i = 0; i < n_; ++i) {
      namePtrs[i] = names[i].c_str();
      sends[i] = (*buffers)[i].send();
      recvs[i] = (*buffers)[i].recv();
      ndims[i] = static_cast<int>(dims[i].size());
      shapes[i] = dims[i].data();
    }
    auto* op = new PendingOp(ctx, std::move(done));
    std::vector<kolo_handle> handles(n_);
    const int rc = kolo_grouped_allreduce_async(
        n_, namePtrs.data(), sends.data(), recvs.data(), ndims.data(), shapes.data(),
        (*buffers)[0].dtype(), static_cast<kolo_op>(attrs_.op), attrs_.prescale,
        attrs_.postscale, attrs_.processSet, handles.data());
    if (op->submitted(rc, handles[0])) {
      for (int i = 1; i < n_; ++i) op->submitted(KOLO_OK, handles[i]);
    }
    op->start([buffers, outs] {
      for (size_t i = 0; i < outs.size(); ++i) (*buffers)[i].narrowInto(outs[i]);
      return absl::OkStatus();
    });
  }

 private:
  ReduceAttrs attrs_;
  int n_ = 0;
};

class BroadcastOp : public AsyncOpKernel {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
    OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignoreNameScope_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &processSet_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    const std::string opName = operationName(ctx, 1, name(), ignoreNameScope_);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out), done);
    if (out->tensor_data().data() != in.tensor_data().data()) {
      std::memcpy(const_cast<char*>(out->tensor_data().data()), in.tensor_data().data(),
                  in.TotalBytes());
    }
    const MovedLayout layout = movedLayout(in);
    auto* op = new PendingOp(ctx, std::move(done));
    kolo_handle h = 0;
    const int rc =
        kolo_broadcast_async(opName.c_str(), const_cast<char*>(out->tensor_data().data()),
                             static_cast<int>(layout.dims.size()), layout.dims.data(),
                             layout.dtype, root_, processSet_, &h);
    op->submitted(rc, h);
    op->start(nullptr);
  }

 private:
  int root_ = 0;
  bool ignoreNameScope_ = false;
  int processSet_ = 0;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("KoloAllreduce").Device(::tensorflow::DEVICE_CPU),
                        AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("KoloGroupedAllreduce").Device(::tensorflow::DEVICE_CPU),
                        GroupedAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("KoloBroadcast").Device(::tensorflow::DEVICE_CPU),
                        BroadcastOp);

}  // namespace kolo::tf

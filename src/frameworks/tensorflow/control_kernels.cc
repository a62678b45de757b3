// Kernels of the ops that move no tensor: join, barrier, and the layout
// queries size / rank / local size / local rank / process-set membership
// (op_definitions.cc), read when the op runs, as Horovod's *_op are.
#include <kolo/kolo.h>
#include <kolo/runtime.h>

#include <string>

#include "pending_op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace kolo::tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class JoinOp : public AsyncOpKernel {
 public:
  explicit JoinOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &processSet_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, TensorShape({}), &out), done);
    out->scalar<int32_t>()() = 0;
    auto* op = new PendingOp(ctx, std::move(done));
    kolo_handle h = 0;
    const int rc = kolo_join_async(processSet_, &h);
    op->submitted(rc, h);
    op->start(nullptr);
  }

 private:
  int processSet_ = 0;
};

class BarrierOp : public AsyncOpKernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &processSet_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto* op = new PendingOp(ctx, std::move(done));
    kolo_handle h = 0;
    const int rc = kolo_barrier_async(processSet_, &h);
    op->submitted(rc, h);
    op->start(nullptr);
  }

 private:
  int processSet_ = 0;
};

enum class Query { kSize, kRank, kLocalSize, kLocalRank, kIncluded };

// A scalar int32 read from kolo's C API when the op runs.
template <Query Q>
class LayoutOp : public OpKernel {
 public:
  explicit LayoutOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &processSet_));
  }

  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES(ctx, kolo_initialized(),
                statusFor(KOLO_ERR_NOT_INITIALIZED,
                          name() + " ran before kolo.tensorflow.init()"));
    int value = 0;
    int rc = KOLO_OK;
    switch (Q) {
      case Query::kSize: rc = kolo_process_set_size(processSet_, &value); break;
      case Query::kRank: value = kolo_rank(); break;
      case Query::kLocalSize: value = kolo_local_size(); break;
      case Query::kLocalRank: value = kolo_local_rank(); break;
      case Query::kIncluded:
        rc = kolo_process_set_rank(processSet_, &value);
        value = value >= 0 ? 1 : 0;
        break;
    }
    OP_REQUIRES(ctx, rc == KOLO_OK, statusFor(rc, kolo_last_error()));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  int processSet_ = 0;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("KoloJoin").Device(::tensorflow::DEVICE_CPU), JoinOp);
REGISTER_KERNEL_BUILDER(Name("KoloBarrier").Device(::tensorflow::DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("KoloSize").Device(::tensorflow::DEVICE_CPU),
                        LayoutOp<Query::kSize>);
REGISTER_KERNEL_BUILDER(Name("KoloRank").Device(::tensorflow::DEVICE_CPU),
                        LayoutOp<Query::kRank>);
REGISTER_KERNEL_BUILDER(Name("KoloLocalSize").Device(::tensorflow::DEVICE_CPU),
                        LayoutOp<Query::kLocalSize>);
REGISTER_KERNEL_BUILDER(Name("KoloLocalRank").Device(::tensorflow::DEVICE_CPU),
                        LayoutOp<Query::kLocalRank>);
REGISTER_KERNEL_BUILDER(Name("KoloProcessSetIncluded").Device(::tensorflow::DEVICE_CPU),
                        LayoutOp<Query::kIncluded>);

}  // namespace kolo::tf

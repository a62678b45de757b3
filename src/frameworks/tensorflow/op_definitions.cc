// The TensorFlow ops of kolo (their kernels: collective_kernels.cc,
// gather_kernels.cc, control_kernels.cc). Every collective takes, after its
// data, a scalar string `tensor_name`: the name kolo's runtime matches
// across ranks. Empty, the op's node name is used (graph mode, where node
// names are unique and the same on every rank; with ignore_name_scope the
// part after the last '/'). kolo.tensorflow.mpi_ops gives eager calls
// kolo's generated names instead, because an eager op's node name is its
// type. `reduce_op` is kolo_op's code (kolo.h); `process_set_id` the id of
// a kolo process set (0: every rank).
#include <tensorflow/core/framework/common_shape_fns.h>
#include <tensorflow/core/framework/op.h>
#include <tensorflow/core/framework/shape_inference.h>

namespace kolo::tf {
namespace {

using absl::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

#define KOLO_TF_REDUCE_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float, double}"
#define KOLO_TF_MOVE_TYPES                                                         \
  "{uint8, int8, uint16, int16, uint32, int32, uint64, int64, float16, bfloat16, " \
  "float, "                                                                        \
  "double, bool}"

// Same shape as input i, for every output i (grouped ops: num_tensors).
Status sameShapes(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

// Input i with an unknown first dimension.
Status unknownFirstDim(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) {
    ShapeHandle out;
    if (c->RankKnown(c->input(i)) && c->Rank(c->input(i)) > 0) {
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(i), 0, c->UnknownDim(), &out));
    } else {
      out = c->UnknownShape();
    }
    c->set_output(i, out);
  }
  return absl::OkStatus();
}

Status scalarOutput(InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("KoloAllreduce")
    .Attr("T: " KOLO_TF_REDUCE_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetShapeFn(sameShapes)
    .Doc("The allreduce of `tensor` over the process set (kolo_allreduce_async).");

REGISTER_OP("KoloGroupedAllreduce")
    .Attr("T: " KOLO_TF_REDUCE_TYPES)
    .Attr("num_tensors: int >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors * T")
    .Input("tensor_name: string")
    .Output("outputs: num_tensors * T")
    .SetShapeFn(sameShapes)
    .Doc("Allreduces that run together, named <tensor_name>_<i>.");

REGISTER_OP("KoloAllgather")
    .Attr("T: " KOLO_TF_MOVE_TYPES)
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetShapeFn(unknownFirstDim)
    .Doc("The ranks' tensors concatenated along the first dimension.");

REGISTER_OP("KoloGroupedAllgather")
    .Attr("T: " KOLO_TF_MOVE_TYPES)
    .Attr("num_tensors: int >= 1")
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors * T")
    .Input("tensor_name: string")
    .Output("outputs: num_tensors * T")
    .SetShapeFn(unknownFirstDim)
    .Doc("Allgathers submitted together, named <tensor_name>_<i>.");

REGISTER_OP("KoloBroadcast")
    .Attr("T: " KOLO_TF_MOVE_TYPES)
    .Attr("root_rank: int")
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetShapeFn(sameShapes)
    .Doc("Rank root_rank's tensor (root_rank: a rank of the process set).");

REGISTER_OP("KoloAlltoall")
    .Attr("T: " KOLO_TF_MOVE_TYPES)
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: int32")
    .Input("tensor_name: string")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(unknownFirstDim(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Rows of the first dimension sent to each rank (splits; empty: equal).");

REGISTER_OP("KoloReducescatter")
    .Attr("T: " KOLO_TF_REDUCE_TYPES)
    .Attr("reduce_op: int")
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetShapeFn(unknownFirstDim)
    .Doc(
        "This rank's rows of the reduced tensor (Horovod's split: the first "
        "rows % size ranks get one row more).");

REGISTER_OP("KoloGroupedReducescatter")
    .Attr("T: " KOLO_TF_REDUCE_TYPES)
    .Attr("num_tensors: int >= 1")
    .Attr("reduce_op: int")
    .Attr("ignore_name_scope: bool = false")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors * T")
    .Input("tensor_name: string")
    .Output("outputs: num_tensors * T")
    .SetShapeFn(unknownFirstDim)
    .Doc("Reducescatters submitted together, named <tensor_name>_<i>.");

REGISTER_OP("KoloJoin")
    .Attr("process_set_id: int = 0")
    .Output("done: int32")
    .SetShapeFn(scalarOutput)
    .SetIsStateful()
    .Doc("Ends when every rank of the set has joined (0).");

REGISTER_OP("KoloBarrier")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Ends when every rank of the set has reached it.");

// The layout, read when the op runs (after init), as Horovod's *_op.
#define KOLO_TF_INFO_OP(NAME)          \
  REGISTER_OP(NAME)                    \
      .Attr("process_set_id: int = 0") \
      .Output("value: int32")          \
      .SetIsStateful()                 \
      .SetShapeFn(scalarOutput)

KOLO_TF_INFO_OP("KoloSize");
KOLO_TF_INFO_OP("KoloRank");
KOLO_TF_INFO_OP("KoloLocalSize");
KOLO_TF_INFO_OP("KoloLocalRank");
KOLO_TF_INFO_OP("KoloProcessSetIncluded");

}  // namespace kolo::tf

// How a TensorFlow tensor is handed to kolo's C API: its name, its kolo
// dtype and dimensions, and, for dtypes kolo does not have, a stand-in.
//
// - Moving ops (allgather, broadcast, alltoall) send a tensor kolo has no
//   dtype for (int8, int16, uint16, uint32, uint64, bool) as rows of bytes:
//   dtype uint8 with one more dimension, the element size.
// - Reducing ops (allreduce, reducescatter) send int8, int16 and uint16
//   widened to int32 and narrow the result back: sums and products wrap as
//   the narrow type's would, min and max are exact.
#pragma once

#include <kolo/kolo.h>

#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace kolo::tf {

// The name of the operation in kolo's runtime: the string input
// `nameInput` when non-empty, else the node name (after its last '/' when
// ignoreNameScope).
std::string operationName(::tensorflow::OpKernelContext* ctx, int nameInput,
                          const std::string& nodeName, bool ignoreNameScope);

// kolo's dtype for `type`; false when kolo has none.
bool nativeDtype(::tensorflow::DataType type, kolo_dtype* out);

// The dtype and dimensions under which a moving op sends `t` (native, or
// bytes with the element size as the last dimension).
struct MovedLayout {
  kolo_dtype dtype;
  std::vector<int64_t> dims;
  bool bytes;  // the element size was appended
};
MovedLayout movedLayout(const ::tensorflow::Tensor& t);

// A reducing op's buffers: `send` and `recv` point at the tensors' data, or
// at int32 copies (widened) that narrowInto() copies back.
class ReduceBuffers {
 public:
  // Fails (InvalidArgument) for a dtype that cannot be reduced.
  static absl::Status make(const ::tensorflow::Tensor& in, ::tensorflow::Tensor* out,
                           ReduceBuffers* buffers);
  const void* send() const { return send_; }
  void* recv() const { return recv_; }
  kolo_dtype dtype() const { return dtype_; }
  bool widened() const { return !wide_.empty(); }
  // The widened values, to pass where kolo allocates the output.
  static void narrow(const int32_t* from, ::tensorflow::DataType type, void* to,
                     int64_t n);
  void narrowInto(::tensorflow::Tensor* out) const;

 private:
  const void* send_ = nullptr;
  void* recv_ = nullptr;
  kolo_dtype dtype_ = KOLO_FLOAT32;
  std::vector<int32_t> wide_;  // widened send and receive buffer (in place)
};

// Widens `n` elements of `type` at `from` into int32 at `to`.
void widen(const void* from, ::tensorflow::DataType type, int32_t* to, int64_t n);
bool widenable(::tensorflow::DataType type);

std::vector<int64_t> dimsOf(const ::tensorflow::TensorShape& shape);

}  // namespace kolo::tf

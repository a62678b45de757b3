#include "tensor_layout.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/errors.h"

namespace kolo::tf {

using absl::Status;
using ::tensorflow::DataType;
using ::tensorflow::Tensor;

std::string operationName(::tensorflow::OpKernelContext* ctx, int nameInput,
                          const std::string& nodeName, bool ignoreNameScope) {
  const Tensor& given = ctx->input(nameInput);
  if (given.NumElements() == 1) {
    const std::string& s = given.scalar<::tensorflow::tstring>()();
    if (!s.empty()) return s;
  }
  if (!ignoreNameScope) return nodeName;
  const auto slash = nodeName.find_last_of('/');
  return slash == std::string::npos ? nodeName : nodeName.substr(slash + 1);
}

bool nativeDtype(DataType type, kolo_dtype* out) {
  switch (type) {
    case ::tensorflow::DT_FLOAT: *out = KOLO_FLOAT32; return true;
    case ::tensorflow::DT_DOUBLE: *out = KOLO_FLOAT64; return true;
    case ::tensorflow::DT_HALF: *out = KOLO_FLOAT16; return true;
    case ::tensorflow::DT_BFLOAT16: *out = KOLO_BFLOAT16; return true;
    case ::tensorflow::DT_INT32: *out = KOLO_INT32; return true;
    case ::tensorflow::DT_INT64: *out = KOLO_INT64; return true;
    case ::tensorflow::DT_UINT8: *out = KOLO_UINT8; return true;
    default: return false;
  }
}

std::vector<int64_t> dimsOf(const ::tensorflow::TensorShape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.dims(); ++i) dims.push_back(shape.dim_size(i));
  return dims;
}

MovedLayout movedLayout(const Tensor& t) {
  MovedLayout layout{KOLO_UINT8, dimsOf(t.shape()), false};
  if (nativeDtype(t.dtype(), &layout.dtype)) return layout;
  layout.dtype = KOLO_UINT8;
  layout.dims.push_back(static_cast<int64_t>(::tensorflow::DataTypeSize(t.dtype())));
  layout.bytes = true;
  return layout;
}

bool widenable(DataType type) {
  return type == ::tensorflow::DT_INT8 || type == ::tensorflow::DT_INT16 ||
         type == ::tensorflow::DT_UINT16;
}

namespace {

template <typename T>
void widenAs(const void* from, int32_t* to, int64_t n) {
  const T* src = static_cast<const T*>(from);
  for (int64_t i = 0; i < n; ++i) to[i] = static_cast<int32_t>(src[i]);
}

template <typename T>
void narrowAs(const int32_t* from, void* to, int64_t n) {
  T* dst = static_cast<T*>(to);
  // Through uint32: the low bits, as the narrow type's own arithmetic wraps.
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<uint32_t>(from[i]));
}

}  // namespace

void widen(const void* from, DataType type, int32_t* to, int64_t n) {
  switch (type) {
    case ::tensorflow::DT_INT8: widenAs<int8_t>(from, to, n); break;
    case ::tensorflow::DT_INT16: widenAs<int16_t>(from, to, n); break;
    default: widenAs<uint16_t>(from, to, n); break;
  }
}

void ReduceBuffers::narrow(const int32_t* from, DataType type, void* to, int64_t n) {
  switch (type) {
    case ::tensorflow::DT_INT8: narrowAs<int8_t>(from, to, n); break;
    case ::tensorflow::DT_INT16: narrowAs<int16_t>(from, to, n); break;
    default: narrowAs<uint16_t>(from, to, n); break;
  }
}

Status ReduceBuffers::make(const Tensor& in, Tensor* out, ReduceBuffers* b) {
  if (nativeDtype(in.dtype(), &b->dtype_)) {
    b->send_ = in.tensor_data().data();
    b->recv_ = const_cast<char*>(out->tensor_data().data());
    return absl::OkStatus();
  }
  if (!widenable(in.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("InvalidArgumentError: kolo cannot reduce tensors of dtype ",
                     ::tensorflow::DataTypeString(in.dtype())));
  }
  b->dtype_ = KOLO_INT32;
  b->wide_.resize(static_cast<size_t>(in.NumElements()));
  widen(in.tensor_data().data(), in.dtype(), b->wide_.data(), in.NumElements());
  b->send_ = b->recv_ = b->wide_.data();
  return absl::OkStatus();
}

void ReduceBuffers::narrowInto(Tensor* out) const {
  if (wide_.empty()) return;
  narrow(wide_.data(), out->dtype(), const_cast<char*>(out->tensor_data().data()),
         out->NumElements());
}

}  // namespace kolo::tf

// The contract between kolo.torch._tensor_reader (torch_tensor_reader.cc,
// built against torch's C++ headers) and kolo._native's in-place allreduce
// fast path (tensor_handles.cc, which includes no torch header): what the
// runtime needs of a tensor, and the function that reads it natively.
//
// The reader module exports a PyCapsule named KOLO_TENSOR_READER_CAPSULE
// whose pointer is a kolo_tensor_read_fn. kolo._native.set_tensor_reader
// takes it (the name is checked, so a reader of another layout of this
// struct is refused: change the name's version with the struct).
//
// kolo_tensor_read_fn(obj, out), called with the GIL held:
// - returns 1 and fills *out when obj is a tensor the fast path takes: an
//   instance of exactly torch.Tensor or torch.nn.Parameter (no other
//   subclass: their __torch_function__ may change what the attributes say),
//   defined, on the CPU, strided, contiguous, of a dtype kolo.torch reduces
//   natively (out->dtype: its kolo_dtype code, the same as kolo.torch's
//   table), at most KOLO_TENSOR_VIEW_MAX_DIMS dimensions. out->ptr is
//   torch's data_ptr(): 0 for an empty tensor (the caller substitutes its
//   own address for those);
// - returns 0 for anything else, out unspecified; then the caller reads the
//   object its generic way (torch's Python attributes).
// - never raises, never leaves a Python exception set, never runs Python
//   code, never keeps a reference to obj.
#pragma once

#include <Python.h>

#include <stdint.h>

#define KOLO_TENSOR_VIEW_MAX_DIMS 8
#define KOLO_TENSOR_READER_CAPSULE "kolo.torch._tensor_reader.read_v1"

typedef struct kolo_tensor_view {
  int dtype;               // a kolo_dtype
  unsigned long long ptr;  // the first element; 0 for an empty tensor
  int ndim;
  int64_t dims[KOLO_TENSOR_VIEW_MAX_DIMS];
} kolo_tensor_view;

typedef int (*kolo_tensor_read_fn)(PyObject* obj, kolo_tensor_view* out);

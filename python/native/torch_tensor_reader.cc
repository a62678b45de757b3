// kolo.torch._tensor_reader: reads a torch tensor in C++ for kolo._native's
// in-place allreduce fast path (tensor_handles.cc), instead of through
// torch's Python attributes (dtype, is_cpu, layout, is_contiguous(),
// data_ptr(), shape: about 2,200 instructions per operation, a third of the
// fast path; docs/performance-history.md, "The Python layer").
//
// Why a module of its own: it is built against the installed torch's C++
// headers (as Horovod's torch extension is), so it serves only the torch it
// was built for; kolo._native includes no torch header and serves any torch.
// kolo.torch installs this reader only when TORCH_VERSION equals the running
// torch.__version__ (else, or when this module is missing, the generic path
// stays).
//
// Contract (python/native/tensor_view.h): `reader` is a PyCapsule named
// KOLO_TENSOR_READER_CAPSULE holding readTensor, a kolo_tensor_read_fn;
// `read(obj)` is the same from Python, for tests: (dtype code, data_ptr,
// shape tuple) or None; `TORCH_VERSION` is the torch.__version__ of the
// build. The module imports torch at its own import (for torch.Tensor and
// torch.nn.Parameter, the only types read).
//
// Python's attributes and this reader give the same answers for those two
// types: their getters call the same inline at::Tensor methods
// (THPVariable_get_dtype: scalar_type(); is_cpu: is_cpu(); layout: layout();
// is_contiguous(): is_contiguous(); data_ptr(): data_ptr(); shape:
// sizes()), and neither type has a __torch_function__ of its own that could
// intercept them (torch.Tensor's is the default, Parameter's is disabled).
// A C++ exception (a tensor without storage, symbolic sizes) reads as "not
// taken", where the Python path's failed attribute read does the same.
#include <kolo/kolo.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>

#include "tensor_view.h"

namespace {

PyTypeObject* gTensorType = nullptr;     // torch.Tensor
PyTypeObject* gParameterType = nullptr;  // torch.nn.Parameter

// kolo's dtype code of a ScalarType, -1 when kolo.torch does not reduce it.
// Must equal kolo.torch.collectives._NATIVE_DTYPES
// (tests/python/test_torch_tensor_reader.py checks every dtype).
int koloDtype(c10::ScalarType t) noexcept {
  switch (t) {
    case c10::ScalarType::Float: return KOLO_FLOAT32;
    case c10::ScalarType::Double: return KOLO_FLOAT64;
    case c10::ScalarType::Half: return KOLO_FLOAT16;
    case c10::ScalarType::BFloat16: return KOLO_BFLOAT16;
    case c10::ScalarType::Int: return KOLO_INT32;
    case c10::ScalarType::Long: return KOLO_INT64;
    case c10::ScalarType::Byte: return KOLO_UINT8;
    default: return -1;
  }
}

// kolo_tensor_read_fn (tensor_view.h). The order of the checks is Python's
// path's: dtype, device, layout, contiguity, then pointer and sizes.
int readTensor(PyObject* obj, kolo_tensor_view* out) {
  PyTypeObject* type = Py_TYPE(obj);
  if (type != gTensorType && type != gParameterType) return 0;
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined()) return 0;
    const int dtype = koloDtype(t.scalar_type());
    if (dtype < 0 || !t.is_cpu() || t.layout() != c10::kStrided || !t.is_contiguous() ||
        !t.has_storage()) {
      return 0;
    }
    const c10::IntArrayRef sizes = t.sizes();
    if (sizes.size() > KOLO_TENSOR_VIEW_MAX_DIMS) return 0;
    out->dtype = dtype;
    out->ptr = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(t.data_ptr()));
    out->ndim = static_cast<int>(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) out->dims[i] = sizes[i];
    return 1;
  } catch (...) {
    return 0;
  }
}

// read(obj): readTensor's answer as (dtype, data_ptr, shape) or None.
PyObject* readFromPython(PyObject*, PyObject* obj) {
  kolo_tensor_view v;
  if (!readTensor(obj, &v)) Py_RETURN_NONE;
  PyObject* shape = PyTuple_New(v.ndim);
  if (shape == nullptr) return nullptr;
  for (int i = 0; i < v.ndim; ++i) {
    PyObject* d = PyLong_FromLongLong(v.dims[i]);
    if (d == nullptr) {
      Py_DECREF(shape);
      return nullptr;
    }
    PyTuple_SET_ITEM(shape, i, d);
  }
  return Py_BuildValue("(iKN)", v.dtype, v.ptr, shape);
}

PyMethodDef gFunctions[] = {
    {"read", readFromPython, METH_O,
     "read(obj): (kolo dtype code, data_ptr, shape) when obj is a tensor the "
     "fast path takes (exactly torch.Tensor or torch.nn.Parameter; CPU, "
     "strided, contiguous, a dtype kolo reduces, at most 8 dimensions), else "
     "None. What the `reader` capsule does for kolo._native."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef gModule = {
    PyModuleDef_HEAD_INIT,
    "kolo.torch._tensor_reader",
    "Reads torch tensors natively for kolo._native's in-place allreduce (built "
    "against one torch's C++ headers; see TORCH_VERSION).",
    -1,
    gFunctions,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

// A type attribute of torch (`torch.Tensor`, `torch.nn.Parameter`), owned.
PyTypeObject* torchType(PyObject* torch, const char* module, const char* name) {
  PyObject* holder = torch;
  Py_INCREF(holder);
  if (module != nullptr) {
    Py_SETREF(holder, PyObject_GetAttrString(torch, module));
    if (holder == nullptr) return nullptr;
  }
  PyObject* t = PyObject_GetAttrString(holder, name);
  Py_DECREF(holder);
  if (t != nullptr && !PyType_Check(t)) {
    PyErr_Format(PyExc_TypeError, "kolo.torch._tensor_reader: torch.%s%s%s is not a type",
                 module ? module : "", module ? "." : "", name);
    Py_CLEAR(t);
  }
  return reinterpret_cast<PyTypeObject*>(t);
}

}  // namespace

PyMODINIT_FUNC PyInit__tensor_reader() {
  PyObject* torch = PyImport_ImportModule("torch");
  if (torch == nullptr) return nullptr;
  gTensorType = torchType(torch, nullptr, "Tensor");
  gParameterType = gTensorType ? torchType(torch, "nn", "Parameter") : nullptr;
  Py_DECREF(torch);
  if (gParameterType == nullptr) return nullptr;  // the types stay referenced
  PyObject* m = PyModule_Create(&gModule);
  if (m == nullptr) return nullptr;
  auto* fn = reinterpret_cast<void*>(static_cast<kolo_tensor_read_fn>(readTensor));
  PyObject* capsule = PyCapsule_New(fn, KOLO_TENSOR_READER_CAPSULE, nullptr);
  if (PyModule_AddObject(m, "reader", capsule) != 0) {
    Py_XDECREF(capsule);
    Py_DECREF(m);
    return nullptr;
  }
  if (PyModule_AddStringConstant(m, "TORCH_VERSION", KOLO_BUILT_FOR_TORCH) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

// devicePointerOrdinal (device_pointer.h): the driver's
// cuPointerGetAttributes, found with dlopen(RTLD_NOLOAD) + dlsym, so the
// driver is used only when something else (the CUDA runtime of kolo or of
// a framework) loaded it. The driver's types are declared here by their
// documented values (cuda.h, stable since CUDA 7): no CUDA header needed.
#include "collectives/cuda/device_pointer.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdint>

namespace kolo::collectives::cuda {
namespace {

// cuda.h: CUpointer_attribute and CUmemorytype values.
constexpr int kAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttributeIsManaged = 8;      // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr int kAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeDevice = 2;   // CU_MEMORYTYPE_DEVICE

// CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs,
//                                 void** data, CUdeviceptr ptr)
using GetAttributes = int (*)(unsigned, int*, void**, unsigned long long);

std::atomic<GetAttributes> gQuery{nullptr};
// The loader's count of objects ever loaded when libcuda.so.1 was last
// found missing: until it changes, it is still missing. A dlopen, even
// with RTLD_NOLOAD, of a library that is not loaded costs about 20 us
// (the loader searches its paths); reading the count is one
// dl_iterate_phdr call that stops at the first object (about 10 ns).
std::atomic<unsigned long long> gMissingAt{~0ull};

unsigned long long objectsLoaded() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;
      },
      &adds);
  return adds;
}

GetAttributes findQuery() {
  GetAttributes q = gQuery.load(std::memory_order_acquire);
  if (q != nullptr) return q;
  const unsigned long long adds = objectsLoaded();
  if (adds == gMissingAt.load(std::memory_order_relaxed)) return nullptr;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (lib == nullptr) {
    gMissingAt.store(adds, std::memory_order_relaxed);
    return nullptr;
  }
  q = reinterpret_cast<GetAttributes>(dlsym(lib, "cuPointerGetAttributes"));
  // The handle is kept (the library stays loaded while its loader holds
  // it; ours only adds a reference), so the pointer stays valid.
  if (q != nullptr) gQuery.store(q, std::memory_order_release);
  return q;
}

}  // namespace

bool driverLoaded() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (lib == nullptr) return false;
  dlclose(lib);
  return true;
}

int devicePointerOrdinal(const void* p) {
  if (p == nullptr) return -1;
  const GetAttributes query = findQuery();
  if (query == nullptr) return -1;
  unsigned memoryType = 0;
  unsigned isManaged = 0;
  int ordinal = -1;
  int attrs[] = {kAttributeMemoryType, kAttributeIsManaged, kAttributeDeviceOrdinal};
  void* data[] = {&memoryType, &isManaged, &ordinal};
  // Fails (CUDA_ERROR_NOT_INITIALIZED, ..._INVALID_VALUE) for memory the
  // driver does not know: host memory.
  if (query(3, attrs, data, reinterpret_cast<uintptr_t>(p)) != 0) return -1;
  if (memoryType != kMemoryTypeDevice || isManaged != 0) return -1;
  return ordinal >= 0 ? ordinal : 0;
}

}  // namespace kolo::collectives::cuda

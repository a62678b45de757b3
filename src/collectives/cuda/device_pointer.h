// Is this pointer CUDA device memory? Asked of the CUDA driver only when
// the driver is already loaded in the process, so a CPU-only job pays
// nothing and no CUDA context is ever created (docs/gpu.md, "A device
// pointer given to a host call"). Compiled in builds with and without CUDA
// (it needs no CUDA header: the driver is opened with dlopen): a kolo built
// without CUDA inside a process where PyTorch loaded the driver still
// refuses a device pointer by name instead of crashing on it.
//
// Contract
// - devicePointerOrdinal(p): the CUDA device ordinal when `p` points into
//   memory that cudaMalloc (or cuMemAlloc) made, which the CPU cannot read;
//   -1 otherwise: a null pointer, host memory (pageable, pinned or
//   registered), managed memory (the CPU may read it), or any pointer when
//   libcuda.so.1 is not loaded in the process or the driver has not been
//   initialised (no device memory can exist then).
// - Cost while libcuda.so.1 is not loaded: reading the loader's count of
//   loaded objects (about 10 ns); only when it changed, one
//   dlopen(RTLD_NOLOAD), which neither loads nor initialises anything. Once
//   the driver is loaded, its entry point is kept and each call is one
//   cuPointerGetAttributes query.
// - Thread-safe; never throws.
#pragma once

namespace kolo::collectives::cuda {

int devicePointerOrdinal(const void* p);

// True when libcuda.so.1 is loaded in this process (asked without loading
// it), for tests and the probe.
bool driverLoaded();

}  // namespace kolo::collectives::cuda

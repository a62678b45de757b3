# CUDA support (docs/gpu.md): KOLO_WITH_CUDA=auto|ON|OFF.
#
#   auto  on when nvcc is found (CMAKE_CUDA_COMPILER, PATH, /usr/local/cuda),
#         else off with a status line; off in sanitizer builds (the CUDA
#         runtime is not built with the sanitizers)
#   ON    nvcc and the CUDA toolkit are required (configure fails without)
#   OFF   today's CPU-only build: no CUDA language, no CUDA header anywhere
#
# With CUDA, libkolo links the static CUDA runtime (libcudart_static.a): it
# needs no libcudart.so at run time and loads the driver (libcuda.so.1) only
# when first asked, so the same build runs on a machine without a GPU or
# driver (src/collectives/cuda/device_runtime.h: no device, CPU paths).
# NCCL is never linked: it is loaded with dlopen at run time.
#
# Sets KOLO_HAVE_CUDA (0 or 1). Architectures: CMAKE_CUDA_ARCHITECTURES,
# by default 90 (H100 / H200 code plus compute_90 PTX, which newer GPUs
# compile at load time); e.g. -DCMAKE_CUDA_ARCHITECTURES="80-real;90" adds
# A100 code.
set(KOLO_WITH_CUDA auto CACHE STRING "CUDA support: auto (when nvcc is found), ON or OFF")
set_property(CACHE KOLO_WITH_CUDA PROPERTY STRINGS auto ON OFF)

set(KOLO_HAVE_CUDA 0)
string(TOUPPER "${KOLO_WITH_CUDA}" kolo_cuda_mode)
if(kolo_cuda_mode MATCHES "^(OFF|0|NO|FALSE|N)$")
  message(STATUS "kolo: CUDA off (KOLO_WITH_CUDA=${KOLO_WITH_CUDA})")
  return()
endif()
if(NOT kolo_cuda_mode MATCHES "^(AUTO|ON|1|YES|TRUE|Y)$")
  message(FATAL_ERROR "KOLO_WITH_CUDA must be auto, ON or OFF, got '${KOLO_WITH_CUDA}'")
endif()
set(kolo_cuda_required FALSE)
if(NOT kolo_cuda_mode STREQUAL "AUTO")
  set(kolo_cuda_required TRUE)
endif()
if(KOLO_SANITIZE AND NOT kolo_cuda_required)
  message(STATUS "kolo: CUDA off in a sanitizer build (KOLO_SANITIZE=${KOLO_SANITIZE}); "
                 "-DKOLO_WITH_CUDA=ON forces it")
  return()
endif()

if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(KOLO_NVCC nvcc HINTS /usr/local/cuda/bin)
  if(KOLO_NVCC)
    set(CMAKE_CUDA_COMPILER ${KOLO_NVCC})
  endif()
endif()
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  if(kolo_cuda_required)
    message(FATAL_ERROR "KOLO_WITH_CUDA=${KOLO_WITH_CUDA} but nvcc was not found "
                        "(put it on PATH or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc)")
  endif()
  message(STATUS "kolo: CUDA off: nvcc not found (KOLO_WITH_CUDA=auto)")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  if(kolo_cuda_required)
    message(FATAL_ERROR "KOLO_WITH_CUDA=${KOLO_WITH_CUDA}: nvcc found but not the CUDA "
                        "toolkit's runtime (CUDAToolkit)")
  endif()
  message(STATUS "kolo: CUDA off: the CUDA toolkit's runtime was not found")
  return()
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(KOLO_HAVE_CUDA 1)
message(STATUS "kolo: CUDA ${CUDAToolkit_VERSION} (nvcc ${CMAKE_CUDA_COMPILER}), "
               "architectures ${CMAKE_CUDA_ARCHITECTURES}")

// NCCL, loaded at run time: libkolo never links NCCL, so a build needs no
// NCCL and a machine without it runs every CPU path (docs/gpu.md).
//
// Contract
// - load() opens libnccl.so.2 once per process (the dynamic loader's search:
//   LD_LIBRARY_PATH, the ld.so cache, ...) and resolves every entry point
//   below; the library stays loaded for the life of the process. It throws
//   Error(kIo) naming the library and the loader's error when the library
//   cannot be opened, or the first symbol it lacks. The outcome is cached:
//   a later call throws the same error, or returns the same object.
// - open(name) does the same for one explicit file name or path, uncached
//   (for tests, and for a library chosen by the caller).
// - The entry points have NCCL's C signatures with opaque types (ncclComm_t
//   as Comm, ncclUniqueId as UniqueId, the enums as int, cudaStream_t as
//   void*), so no nccl.h or CUDA header is needed. Calling them needs a
//   CUDA device; loading the library, version() and getUniqueId do not.
// - Entry points of later NCCL versions (commInitRankConfig and
//   commFinalize: 2.14; getLastError: 2.13) are optional: nullptr when the
//   library lacks them, and load() succeeds without them.
// - Thread-safety: load() may race; the entry points are NCCL's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace kolo::collectives::cuda {

class NcclLibrary {
 public:
  using Result = int;  // ncclResult_t; 0 is ncclSuccess
  using Comm = struct ncclComm*;
  struct UniqueId {
    char internal[128];  // NCCL_UNIQUE_ID_BYTES
  };

  static const NcclLibrary& load();
  static std::unique_ptr<NcclLibrary> open(const std::string& name);

  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  // NCCL's version code: major * 10000 + minor * 100 + patch (2.9 and later).
  int version() const;
  // The file the library was loaded from.
  const std::string& path() const { return path_; }

  Result (*getVersion)(int* version) = nullptr;
  const char* (*getErrorString)(Result result) = nullptr;
  Result (*getUniqueId)(UniqueId* id) = nullptr;
  Result (*commInitRank)(Comm* comm, int nranks, UniqueId id, int rank) = nullptr;
  Result (*commDestroy)(Comm comm) = nullptr;
  Result (*commAbort)(Comm comm) = nullptr;
  Result (*commGetAsyncError)(Comm comm, Result* asyncError) = nullptr;
  Result (*allReduce)(const void* send, void* recv, size_t count, int dtype, int op,
                      Comm comm, void* stream) = nullptr;
  Result (*broadcast)(const void* send, void* recv, size_t count, int dtype, int root,
                      Comm comm, void* stream) = nullptr;
  Result (*allGather)(const void* send, void* recv, size_t sendCount, int dtype,
                      Comm comm, void* stream) = nullptr;
  Result (*reduceScatter)(const void* send, void* recv, size_t recvCount, int dtype,
                          int op, Comm comm, void* stream) = nullptr;
  Result (*send)(const void* buf, size_t count, int dtype, int peer, Comm comm,
                 void* stream) = nullptr;
  Result (*recv)(void* buf, size_t count, int dtype, int peer, Comm comm,
                 void* stream) = nullptr;
  Result (*groupStart)() = nullptr;
  Result (*groupEnd)() = nullptr;
  Result (*reduce)(const void* send, void* recv, size_t count, int dtype, int op,
                   int root, Comm comm, void* stream) = nullptr;

  // ncclConfig_t as NCCL 2.14 laid it out (ncclConfig_v21400): later
  // versions read the fields of the version it names and default the rest.
  struct Config {
    size_t size = sizeof(Config);
    unsigned int magic = 0xcafebeef;  // NCCL_API_MAGIC
    unsigned int version = 21400;
    int blocking = 1;
  };
  // Optional (see the contract): nullptr when this NCCL lacks them.
  Result (*commInitRankConfig)(Comm* comm, int nranks, UniqueId id, int rank,
                               Config* config) = nullptr;
  Result (*commFinalize)(Comm comm) = nullptr;
  const char* (*getLastError)(Comm comm) = nullptr;

 private:
  NcclLibrary() = default;
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace kolo::collectives::cuda

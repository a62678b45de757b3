// Loading NCCL with dlopen (nccl_library.h).
//
// RTLD_NOW resolves the library's own dependencies at once (a broken
// install fails here, not at the first collective); RTLD_LOCAL keeps its
// symbols out of the global namespace (a framework may load another NCCL).
// The handle is never closed: NCCL keeps threads that outlive any user.
#include "collectives/cuda/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

constexpr const char* kLibrary = "libnccl.so.2";

template <typename Fn>
void resolve(void* handle, const std::string& name, const char* symbol, Fn*& out) {
  dlerror();
  void* address = dlsym(handle, symbol);
  if (address == nullptr) {
    const char* error = dlerror();
    KOLO_THROW(ErrorCode::kIo, "NCCL library " << name << " has no symbol " << symbol
                                               << " (" << (error ? error : "null address")
                                               << ")");
  }
  out = reinterpret_cast<Fn*>(address);
}

// An entry point of a later NCCL version: nullptr when absent.
template <typename Fn>
void resolveOptional(void* handle, const char* symbol, Fn*& out) {
  out = reinterpret_cast<Fn*>(dlsym(handle, symbol));
  dlerror();
}

}  // namespace

std::unique_ptr<NcclLibrary> NcclLibrary::open(const std::string& name) {
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    KOLO_THROW(ErrorCode::kIo, "cannot load the NCCL library "
                                   << name << ": " << (error ? error : "dlopen failed")
                                   << " (docs/gpu.md)");
  }
  std::unique_ptr<NcclLibrary> nccl(new NcclLibrary());
  nccl->handle_ = handle;
  nccl->path_ = name;
  if (const link_map* map = nullptr; dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map &&
                                     map->l_name && map->l_name[0] != '\0') {
    nccl->path_ = map->l_name;
  }
  resolve(handle, name, "ncclGetVersion", nccl->getVersion);
  resolve(handle, name, "ncclGetErrorString", nccl->getErrorString);
  resolve(handle, name, "ncclGetUniqueId", nccl->getUniqueId);
  resolve(handle, name, "ncclCommInitRank", nccl->commInitRank);
  resolve(handle, name, "ncclCommDestroy", nccl->commDestroy);
  resolve(handle, name, "ncclCommAbort", nccl->commAbort);
  resolve(handle, name, "ncclCommGetAsyncError", nccl->commGetAsyncError);
  resolve(handle, name, "ncclAllReduce", nccl->allReduce);
  resolve(handle, name, "ncclBroadcast", nccl->broadcast);
  resolve(handle, name, "ncclAllGather", nccl->allGather);
  resolve(handle, name, "ncclReduceScatter", nccl->reduceScatter);
  resolve(handle, name, "ncclSend", nccl->send);
  resolve(handle, name, "ncclRecv", nccl->recv);
  resolve(handle, name, "ncclGroupStart", nccl->groupStart);
  resolve(handle, name, "ncclGroupEnd", nccl->groupEnd);
  resolve(handle, name, "ncclReduce", nccl->reduce);
  resolveOptional(handle, "ncclCommInitRankConfig", nccl->commInitRankConfig);
  resolveOptional(handle, "ncclCommFinalize", nccl->commFinalize);
  resolveOptional(handle, "ncclGetLastError", nccl->getLastError);
  return nccl;
}

// Kept loaded for the life of the process (see the file comment); a
// library that failed to resolve is left to the loader as well.
NcclLibrary::~NcclLibrary() = default;

const NcclLibrary& NcclLibrary::load() {
  static std::once_flag once;
  static std::unique_ptr<NcclLibrary> library;
  static std::string failure;
  std::call_once(once, [] {
    try {
      library = open(kLibrary);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!library) throw Error(ErrorCode::kIo, failure);
  return *library;
}

int NcclLibrary::version() const {
  int version = 0;
  const Result result = getVersion(&version);
  if (result != 0) {
    KOLO_THROW(ErrorCode::kInternal, "ncclGetVersion failed: " << getErrorString(result));
  }
  return version;
}

}  // namespace kolo::collectives::cuda

// The C API: a process-wide communicator behind kolo.h.
//
// This file is the boundary where kolo::Error becomes a return code plus a
// thread-local message (docs/errors.md). No exception crosses it.
#include <kolo/communicator.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "capi/capi_internal.h"

namespace {

thread_local std::string tLastError;

std::mutex gMu;  // guards gComm (swapped only by init/finalize)
std::shared_ptr<kolo::Communicator> gComm;
// A world kolo_init formed in this process was elastic (guarded by gMu).
bool gElastic = false;

using kolo::capi::fail;

std::shared_ptr<kolo::Communicator> current() {
  std::lock_guard<std::mutex> lock(gMu);
  return gComm;
}

// Runs fn on the communicator; converts every exception to a code.
template <typename Fn>
int call(const char* name, Fn&& fn) {
  auto comm = current();
  if (!comm) {
    return fail(KOLO_ERR_NOT_INITIALIZED,
                std::string(name) + " called before kolo_init (or after kolo_finalize)");
  }
  try {
    fn(*comm);
    return KOLO_OK;
  } catch (const kolo::Error& e) {
    return fail(static_cast<int>(e.code()), e.what());
  } catch (const std::exception& e) {
    return fail(KOLO_ERR_INTERNAL, std::string(name) + ": " + e.what());
  }
}

// A C caller may pass any int as an enum; reading it as the C++ enum type
// would be undefined for values outside the enumerators, so look at the
// bytes.
template <typename T>
bool validEnum(const T& v, int count) {
  static_assert(sizeof(T) == sizeof(int));
  int raw;
  std::memcpy(&raw, &v, sizeof(raw));
  return raw >= 0 && raw < count;
}

template <typename T>
int rawValue(const T& v) {
  int raw;
  std::memcpy(&raw, &v, sizeof(raw));
  return raw;
}

int badDtype(const char* name, int v) {
  return fail(KOLO_ERR_INVALID_ARGUMENT,
              std::string(name) + ": unknown dtype value " + std::to_string(v));
}

int badOp(const char* name, int v) {
  return fail(KOLO_ERR_INVALID_ARGUMENT,
              std::string(name) + ": unknown op value " + std::to_string(v));
}

// -1 before kolo_init, the only way a layout query fails. kolo_last_error()
// is left alone: a query is not a failing call, and replacing the message
// would free the string that an earlier kolo_last_error() returned.
int layoutField(int kolo::Layout::*field) {
  auto comm = current();
  if (!comm) return -1;
  return comm->layout().*field;
}

}  // namespace

int kolo::capi::fail(int code, std::string message) {
  tLastError.assign(message);  // in place: the buffer is reused when it fits
  return code;
}

std::shared_ptr<kolo::Communicator> kolo::capi::world() {
  return current();
}

int kolo::capi::callOnWorld(const char* name,
                            const std::function<void(Communicator&)>& fn) {
  return call(name, fn);
}

extern "C" {

int kolo_init(void) {
  std::lock_guard<std::mutex> lock(gMu);
  if (gComm) {
    return fail(KOLO_ERR_ALREADY_INITIALIZED,
                "kolo_init called twice; call kolo_finalize first");
  }
  while (true) {
    try {
      gComm = kolo::capi::formWorld();
      // The runtimes (kolo/runtime.h) start here, on every rank at once:
      // their cycles are collective, so a runtime started lazily on one rank
      // would keep the others' cycles waiting.
      if (gComm->elasticWorld().generation > 0) gElastic = true;
      kolo::capi::startRuntimes(gComm);
      return KOLO_OK;
    } catch (const kolo::Error& e) {
      kolo::capi::stopRuntimes();
      gComm.reset();
      // An elastic world that lost a member while it formed: the launcher
      // forms the next one without it (its limits bound the attempts).
      const bool lost =
          e.code() == kolo::ErrorCode::kPeerLost || e.code() == kolo::ErrorCode::kTimeout;
      if (lost && gElastic) continue;
      return fail(static_cast<int>(e.code()), std::string("kolo_init: ") + e.what());
    } catch (const std::exception& e) {
      kolo::capi::stopRuntimes();
      gComm.reset();
      return fail(KOLO_ERR_INTERNAL, std::string("kolo_init: ") + e.what());
    }
  }
}

int kolo_finalize(void) {
  std::shared_ptr<kolo::Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(gMu);
    comm.swap(gComm);
  }
  if (!comm)
    return fail(KOLO_ERR_NOT_INITIALIZED, "kolo_finalize called before kolo_init");
  // The runtimes stop first (their pending handles fail); then the closing
  // steps of the world and of the runtimes' communicators run at once, as
  // at exit (api/exit_goodbye.h): a rank waiting in a collective on the
  // world learns at once that this rank finalized.
  kolo::capi::stopRuntimes(std::move(comm));
  kolo::capi::leaveJob();  // with parameter servers: goodbye, the job's barrier
  return KOLO_OK;
}

int kolo_initialized(void) {
  return current() ? 1 : 0;
}

int kolo_rank(void) {
  return layoutField(&kolo::Layout::rank);
}
int kolo_size(void) {
  return layoutField(&kolo::Layout::size);
}
int kolo_local_rank(void) {
  return layoutField(&kolo::Layout::localRank);
}
int kolo_local_size(void) {
  return layoutField(&kolo::Layout::localSize);
}
int kolo_cross_rank(void) {
  return layoutField(&kolo::Layout::crossRank);
}
int kolo_cross_size(void) {
  return layoutField(&kolo::Layout::crossSize);
}

int kolo_allreduce(const void* send, void* recv, size_t count, kolo_dtype dtype,
                   kolo_op op) {
  if (!validEnum(dtype, kolo::kNumDataTypes))
    return badDtype("kolo_allreduce", rawValue(dtype));
  if (!validEnum(op, kolo::kNumReduceOps)) return badOp("kolo_allreduce", rawValue(op));
  if (int rc = kolo::capi::refuseDevicePointer("kolo_allreduce", "send", send)) return rc;
  if (int rc = kolo::capi::refuseDevicePointer("kolo_allreduce", "recv", recv)) return rc;
  return call("kolo_allreduce", [&](kolo::Communicator& c) {
    kolo::AllreduceOptions o;
    o.send = send;
    o.recv = recv;
    o.count = count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    o.op = static_cast<kolo::ReduceOp>(op);
    c.allreduce(o);
  });
}

int kolo_broadcast(void* buf, size_t count, kolo_dtype dtype, int root) {
  if (!validEnum(dtype, kolo::kNumDataTypes))
    return badDtype("kolo_broadcast", rawValue(dtype));
  if (int rc = kolo::capi::refuseDevicePointer("kolo_broadcast", "buf", buf)) return rc;
  return call("kolo_broadcast", [&](kolo::Communicator& c) {
    kolo::BroadcastOptions o;
    o.buffer = buf;
    o.count = count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    o.root = root;
    c.broadcast(o);
  });
}

int kolo_allgather(const void* send, void* recv, size_t count, kolo_dtype dtype) {
  if (!validEnum(dtype, kolo::kNumDataTypes))
    return badDtype("kolo_allgather", rawValue(dtype));
  if (int rc = kolo::capi::refuseDevicePointer("kolo_allgather", "send", send)) return rc;
  if (int rc = kolo::capi::refuseDevicePointer("kolo_allgather", "recv", recv)) return rc;
  return call("kolo_allgather", [&](kolo::Communicator& c) {
    kolo::AllgatherOptions o;
    o.send = send;
    o.recv = recv;
    o.count = count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    c.allgather(o);
  });
}

int kolo_allgatherv(const void* send, void* recv, const size_t* counts,
                    kolo_dtype dtype) {
  if (!validEnum(dtype, kolo::kNumDataTypes))
    return badDtype("kolo_allgatherv", rawValue(dtype));
  if (counts == nullptr) {
    return fail(KOLO_ERR_INVALID_ARGUMENT, "kolo_allgatherv: counts is null");
  }
  if (int rc = kolo::capi::refuseDevicePointer("kolo_allgatherv", "send", send))
    return rc;
  if (int rc = kolo::capi::refuseDevicePointer("kolo_allgatherv", "recv", recv))
    return rc;
  return call("kolo_allgatherv", [&](kolo::Communicator& c) {
    kolo::AllgatherOptions o;
    o.send = send;
    o.recv = recv;
    o.counts.assign(counts, counts + c.size());
    o.dtype = static_cast<kolo::DataType>(dtype);
    c.allgather(o);
  });
}

int kolo_reduce_scatter(const void* send, void* recv, size_t recv_count, kolo_dtype dtype,
                        kolo_op op) {
  if (!validEnum(dtype, kolo::kNumDataTypes))
    return badDtype("kolo_reduce_scatter", rawValue(dtype));
  if (!validEnum(op, kolo::kNumReduceOps))
    return badOp("kolo_reduce_scatter", rawValue(op));
  if (int rc = kolo::capi::refuseDevicePointer("kolo_reduce_scatter", "send", send))
    return rc;
  if (int rc = kolo::capi::refuseDevicePointer("kolo_reduce_scatter", "recv", recv))
    return rc;
  return call("kolo_reduce_scatter", [&](kolo::Communicator& c) {
    kolo::ReduceScatterOptions o;
    o.send = send;
    o.recv = recv;
    o.recvCount = recv_count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    o.op = static_cast<kolo::ReduceOp>(op);
    c.reduceScatter(o);
  });
}

int kolo_alltoall(const void* send, void* recv, size_t count_per_rank, kolo_dtype dtype) {
  if (!validEnum(dtype, kolo::kNumDataTypes))
    return badDtype("kolo_alltoall", rawValue(dtype));
  if (int rc = kolo::capi::refuseDevicePointer("kolo_alltoall", "send", send)) return rc;
  if (int rc = kolo::capi::refuseDevicePointer("kolo_alltoall", "recv", recv)) return rc;
  return call("kolo_alltoall", [&](kolo::Communicator& c) {
    kolo::AlltoallOptions o;
    o.send = send;
    o.recv = recv;
    o.countPerRank = count_per_rank;
    o.dtype = static_cast<kolo::DataType>(dtype);
    c.alltoall(o);
  });
}

int kolo_send(const void* buf, size_t count, kolo_dtype dtype, int peer, int tag) {
  kolo_handle h = 0;
  if (int rc = kolo_isend(buf, count, dtype, peer, tag, 0, &h)) return rc;
  return kolo_wait_release(h);
}

int kolo_recv(void* buf, size_t count, kolo_dtype dtype, int peer, int tag) {
  kolo_handle h = 0;
  if (int rc = kolo_irecv(buf, count, dtype, peer, tag, 0, &h)) return rc;
  return kolo_wait_release(h);
}

int kolo_barrier(void) {
  return call("kolo_barrier", [&](kolo::Communicator& c) { c.barrier(); });
}

const char* kolo_last_error(void) {
  return tLastError.c_str();
}

const char* kolo_error_name(int code) {
  switch (code) {
    case KOLO_OK: return "KOLO_OK";
    case KOLO_ERR_INVALID_ARGUMENT: return "KOLO_ERR_INVALID_ARGUMENT";
    case KOLO_ERR_NOT_INITIALIZED: return "KOLO_ERR_NOT_INITIALIZED";
    case KOLO_ERR_ALREADY_INITIALIZED: return "KOLO_ERR_ALREADY_INITIALIZED";
    case KOLO_ERR_MISMATCH: return "KOLO_ERR_MISMATCH";
    case KOLO_ERR_PEER_LOST: return "KOLO_ERR_PEER_LOST";
    case KOLO_ERR_TIMEOUT: return "KOLO_ERR_TIMEOUT";
    case KOLO_ERR_IO: return "KOLO_ERR_IO";
    case KOLO_ERR_INTERNAL: return "KOLO_ERR_INTERNAL";
  }
  return "KOLO_ERR_UNKNOWN";
}

}  // extern "C"

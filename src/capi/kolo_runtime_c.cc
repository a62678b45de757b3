// The C API, part 2 (kolo/runtime.h): the runtimes of the process sets and
// the table of handles behind kolo_handle.
//
// State: the process sets and the handle table are the runtime's
// (runtime/process_set_table.h: gSets, open between kolo_init and
// kolo_finalize); this file turns C arguments into requests and the
// table's answers into C codes and kolo_last_error() texts. Calls on a
// handle (poll, wait, release, wait_release, output) take only the handle
// table's lock, once (gHandles: capi/handle_table.h over gSets' table).
//
// Lock order: kolo_c.cc's mutex, then gSets' locks, then the handle table's
// and the runtime's own.
#include <kolo/error.h>
#include <kolo/runtime.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "capi/capi_internal.h"
#include "capi/handle_table.h"
#include "collectives/cuda/device_staging.h"
#include "common/settings.h"
#include "runtime/process_set_table.h"
#include "runtime/runtime.h"

namespace {

using kolo::capi::fail;
using kolo::capi::HandleEntry;
using kolo::runtime::HandlePtr;
using kolo::runtime::OpKind;
using kolo::runtime::OpRequest;
using kolo::runtime::Runtime;

using ProcessSetPtr = kolo::runtime::ProcessSetTable::SetPtr;
using SetStatus = kolo::runtime::ProcessSetTable::Status;

kolo::runtime::ProcessSetTable gSets;               // the process sets and handles
kolo::capi::HandleTable gHandles(gSets.handles());  // its handles, in C codes

int notInitialized(const char* fn) {
  return fail(KOLO_ERR_NOT_INITIALIZED,
              std::string(fn) + " called before kolo_init (or after kolo_finalize)");
}

int invalid(const std::string& message) {
  return fail(KOLO_ERR_INVALID_ARGUMENT, message);
}

// Runs fn and converts every exception to a code plus kolo_last_error().
template <typename Fn>
int guarded(const char* fn, Fn&& body) {
  try {
    return body();
  } catch (const kolo::Error& e) {
    return fail(static_cast<int>(e.code()), e.what());
  } catch (const std::exception& e) {
    return fail(KOLO_ERR_INTERNAL, std::string(fn) + ": " + e.what());
  }
}

// A C caller may pass any int as an enum: look at the bytes.
template <typename T>
int rawValue(const T& v) {
  static_assert(sizeof(T) == sizeof(int));
  int raw;
  std::memcpy(&raw, &v, sizeof(raw));
  return raw;
}

// The error for a set that this rank (`rank` in the world) does not know.
int unknownSet(const char* fn, int id, int rank) {
  return invalid(std::string(fn) + ": process set " + std::to_string(id) +
                 " is not known on rank " + std::to_string(rank) +
                 " (never created here, destroyed, or this rank is not a member)");
}

// The set `id` on this rank, or an error code (0 when found).
int findSet(const char* fn, int id, ProcessSetPtr* out) {
  auto found = gSets.find(id);
  if (found.status == SetStatus::kClosed) return notInitialized(fn);
  if (found.status == SetStatus::kUnknown) return unknownSet(fn, id, found.worldRank);
  *out = std::move(found.set);
  return KOLO_OK;
}

// A handle that failed at submission with a bad argument is not kept: the
// submitting call returns that error instead. Other failures (the runtime
// broken by a lost peer, shut down) stay in the handle for kolo_wait.
int argumentError(const HandlePtr& handle) {
  if (!handle->poll()) return KOLO_OK;
  try {
    handle->wait();
  } catch (const kolo::Error& e) {
    if (e.code() == kolo::ErrorCode::kInvalidArgument) {
      return fail(KOLO_ERR_INVALID_ARGUMENT, e.what());
    }
  } catch (...) {
  }
  return KOLO_OK;
}

// Common checks of a submission's C arguments.
int checkShape(const char* fn, const char* name, int ndim, const int64_t* shape) {
  if (name == nullptr) return invalid(std::string(fn) + ": name is null");
  if (ndim < 0) {
    return invalid(std::string(fn) + " '" + name + "': negative ndim " +
                   std::to_string(ndim));
  }
  if (ndim > 0 && shape == nullptr) {
    return invalid(std::string(fn) + " '" + name + "': shape is null for ndim " +
                   std::to_string(ndim));
  }
  return KOLO_OK;
}

// By reference: a C caller may pass a value outside the enum, which must not
// be loaded as one (rawValue reads its bytes).
int checkDtype(const char* fn, const char* name, const kolo_dtype& dtype) {
  const int v = rawValue(dtype);
  if (v < 0 || v >= kolo::kNumDataTypes) {
    return invalid(std::string(fn) + " '" + name + "': unknown dtype value " +
                   std::to_string(v));
  }
  return KOLO_OK;
}

int checkOp(const char* fn, const char* name, const kolo_op& op) {
  const int v = rawValue(op);
  if (v < 0 || v >= kolo::kNumReduceOps) {
    return invalid(std::string(fn) + " '" + name + "': unknown op value " +
                   std::to_string(v));
  }
  return KOLO_OK;
}

OpRequest makeRequest(const char* name, OpKind kind, int ndim, const int64_t* shape,
                      kolo_dtype dtype) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = kind;
  r.spec.dtype = static_cast<kolo::DataType>(rawValue(dtype));
  if (ndim > 0) r.spec.shape.assign(shape, shape + ndim);
  return r;
}

// Host or device memory (capi_internal.h, CudaSubmission): a host request's
// buffers must not be CUDA device memory (refused by name); a device
// request gets its entry, with the ready event recorded now on the caller's
// stream (collectives/cuda/device_staging.h).
int prepareMemory(const char* fn, OpRequest& r) {
  const kolo_cuda_memory* memory = kolo::capi::CudaSubmission::current();
  r.device = nullptr;
  r.spec.onDevice = memory != nullptr;
  if (memory == nullptr) {
    if (int rc = kolo::capi::refuseDevicePointer(fn, "the input", r.input)) return rc;
    if (r.output == r.input) return KOLO_OK;
    return kolo::capi::refuseDevicePointer(fn, "the output", r.output);
  }
  return guarded(fn, [&] {
    r.device = kolo::collectives::cuda::DeviceEntry::record(
        std::string(fn) + "_cuda '" + r.spec.name +
            "': " + kolo::runtime::toString(r.spec.kind),
        memory->device, memory->stream);
    return KOLO_OK;
  });
}

// Enqueues one request on set `id` (the runtime copies it) and stores its
// handle. The hot path of a training step: the table's lock is held across
// the look-up and Runtime::enqueue (which never blocks), so the set needs
// no shared_ptr copy, and set 0 no map look-up.
int submit(const char* fn, int id, const OpRequest& request, kolo_handle* out,
           std::unique_ptr<std::vector<uint8_t>> owned = nullptr) {
  if (out == nullptr) return invalid(std::string(fn) + ": handle pointer is null");
  return guarded(fn, [&] {
    HandlePtr handle;
    int worldRank = -1;
    switch (gSets.enqueue(id, request, &handle, &worldRank)) {
      case SetStatus::kClosed: return notInitialized(fn);
      case SetStatus::kUnknown: return unknownSet(fn, id, worldRank);
      case SetStatus::kOk: break;
    }
    if (int rc = argumentError(handle)) return rc;
    const OpKind kind = request.spec.kind;
    return gHandles.add(fn, HandleEntry{std::move(handle), kind, std::move(owned)}, out);
  });
}

// ---- point to point ----------------------------------------------------------
// A process set's messages travel on kolo_init's communicator: the peer is
// the set member's world rank and the channel is the set's id, so the sets'
// tags never meet (api/point_to_point.h). The runtime::Handle in the table
// completes when the thread that waits or polls sees the Work end.

// The Work's outcome into the handle (once; later calls are ignored), and
// the error with the process set named.
int finishMessage(const char* fn, const HandleEntry& e, bool wait) {
  try {
    if (wait) {
      e.work->wait();
    } else if (!e.work->test()) {
      return KOLO_OK;
    } else {
      e.work->wait();  // done: returns or throws at once
    }
    e.handle->complete();
  } catch (const kolo::Error& err) {
    e.handle->fail(std::current_exception());
    if (wait) return fail(static_cast<int>(err.code()), err.what());
  } catch (const std::exception& err) {
    e.handle->fail(std::current_exception());
    if (wait) return fail(KOLO_ERR_INTERNAL, std::string(fn) + ": " + err.what());
  }
  return KOLO_OK;
}

template <typename Options>
int postMessage(const char* fn, bool send, Options o, const kolo_dtype& dtype,
                int processSet, kolo_handle* handle) {
  if (handle == nullptr) return invalid(std::string(fn) + ": handle pointer is null");
  const int v = rawValue(dtype);
  if (v < 0 || v >= kolo::kNumDataTypes) {
    return invalid(std::string(fn) + ": unknown dtype value " + std::to_string(v));
  }
  o.dtype = static_cast<kolo::DataType>(v);
  ProcessSetPtr set;
  if (int rc = findSet(fn, processSet, &set)) return rc;
  auto world = kolo::capi::world();
  if (!world) return notInitialized(fn);
  const int n = static_cast<int>(set->ranks.size());
  if (o.peer < 0 || o.peer >= n) {
    return invalid(std::string(fn) + ": peer " + std::to_string(o.peer) +
                   " is not a rank of process set " + std::to_string(processSet) + " (" +
                   std::to_string(n) + " ranks)");
  }
  const int setPeer = o.peer;
  o.peer = set->ranks[setPeer];
  o.channel = static_cast<uint32_t>(processSet);
  return guarded(fn, [&] {
    std::shared_ptr<kolo::Work> work;
    if constexpr (std::is_same_v<Options, kolo::SendOptions>) {
      work = world->isend(o);
    } else {
      work = world->irecv(o);
    }
    const std::string name = std::string(send ? "send to " : "receive from ") + "rank " +
                             std::to_string(setPeer) + " (tag " + std::to_string(o.tag) +
                             ", process set " + std::to_string(processSet) + ")";
    HandleEntry e{std::make_shared<kolo::runtime::Handle>(name), OpKind::kBarrier,
                  nullptr, std::move(work)};
    return gHandles.add(fn, std::move(e), handle);
  });
}

}  // namespace

namespace kolo::capi {

void startRuntimes(const std::shared_ptr<Communicator>& world) {
  gSets.open(world, runtime::RuntimeOptions::fromSettings(Settings::fromEnvironment()));
}

void stopRuntimes(std::shared_ptr<Communicator> world) {
  gSets.close(std::move(world));
}

}  // namespace kolo::capi

extern "C" {

// ---- process sets -----------------------------------------------------------

int kolo_process_set_create(const int* ranks, int n, int* id) {
  const char* fn = "kolo_process_set_create";
  if (ranks == nullptr || n <= 0) {
    return invalid(std::string(fn) +
                   ": needs a non-empty rank list (n = " + std::to_string(n) + ")");
  }
  if (id == nullptr) return invalid(std::string(fn) + ": id pointer is null");
  const std::vector<int> list(ranks, ranks + n);
  return guarded(fn, [&] {
    if (gSets.create(list, id) == SetStatus::kClosed) return notInitialized(fn);
    return KOLO_OK;
  });
}

int kolo_process_set_destroy(int id) {
  const char* fn = "kolo_process_set_destroy";
  if (id == 0) {
    return invalid(std::string(fn) +
                   ": process set 0 (every rank) ends with kolo_finalize");
  }
  auto found = gSets.detach(id);
  if (found.status == SetStatus::kClosed) return notInitialized(fn);
  if (found.status == SetStatus::kUnknown) {
    return invalid(std::string(fn) + ": process set " + std::to_string(id) +
                   " is not known on rank " + std::to_string(found.worldRank));
  }
  return guarded(fn, [&] {
    kolo::runtime::ProcessSetTable::retire(std::move(found.set));
    return KOLO_OK;
  });
}

int kolo_process_set_rank(int id, int* rank) {
  const char* fn = "kolo_process_set_rank";
  if (rank == nullptr) return invalid(std::string(fn) + ": rank pointer is null");
  if (id < 0) return invalid(std::string(fn) + ": negative id " + std::to_string(id));
  if (gSets.rankOf(id, rank) == SetStatus::kClosed) return notInitialized(fn);
  return KOLO_OK;
}

int kolo_process_set_size(int id, int* size) {
  const char* fn = "kolo_process_set_size";
  if (size == nullptr) return invalid(std::string(fn) + ": size pointer is null");
  ProcessSetPtr set;
  if (int rc = findSet(fn, id, &set)) return rc;
  *size = set->comm->size();
  return KOLO_OK;
}

// ---- submission -----------------------------------------------------------------

int kolo_allreduce_async(const char* name, const void* send, void* recv, int ndim,
                         const int64_t* shape, kolo_dtype dtype, kolo_op op,
                         double prescale, double postscale, int process_set,
                         kolo_handle* handle) {
  const char* fn = "kolo_allreduce_async";
  if (int rc = checkShape(fn, name, ndim, shape)) return rc;
  if (int rc = checkDtype(fn, name, dtype)) return rc;
  if (int rc = checkOp(fn, name, op)) return rc;
  // The hot path of a training step: one request per thread, reused, so a
  // steady-state submission allocates nothing for its name or shape (the
  // runtime copies it).
  thread_local OpRequest r;
  r.spec.name.assign(name);
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = static_cast<kolo::DataType>(rawValue(dtype));
  r.spec.shape.assign(shape, shape + ndim);
  r.spec.op = static_cast<kolo::ReduceOp>(rawValue(op));
  r.spec.prescale = prescale;
  r.spec.postscale = postscale;
  r.input = send;
  r.output = recv;
  if (int rc = prepareMemory(fn, r)) return rc;
  return submit(fn, process_set, r, handle);
}

int kolo_grouped_allreduce_async(int n, const char* const* names,
                                 const void* const* sends, void* const* recvs,
                                 const int* ndims, const int64_t* const* shapes,
                                 kolo_dtype dtype, kolo_op op, double prescale,
                                 double postscale, int process_set,
                                 kolo_handle* handles) {
  const char* fn = "kolo_grouped_allreduce_async";
  if (n < 0) return invalid(std::string(fn) + ": negative n " + std::to_string(n));
  if (n == 0) return KOLO_OK;
  if (names == nullptr || sends == nullptr || recvs == nullptr || ndims == nullptr ||
      shapes == nullptr || handles == nullptr) {
    return invalid(std::string(fn) + ": a null array for " + std::to_string(n) +
                   " operations");
  }
  std::vector<OpRequest> requests;
  for (int i = 0; i < n; ++i) {
    if (int rc = checkShape(fn, names[i], ndims[i], shapes[i])) return rc;
    if (int rc = checkDtype(fn, names[i], dtype)) return rc;
    if (int rc = checkOp(fn, names[i], op)) return rc;
    OpRequest r = makeRequest(names[i], OpKind::kAllreduce, ndims[i], shapes[i], dtype);
    r.spec.op = static_cast<kolo::ReduceOp>(rawValue(op));
    r.spec.prescale = prescale;
    r.spec.postscale = postscale;
    r.input = sends[i];
    r.output = recvs[i];
    if (int rc = prepareMemory(fn, r)) return rc;
    requests.push_back(std::move(r));
  }
  ProcessSetPtr set;
  if (int rc = findSet(fn, process_set, &set)) return rc;
  return guarded(fn, [&] {
    auto hs = set->runtime->enqueueGroup(std::move(requests));
    // A bad member fails the whole group at once: report it here.
    for (const auto& h : hs) {
      if (int rc = argumentError(h)) return rc;
    }
    for (size_t i = 0; i < hs.size(); ++i) {
      if (int rc = gHandles.add(fn, HandleEntry{hs[i], OpKind::kAllreduce, nullptr},
                                &handles[i])) {
        for (size_t j = 0; j < i; ++j) gHandles.release(fn, handles[j]);
        return rc;
      }
    }
    return KOLO_OK;
  });
}

int kolo_allgather_async(const char* name, const void* send, int ndim,
                         const int64_t* shape, kolo_dtype dtype, int process_set,
                         kolo_handle* handle) {
  const char* fn = "kolo_allgather_async";
  if (int rc = checkShape(fn, name, ndim, shape)) return rc;
  if (int rc = checkDtype(fn, name, dtype)) return rc;
  OpRequest r = makeRequest(name, OpKind::kAllgather, ndim, shape, dtype);
  r.input = send;
  if (int rc = prepareMemory(fn, r)) return rc;
  return submit(fn, process_set, std::move(r), handle);
}

int kolo_broadcast_async(const char* name, void* buf, int ndim, const int64_t* shape,
                         kolo_dtype dtype, int root, int process_set,
                         kolo_handle* handle) {
  const char* fn = "kolo_broadcast_async";
  if (int rc = checkShape(fn, name, ndim, shape)) return rc;
  if (int rc = checkDtype(fn, name, dtype)) return rc;
  OpRequest r = makeRequest(name, OpKind::kBroadcast, ndim, shape, dtype);
  r.spec.root = root;
  r.input = buf;
  r.output = buf;
  if (int rc = prepareMemory(fn, r)) return rc;
  return submit(fn, process_set, std::move(r), handle);
}

int kolo_alltoall_async(const char* name, const void* send, int ndim,
                        const int64_t* shape, const int64_t* splits, int nsplits,
                        kolo_dtype dtype, int process_set, kolo_handle* handle) {
  const char* fn = "kolo_alltoall_async";
  if (int rc = checkShape(fn, name, ndim, shape)) return rc;
  if (int rc = checkDtype(fn, name, dtype)) return rc;
  if (splits != nullptr && nsplits <= 0) {
    return invalid(std::string(fn) + " '" + name + "': " + std::to_string(nsplits) +
                   " splits given");
  }
  OpRequest r = makeRequest(name, OpKind::kAlltoall, ndim, shape, dtype);
  if (splits != nullptr) r.splits.assign(splits, splits + nsplits);
  r.input = send;
  if (int rc = prepareMemory(fn, r)) return rc;
  return submit(fn, process_set, std::move(r), handle);
}

int kolo_reducescatter_async(const char* name, const void* send, int ndim,
                             const int64_t* shape, kolo_dtype dtype, kolo_op op,
                             int process_set, kolo_handle* handle) {
  const char* fn = "kolo_reducescatter_async";
  if (int rc = checkShape(fn, name, ndim, shape)) return rc;
  if (int rc = checkDtype(fn, name, dtype)) return rc;
  if (int rc = checkOp(fn, name, op)) return rc;
  OpRequest r = makeRequest(name, OpKind::kReduceScatter, ndim, shape, dtype);
  r.spec.op = static_cast<kolo::ReduceOp>(rawValue(op));
  r.input = send;
  // The output (shape[0] / size rows) is kolo's, read with
  // kolo_handle_output. A shape the runtime will reject gets no buffer.
  int size = 0;
  if (int rc = kolo_process_set_size(process_set, &size)) return rc;
  auto owned = std::make_unique<std::vector<uint8_t>>();
  bool valid =
      ndim > 0 && size > 0 && r.spec.shape[0] >= 0 && r.spec.shape[0] % size == 0;
  for (int64_t d : r.spec.shape) valid = valid && d >= 0;
  if (valid) owned->resize(r.spec.bytes() / static_cast<size_t>(size));
  // With no bytes to write (no rows, or a shape the runtime rejects with its
  // own message) the runtime still wants a non-null output pointer.
  static uint8_t nothing;
  r.output = owned->empty() ? &nothing : owned->data();
  if (int rc = prepareMemory(fn, r)) return rc;
  return submit(fn, process_set, std::move(r), handle, std::move(owned));
}

int kolo_barrier_async(int process_set, kolo_handle* handle) {
  const char* fn = "kolo_barrier_async";
  ProcessSetPtr set;
  if (int rc = findSet(fn, process_set, &set)) return rc;
  // Barriers are matched by their position: the n-th barrier of a set on
  // every member.
  const std::string name = "kolo.barrier." + std::to_string(set->barriers.fetch_add(1));
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = OpKind::kBarrier;
  return submit(fn, process_set, std::move(r), handle);
}

int kolo_join_async(int process_set, kolo_handle* handle) {
  const char* fn = "kolo_join_async";
  if (handle == nullptr) return invalid(std::string(fn) + ": handle pointer is null");
  ProcessSetPtr set;
  if (int rc = findSet(fn, process_set, &set)) return rc;
  return guarded(fn, [&] {
    return gHandles.add(fn, HandleEntry{set->runtime->join(), OpKind::kJoin, nullptr},
                        handle);
  });
}

// ---- point to point ---------------------------------------------------------------

int kolo_isend(const void* buf, size_t count, kolo_dtype dtype, int peer, int tag,
               int process_set, kolo_handle* handle) {
  kolo::SendOptions o;
  o.buffer = buf;
  o.count = count;
  o.peer = peer;
  o.tag = tag;
  return postMessage("kolo_isend", true, o, dtype, process_set, handle);
}

int kolo_irecv(void* buf, size_t count, kolo_dtype dtype, int peer, int tag,
               int process_set, kolo_handle* handle) {
  kolo::RecvOptions o;
  o.buffer = buf;
  o.count = count;
  o.peer = peer;
  o.tag = tag;
  return postMessage("kolo_irecv", false, o, dtype, process_set, handle);
}

// ---- completion -----------------------------------------------------------------

int kolo_poll(kolo_handle handle, int* done) {
  if (done == nullptr) return invalid("kolo_poll: done pointer is null");
  HandleEntry e;
  if (int rc = gHandles.find("kolo_poll", handle, &e.handle, nullptr, nullptr, &e.work))
    return rc;
  if (e.work) finishMessage("kolo_poll", e, /*wait=*/false);
  *done = e.handle->poll() ? 1 : 0;
  return KOLO_OK;
}

int kolo_wait(kolo_handle handle) {
  HandleEntry e;
  if (int rc = gHandles.find("kolo_wait", handle, &e.handle, nullptr, nullptr, &e.work))
    return rc;
  if (e.work) return finishMessage("kolo_wait", e, /*wait=*/true);
  const HandlePtr& h = e.handle;
  return guarded("kolo_wait", [&] {
    h->wait();
    return KOLO_OK;
  });
}

int kolo_handle_output(kolo_handle handle, const void** data, size_t* bytes, int* ndim,
                       const int64_t** shape) {
  const char* fn = "kolo_handle_output";
  if (data == nullptr || bytes == nullptr || ndim == nullptr || shape == nullptr) {
    return invalid(std::string(fn) + ": a null output pointer");
  }
  HandlePtr h;
  OpKind kind;
  const std::vector<uint8_t>* owned = nullptr;
  std::shared_ptr<kolo::Work> work;
  if (int rc = gHandles.find(fn, handle, &h, &kind, &owned, &work)) return rc;
  if (work)
    return invalid(std::string(fn) + ": " + h->name() + " has no output of kolo's");
  if (kind != OpKind::kAllgather && kind != OpKind::kAlltoall &&
      kind != OpKind::kReduceScatter) {
    return invalid(std::string(fn) + ": " + kolo::runtime::toString(kind) + " '" +
                   h->name() +
                   "' has no output of kolo's (its result is in the buffer given)");
  }
  if (!h->poll()) {
    return invalid(std::string(fn) + ": " + kolo::runtime::toString(kind) + " '" +
                   h->name() + "' is still pending (kolo_wait first)");
  }
  return guarded(fn, [&] {
    h->wait();  // a failed operation has no output: its error
    const std::vector<uint8_t>& out =
        kind == OpKind::kReduceScatter ? *owned : h->output();
    *data = out.data();
    *bytes = out.size();
    *ndim = static_cast<int>(h->outputShape().size());
    *shape = h->outputShape().data();
    return KOLO_OK;
  });
}

int kolo_handle_cuda_event(kolo_handle handle, void** event) {
  const char* fn = "kolo_handle_cuda_event";
  if (event == nullptr) return invalid(std::string(fn) + ": event is null");
  HandlePtr h;
  OpKind kind;
  const std::vector<uint8_t>* owned = nullptr;
  std::shared_ptr<kolo::Work> work;
  if (int rc = gHandles.find(fn, handle, &h, &kind, &owned, &work)) return rc;
  *event = nullptr;
  // Done and succeeded: the stager recorded the event (and it completed).
  if (!work && h->deviceEntry() && h->poll()) {
    try {
      h->wait();
      *event = h->deviceEntry()->doneEvent();
    } catch (...) {
    }
  }
  return KOLO_OK;
}

int kolo_wait_release(kolo_handle handle) {
  const char* fn = "kolo_wait_release";
  HandleEntry entry;  // outlives the wait: it owns a reducescatter's output
  if (int rc = gHandles.take(fn, handle, &entry)) return rc;
  if (entry.work) return finishMessage(fn, entry, /*wait=*/true);
  return guarded(fn, [&] {
    entry.handle->wait();
    return KOLO_OK;
  });
}

int kolo_handle_notify(kolo_handle handle, kolo_done_fn fn, void* arg) {
  const char* fn_name = "kolo_handle_notify";
  if (fn == nullptr) return invalid(std::string(fn_name) + ": callback is null");
  HandlePtr h;
  std::shared_ptr<kolo::Work> work;
  if (int rc = gHandles.find(fn_name, handle, &h, nullptr, nullptr, &work)) return rc;
  if (work) {
    return invalid(std::string(fn_name) + ": " + h->name() +
                   ": point-to-point handles complete in kolo_wait or kolo_poll, "
                   "not through a callback");
  }
  return guarded(fn_name, [&] {
    h->onDone([fn, arg] { fn(arg); });
    return KOLO_OK;
  });
}

int kolo_release(kolo_handle handle) {
  // A message's handle goes at once: its operation, still pending in the
  // communicator, keeps the buffer in use until it ends.
  HandlePtr h;
  std::shared_ptr<kolo::Work> work;
  if (gHandles.find("kolo_release", handle, &h, nullptr, nullptr, &work) == KOLO_OK &&
      work && !h->poll()) {
    h->fail(std::make_exception_ptr(
        kolo::Error(kolo::ErrorCode::kInvalidArgument, h->name() + ": released")));
  }
  return gHandles.release("kolo_release", handle);
}

// ---- tools ------------------------------------------------------------------------

int kolo_start_timeline(const char* path) {
  const char* fn = "kolo_start_timeline";
  if (path == nullptr || *path == '\0') return invalid(std::string(fn) + ": empty path");
  ProcessSetPtr set;
  if (int rc = findSet(fn, 0, &set)) return rc;
  return guarded(fn, [&] {
    set->runtime->startTimeline(path);
    return KOLO_OK;
  });
}

int kolo_stop_timeline(void) {
  ProcessSetPtr set;
  if (int rc = findSet("kolo_stop_timeline", 0, &set)) return rc;
  return guarded("kolo_stop_timeline", [&] {
    set->runtime->stopTimeline();
    return KOLO_OK;
  });
}

int kolo_timeline_begin(const char* track, const char* phase, const char* const* arg_keys,
                        const char* const* arg_values, int num_args) {
  const char* fn = "kolo_timeline_begin";
  if (track == nullptr || *track == '\0' || phase == nullptr || *phase == '\0') {
    return invalid(std::string(fn) + ": empty track or phase name");
  }
  if (num_args < 0 || (num_args > 0 && (arg_keys == nullptr || arg_values == nullptr))) {
    return invalid(std::string(fn) + ": " + std::to_string(num_args) +
                   " args with a null key or value array");
  }
  for (int i = 0; i < num_args; ++i) {
    if (arg_keys[i] == nullptr || arg_values[i] == nullptr) {
      return invalid(std::string(fn) + ": arg " + std::to_string(i) + " is null");
    }
  }
  ProcessSetPtr set;
  if (int rc = findSet(fn, 0, &set)) return rc;
  return guarded(fn, [&] {
    if (auto tl = set->runtime->currentTimeline()) {
      std::vector<std::pair<std::string, std::string>> fields;
      for (int i = 0; i < num_args; ++i) fields.emplace_back(arg_keys[i], arg_values[i]);
      tl->begin(track, phase, num_args > 0 ? kolo::runtime::timelineArgs(fields) : "");
    }
    return KOLO_OK;
  });
}

int kolo_timeline_end(const char* track) {
  const char* fn = "kolo_timeline_end";
  if (track == nullptr || *track == '\0')
    return invalid(std::string(fn) + ": empty track");
  ProcessSetPtr set;
  if (int rc = findSet(fn, 0, &set)) return rc;
  return guarded(fn, [&] {
    if (auto tl = set->runtime->currentTimeline()) tl->end(track);
    return KOLO_OK;
  });
}

int kolo_timeline_active(int* active) {
  const char* fn = "kolo_timeline_active";
  if (active == nullptr) return invalid(std::string(fn) + ": null output");
  ProcessSetPtr set;
  if (int rc = findSet(fn, 0, &set)) return rc;
  *active = set->runtime->currentTimeline() != nullptr;
  return KOLO_OK;
}

int kolo_straggler_report(int process_set, kolo_rank_lag* lags, int size) {
  const char* fn = "kolo_straggler_report";
  ProcessSetPtr set;
  if (int rc = findSet(fn, process_set, &set)) return rc;
  if (lags == nullptr || size != set->comm->size()) {
    return invalid(std::string(fn) + ": process set " + std::to_string(process_set) +
                   " has " + std::to_string(set->comm->size()) + " ranks; got " +
                   (lags == nullptr ? std::string("a null array")
                                    : "room for " + std::to_string(size)));
  }
  return guarded(fn, [&] {
    const auto report = set->runtime->stragglerReport();
    for (int i = 0; i < size; ++i) {
      const auto& r = report.ranks.at(i);
      lags[i].operations = r.operations;
      lags[i].times_last = r.timesLast;
      lags[i].mean_lag_seconds = r.meanLagSeconds;
      lags[i].max_lag_seconds = r.maxLagSeconds;
    }
    return KOLO_OK;
  });
}

}  // extern "C"

// Shared between the two halves of the C API: kolo_c.cc (kolo.h: init,
// finalize, synchronous collectives) and kolo_runtime_c.cc (kolo/runtime.h:
// the runtimes, process sets and handles). Not installed.
#pragma once

#include <kolo/communicator.h>
#include <kolo/cuda.h>

#include <functional>
#include <memory>
#include <string>

namespace kolo::capi {

// Sets the calling thread's kolo_last_error() text and returns `code`.
int fail(int code, std::string message);

// KOLO_OK when `p` is not CUDA device memory; else KOLO_ERR_INVALID_ARGUMENT
// with kolo_last_error() "<fn>: <what> is CUDA device memory (device N):
// this call takes host memory; use <fn>_cuda" (kolo_cuda_c.cc). Asks the
// driver only when libcuda.so.1 is loaded (collectives/cuda/device_pointer.h).
int refuseDevicePointer(const char* fn, const char* what, const void* p);

// The device memory of the `_cuda` submission under way on this thread:
// kolo_runtime_cuda_c.cc sets it around the host call of the same name,
// whose request then becomes a device request (kolo_runtime_c.cc,
// prepareMemory). current() is null for host memory.
class CudaSubmission {
 public:
  explicit CudaSubmission(const kolo_cuda_memory* memory);
  ~CudaSubmission();
  CudaSubmission(const CudaSubmission&) = delete;
  CudaSubmission& operator=(const CudaSubmission&) = delete;
  static const kolo_cuda_memory* current();

 private:
  const kolo_cuda_memory* previous_;
};

// kolo_init's communicator; null before kolo_init and after kolo_finalize.
std::shared_ptr<Communicator> world();

// Runs fn on kolo_init's communicator (kolo_c.cc): KOLO_ERR_NOT_INITIALIZED
// before kolo_init, KOLO_OK when fn returns, else the code and message of
// what it threw. `name` is the C function, for messages.
int callOnWorld(const char* name, const std::function<void(Communicator&)>& fn);

// Called by kolo_init once the world communicator exists: starts the
// runtime of process set 0 on its own communicator (a split of every rank,
// so its cycles never interleave with the synchronous calls on `world`).
// Collective over every rank. Throws kolo::Error.
void startRuntimes(const std::shared_ptr<Communicator>& world);

// Shuts down every runtime (pending handles fail), drops every handle and
// process set, then releases the runtimes' communicators and `world` (from
// kolo_finalize: its last reference to the world communicator) at once, so
// that each one's closing step runs (runtime/process_set_table.h).
// Never throws.
void stopRuntimes(std::shared_ptr<Communicator> world = nullptr);

// kolo_init's world (kolo_ps_c.cc): the job's communicator, or with
// KOLO_SERVERS > 0 the workers' team (and on a server rank it serves and
// ends the process, never returning). Throws kolo::Error.
std::shared_ptr<Communicator> formWorld();

// kolo_finalize's last step on a worker of a job with servers: goodbye to
// every server, then the job communicator's closing barrier. Never throws.
void leaveJob();

}  // namespace kolo::capi

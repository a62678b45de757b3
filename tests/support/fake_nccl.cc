// A stand-in for libnccl.so.2 (tests/nccl_test.cc,
// tests/nccl_communicator_test.cc): every entry point NcclLibrary resolves.
// The test sets what ncclCommGetAsyncError answers (fakeNcclScript) and
// what the enqueueing calls return (fakeNcclEnqueue); the collectives
// write one line each to a log (fakeNcclTakeLog) instead of touching
// memory; counters say how often a communicator was made, aborted,
// destroyed.
#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

namespace {

struct FakeComm {
  int unused = 0;
};
struct UniqueId {
  char internal[128];
};

std::atomic<int> pollsUntilDone{0};  // < 0: never done
std::atomic<int> finalState{0};      // ncclResult_t once done
std::atomic<int> polls{0};           // since the last script
std::atomic<int> enqueueResult{0};   // what the collectives return
std::atomic<int> groupEndResult{0};
std::atomic<int> aborts{0};
std::atomic<int> destroys{0};
std::atomic<int> inits{0};
FakeComm comms[16];
std::atomic<int> next{0};
std::mutex logMutex;
std::string log;

void note(const char* format, ...) __attribute__((format(printf, 1, 2)));
void note(const char* format, ...) {
  char line[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  std::lock_guard<std::mutex> lock(logMutex);
  log += line;
  log += "\n";
}

}  // namespace

extern "C" {

// From now on ncclCommGetAsyncError answers ncclInProgress for
// `pollsBeforeState` polls (< 0: for ever), then `state`; an init answers
// `state` at once when pollsBeforeState is 0, else ncclInProgress.
void fakeNcclScript(int pollsBeforeState, int state) {
  pollsUntilDone = pollsBeforeState;
  finalState = state;
  polls = 0;
}

// What the collectives and ncclGroupEnd return from now on.
void fakeNcclEnqueue(int result, int groupEnd) {
  enqueueResult = result;
  groupEndResult = groupEnd;
}

// A line of the log from the test's side (its device operations).
void fakeNcclNote(const char* line) {
  note("%s", line);
}

// The log so far (one line per call), cleared; valid until the next call.
const char* fakeNcclTakeLog() {
  static std::string taken;
  std::lock_guard<std::mutex> lock(logMutex);
  taken.clear();
  taken.swap(log);
  return taken.c_str();
}

// "abort", "destroy" or "init": how many calls so far.
int fakeNcclCount(const char* what) {
  if (std::strcmp(what, "abort") == 0) return aborts;
  if (std::strcmp(what, "destroy") == 0) return destroys;
  return inits;
}

std::atomic<int> fakeVersion{22809};

// What ncclGetVersion answers from now on.
void fakeNcclSetVersion(int version) {
  fakeVersion = version;
}

int ncclGetVersion(int* version) {
  *version = fakeVersion;
  return 0;
}

const char* ncclGetErrorString(int result) {
  switch (result) {
    case 0: return "no error";
    case 2: return "unhandled system error (fake)";
    case 4: return "invalid argument (fake)";
    case 5: return "invalid usage (fake)";
    case 6: return "remote process exited or there was a network error (fake)";
    case 7: return "operation in progress (fake)";
    default: return "fake error";
  }
}

const char* ncclGetLastError(void*) {
  return "the fake's last error";
}

int ncclGetUniqueId(void* id) {
  std::memset(id, 0x5a, 128);
  return 0;
}

int ncclCommInitRankConfig(FakeComm** comm, int, UniqueId, int, void*) {
  ++inits;
  *comm = &comms[next++ % 16];
  return pollsUntilDone == 0 ? finalState.load() : 7;
}

int ncclCommGetAsyncError(FakeComm*, int* state) {
  const int limit = pollsUntilDone;
  if (limit < 0 || polls++ < limit) {
    *state = 7;  // ncclInProgress
  } else {
    *state = finalState;
  }
  return 0;
}

int ncclCommAbort(FakeComm*) {
  ++aborts;
  note("abort");
  return 0;
}

int ncclCommDestroy(FakeComm*) {
  ++destroys;
  note("destroy");
  return 0;
}

int ncclCommFinalize(FakeComm*) {
  note("finalize");
  return 0;
}
int ncclCommInitRank() {
  return 3;
}
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, FakeComm*, void*) {
  note("allReduce s=%p r=%p n=%zu t=%d op=%d", s, r, n, t, op);
  return enqueueResult;
}
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, FakeComm*, void*) {
  note("broadcast s=%p r=%p n=%zu t=%d root=%d", s, r, n, t, root);
  return enqueueResult;
}
int ncclAllGather(const void* s, void* r, size_t n, int t, FakeComm*, void*) {
  note("allGather s=%p r=%p n=%zu t=%d", s, r, n, t);
  return enqueueResult;
}
int ncclReduceScatter(const void* s, void* r, size_t n, int t, int op, FakeComm*, void*) {
  note("reduceScatter s=%p r=%p n=%zu t=%d op=%d", s, r, n, t, op);
  return enqueueResult;
}
int ncclReduce(const void* s, void* r, size_t n, int t, int op, int root, FakeComm*,
               void*) {
  note("reduce s=%p r=%p n=%zu t=%d op=%d root=%d", s, r, n, t, op, root);
  return enqueueResult;
}
int ncclSend(const void* b, size_t n, int t, int peer, FakeComm*, void*) {
  note("send b=%p n=%zu t=%d peer=%d", b, n, t, peer);
  return enqueueResult;
}
int ncclRecv(void* b, size_t n, int t, int peer, FakeComm*, void*) {
  note("recv b=%p n=%zu t=%d peer=%d", b, n, t, peer);
  return enqueueResult;
}
int ncclGroupStart() {
  note("groupStart");
  return 0;
}
int ncclGroupEnd() {
  note("groupEnd");
  return groupEndResult;
}

}  // extern "C"

// A stand-in for libnccl.so.2 (tests/nccl_test.cc): every entry point
// NcclLibrary resolves, with a communicator init whose outcome the test
// sets (fakeNcclScript), and counters of what was called (fakeNcclCount).
// The collectives are never called here (they need a GPU).
#include <atomic>
#include <cstddef>
#include <cstring>

namespace {

struct FakeComm {
  int polls = 0;
};
struct UniqueId {
  char internal[128];
};

std::atomic<int> pollsUntilDone{0};  // < 0: never done
std::atomic<int> finalState{0};      // ncclResult_t once done
std::atomic<int> aborts{0};
std::atomic<int> destroys{0};
std::atomic<int> inits{0};
FakeComm comms[16];
std::atomic<int> next{0};

}  // namespace

extern "C" {

// The next init: ncclInProgress for `polls` polls of ncclCommGetAsyncError
// (< 0: for ever), then `state`.
void fakeNcclScript(int polls, int state) {
  pollsUntilDone = polls;
  finalState = state;
}

// "abort", "destroy" or "init": how many calls so far.
int fakeNcclCount(const char* what) {
  if (std::strcmp(what, "abort") == 0) return aborts;
  if (std::strcmp(what, "destroy") == 0) return destroys;
  return inits;
}

int ncclGetVersion(int* version) {
  *version = 22809;
  return 0;
}

const char* ncclGetErrorString(int result) {
  switch (result) {
    case 0: return "no error";
    case 2: return "unhandled system error (fake)";
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
  FakeComm* c = &comms[next++ % 16];
  c->polls = 0;
  *comm = c;
  return pollsUntilDone == 0 ? finalState.load() : 7;
}

int ncclCommGetAsyncError(FakeComm* comm, int* state) {
  const int limit = pollsUntilDone;
  if (limit < 0 || comm->polls++ < limit) {
    *state = 7;  // ncclInProgress
  } else {
    *state = finalState;
  }
  return 0;
}

int ncclCommAbort(FakeComm*) {
  ++aborts;
  return 0;
}

int ncclCommDestroy(FakeComm*) {
  ++destroys;
  return 0;
}

int ncclCommFinalize(FakeComm*) {
  return 0;
}
int ncclCommInitRank() {
  return 3;
}
int ncclAllReduce() {
  return 3;
}
int ncclBroadcast() {
  return 3;
}
int ncclAllGather() {
  return 3;
}
int ncclReduceScatter() {
  return 3;
}
int ncclReduce() {
  return 3;
}
int ncclSend() {
  return 3;
}
int ncclRecv() {
  return 3;
}
int ncclGroupStart() {
  return 0;
}
int ncclGroupEnd() {
  return 0;
}

}  // extern "C"

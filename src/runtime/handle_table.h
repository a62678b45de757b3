// The table of handles that the bindings hand out as integers (the C API's
// kolo_handle, and through it Python's): value -> the runtime's handle,
// the kind of operation and the output buffer the binding owns
// (reducescatter). Owned by ProcessSetTable (process_set_table.h), so that
// everything a re-formed job renumbers lives in one place.
//
// Contract
// - Thread-safe: every member may be called from any thread. One mutex,
//   taken once per call and never held while blocking (wait() runs on what
//   take() or find() hands out, unlocked). Nothing else is taken under it.
// - A handle value is > 0 and never reused within a process (across close()
//   and open() too). A value that was never returned, was already released,
//   or belongs to an earlier open() is refused (kUnknown, with the reason);
//   it can never reach another operation's entry.
// - Closed (every call returns kClosed) until open(); close() empties it
//   and hands back every entry, pending released ones included, for the
//   caller to drop once the runtimes have stopped writing to them.
// - A call allocates nothing in the steady state (slots are reused) and
//   reports failures as a Status plus a static reason text; the binding
//   turns them into its own errors (capi/handle_table.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <kolo/communicator.h>

#include "runtime/handle.h"
#include "runtime/op_spec.h"

namespace kolo::runtime {

using HandleValue = int64_t;

struct HandleEntry {
  HandleEntry() = default;
  HandleEntry(HandlePtr h, OpKind k, std::unique_ptr<std::vector<uint8_t>> o,
              std::shared_ptr<Work> w = nullptr)
      : handle(std::move(h)), kind(k), owned(std::move(o)), work(std::move(w)) {}

  HandlePtr handle;
  OpKind kind = OpKind::kAllreduce;
  std::unique_ptr<std::vector<uint8_t>> owned;  // reducescatter's output
  // A point-to-point message's Work (api/point_to_point.h): driven by the
  // thread that waits or polls, which completes `handle` when it ends.
  std::shared_ptr<Work> work;
};

class HandleTable {
 public:
  // Bits of a handle value that index its slot: at most 2^22 (4,194,304)
  // handles held at once. The 41 bits above count the handles made in this
  // process, so a value is never made twice (2^41 handles: 25 days at a
  // million per second).
  static constexpr int kIndexBits = 22;
  static constexpr size_t kMaxSlots = size_t{1} << kIndexBits;

  enum class Status {
    kOk,
    kClosed,     // not open
    kUnknown,    // a value not held now; `why` says more
    kExhausted,  // every value there can be was made (2^41)
    kFull,       // kMaxSlots handles held at once
  };
  struct Result {
    Status status = Status::kOk;
    const char* why = "";  // kUnknown: "handles are > 0", "already released", ...
    bool ok() const { return status == Status::kOk; }
  };

  void open();
  std::vector<HandleEntry> close();

  // Stores `entry` and writes its new handle to *out.
  Result add(HandleEntry entry, HandleValue* out);
  // Copies out what callers read (any pointer may be null): the entry stays.
  Result find(HandleValue h, HandlePtr* handle, OpKind* kind = nullptr,
              const std::vector<uint8_t>** owned = nullptr,
              std::shared_ptr<Work>* work = nullptr);
  // Removes the entry and moves it to *out.
  Result take(HandleValue h, HandleEntry* out);
  // Removes the entry. One still pending is kept until its operation ends
  // (the runtime may still write its owned buffer); finished ones kept so
  // are dropped here, outside the lock.
  Result release(HandleValue h);

  // Handles held now (not counting released pending ones).
  size_t size();

 private:
  struct Slot {
    HandleValue value = 0;         // the live handle in this slot; 0 when free
    HandleValue lastReleased = 0;  // for the error of a second release
    uint32_t nextFree = 0;
    HandleEntry entry;
  };
  static constexpr uint32_t kNoSlot = UINT32_MAX;

  // The slot holding `h`, or null with the failure in *result (mu_ held).
  Slot* slotLocked(HandleValue h, Result* result);
  void freeLocked(Slot* slot, uint32_t index);

  std::mutex mu_;
  bool open_ = false;                         // guarded by mu_
  std::vector<Slot> slots_;                   // guarded by mu_
  uint32_t freeHead_ = kNoSlot;               // guarded by mu_: a LIFO list of free slots
  size_t used_ = 0;                           // guarded by mu_
  int64_t nextSerial_ = 1;                    // guarded by mu_: never reset
  std::vector<HandleEntry> releasedPending_;  // guarded by mu_
};

}  // namespace kolo::runtime

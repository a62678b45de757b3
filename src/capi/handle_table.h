// The C API's table of handles: kolo_handle -> the runtime's handle, the
// kind of operation and the output buffer the C layer owns (reducescatter).
//
// Contract
// - Thread-safe: every member may be called from any thread. One mutex,
//   taken once per call and never held while blocking (wait() runs on what
//   take() or find() hands out, unlocked). Lock order: after the C API's
//   gMu (kolo_runtime_c.cc); nothing else is taken under it.
// - A handle value is > 0 and never reused within a process (across
//   kolo_finalize and kolo_init too). A value that was never returned, was
//   already released, or belongs to an earlier kolo_init is an
//   InvalidArgument error naming it; it can never reach another operation's
//   entry.
// - Closed (every call fails with NotInitialized) until open(); close()
//   empties it and hands back every entry, pending released ones included,
//   for the caller to drop once the runtimes have stopped writing to them.
//
// Errors are returned as C API codes with kolo_last_error() set (capi::fail).
#pragma once

#include <kolo/runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/handle.h"
#include "runtime/op_spec.h"

namespace kolo::capi {

struct HandleEntry {
  runtime::HandlePtr handle;
  runtime::OpKind kind = runtime::OpKind::kAllreduce;
  std::unique_ptr<std::vector<uint8_t>> owned;  // reducescatter's output
};

class HandleTable {
 public:
  // Bits of a handle value that index its slot: at most 2^22 (4,194,304)
  // handles held at once. The 41 bits above count the handles made in this
  // process, so a value is never made twice (2^41 handles: 25 days at a
  // million per second).
  static constexpr int kIndexBits = 22;
  static constexpr size_t kMaxSlots = size_t{1} << kIndexBits;

  void open();
  std::vector<HandleEntry> close();

  // Stores `entry` and writes its new handle to *out.
  int add(const char* fn, HandleEntry entry, kolo_handle* out);
  // Copies out what callers read (any pointer may be null): the entry stays.
  int find(const char* fn, kolo_handle h, runtime::HandlePtr* handle,
           runtime::OpKind* kind = nullptr, const std::vector<uint8_t>** owned = nullptr);
  // Removes the entry and moves it to *out.
  int take(const char* fn, kolo_handle h, HandleEntry* out);
  // Removes the entry. One still pending is kept until its operation ends
  // (the runtime may still write its owned buffer); finished ones kept so
  // are dropped here, outside the lock.
  int release(const char* fn, kolo_handle h);

  // Handles held now (not counting released pending ones).
  size_t size();

 private:
  struct Slot {
    kolo_handle value = 0;         // the live handle in this slot; 0 when free
    kolo_handle lastReleased = 0;  // for the error of a second release
    uint32_t nextFree = 0;
    HandleEntry entry;
  };
  static constexpr uint32_t kNoSlot = UINT32_MAX;

  // The slot holding `h`, or null with the error set in *rc (mu_ held).
  Slot* slotLocked(const char* fn, kolo_handle h, int* rc);
  void freeLocked(Slot* slot, uint32_t index);

  std::mutex mu_;
  bool open_ = false;                         // guarded by mu_
  std::vector<Slot> slots_;                   // guarded by mu_
  uint32_t freeHead_ = kNoSlot;               // guarded by mu_: a LIFO list of free slots
  size_t used_ = 0;                           // guarded by mu_
  int64_t nextSerial_ = 1;                    // guarded by mu_: never reset
  std::vector<HandleEntry> releasedPending_;  // guarded by mu_
};

}  // namespace kolo::capi

// The C API's face of the runtime's handle table (runtime/handle_table.h):
// the same calls with the C function's name, returning C API codes with
// kolo_last_error() set (capi::fail):
//   closed                -> NotInitialized, "FN called before kolo_init
//                            (or after kolo_finalize)"
//   unknown value         -> InvalidArgument, "FN: unknown handle H (why)"
//   every value made      -> Internal
//   too many held at once -> InvalidArgument
// A default-made table owns its runtime table; otherwise it works on the
// one given (the ProcessSetTable's), which must outlive it. Thread-safety,
// value rules and lock order are the runtime table's; the adapter adds
// nothing per call but the code translation.
#pragma once

#include <kolo/kolo.h>
#include <kolo/runtime.h>

#include <memory>
#include <utility>
#include <vector>

#include "runtime/handle_table.h"

namespace kolo::capi {

using runtime::HandleEntry;

class HandleTable {
 public:
  static constexpr int kIndexBits = runtime::HandleTable::kIndexBits;

  HandleTable();
  explicit HandleTable(runtime::HandleTable& table);

  void open() { table_->open(); }
  std::vector<HandleEntry> close() { return table_->close(); }

  // Inline: a call that succeeds costs the runtime table's call alone.
  int add(const char* fn, HandleEntry entry, kolo_handle* out) {
    const auto r = table_->add(std::move(entry), out);
    return r.ok() ? KOLO_OK : failure(fn, 0, r);
  }
  int find(const char* fn, kolo_handle h, runtime::HandlePtr* handle,
           runtime::OpKind* kind = nullptr, const std::vector<uint8_t>** owned = nullptr,
           std::shared_ptr<Work>* work = nullptr) {
    const auto r = table_->find(h, handle, kind, owned, work);
    return r.ok() ? KOLO_OK : failure(fn, h, r);
  }
  int take(const char* fn, kolo_handle h, HandleEntry* out) {
    const auto r = table_->take(h, out);
    return r.ok() ? KOLO_OK : failure(fn, h, r);
  }
  int release(const char* fn, kolo_handle h) {
    const auto r = table_->release(h);
    return r.ok() ? KOLO_OK : failure(fn, h, r);
  }
  size_t size() { return table_->size(); }

 private:
  // The C code and kolo_last_error() of a failed call of `fn` on `h`.
  static int failure(const char* fn, kolo_handle h,
                     const runtime::HandleTable::Result& r);

  std::unique_ptr<runtime::HandleTable> owned_;  // default-made only
  runtime::HandleTable* table_;
};

}  // namespace kolo::capi

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

#include <kolo/runtime.h>

#include <memory>
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

  int add(const char* fn, HandleEntry entry, kolo_handle* out);
  int find(const char* fn, kolo_handle h, runtime::HandlePtr* handle,
           runtime::OpKind* kind = nullptr, const std::vector<uint8_t>** owned = nullptr);
  int take(const char* fn, kolo_handle h, HandleEntry* out);
  int release(const char* fn, kolo_handle h);
  size_t size() { return table_->size(); }

 private:
  std::unique_ptr<runtime::HandleTable> owned_;  // default-made only
  runtime::HandleTable* table_;
};

}  // namespace kolo::capi

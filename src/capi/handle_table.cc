// The C API's handle table adapter (handle_table.h).
#include "capi/handle_table.h"

#include <string>
#include <utility>

#include "capi/capi_internal.h"

namespace kolo::capi {

using Status = runtime::HandleTable::Status;

int HandleTable::failure(const char* fn, kolo_handle h,
                         const runtime::HandleTable::Result& r) {
  switch (r.status) {
    case Status::kOk: return KOLO_OK;
    case Status::kClosed:
      return fail(KOLO_ERR_NOT_INITIALIZED,
                  std::string(fn) + " called before kolo_init (or after kolo_finalize)");
    case Status::kUnknown:
      return fail(KOLO_ERR_INVALID_ARGUMENT, std::string(fn) + ": unknown handle " +
                                                 std::to_string(h) + " (" + r.why + ")");
    case Status::kExhausted:
      return fail(KOLO_ERR_INTERNAL, std::string(fn) +
                                         ": this process has made every handle value "
                                         "there can be (2^41)");
    case Status::kFull:
      return fail(KOLO_ERR_INVALID_ARGUMENT,
                  std::string(fn) + ": " +
                      std::to_string(runtime::HandleTable::kMaxSlots) +
                      " handles are held at once, the most there can be (release "
                      "or wait_release finished ones)");
  }
  return fail(KOLO_ERR_INTERNAL, std::string(fn) + ": unknown handle table status");
}

HandleTable::HandleTable()
    : owned_(std::make_unique<runtime::HandleTable>()), table_(owned_.get()) {}

HandleTable::HandleTable(runtime::HandleTable& table) : table_(&table) {}

}  // namespace kolo::capi

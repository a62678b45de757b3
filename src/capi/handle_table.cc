// The C API's handle table adapter (handle_table.h).
#include "capi/handle_table.h"

#include <string>
#include <utility>

#include "capi/capi_internal.h"

namespace kolo::capi {
namespace {

using Status = runtime::HandleTable::Status;

// The C code and kolo_last_error() of a failed call of `fn` on `h` (0: add).
int failure(const char* fn, kolo_handle h, const runtime::HandleTable::Result& r) {
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

}  // namespace

HandleTable::HandleTable()
    : owned_(std::make_unique<runtime::HandleTable>()), table_(owned_.get()) {}

HandleTable::HandleTable(runtime::HandleTable& table) : table_(&table) {}

int HandleTable::add(const char* fn, HandleEntry entry, kolo_handle* out) {
  const auto r = table_->add(std::move(entry), out);
  return r.ok() ? KOLO_OK : failure(fn, 0, r);
}

int HandleTable::find(const char* fn, kolo_handle h, runtime::HandlePtr* handle,
                      runtime::OpKind* kind, const std::vector<uint8_t>** owned) {
  const auto r = table_->find(h, handle, kind, owned);
  return r.ok() ? KOLO_OK : failure(fn, h, r);
}

int HandleTable::take(const char* fn, kolo_handle h, HandleEntry* out) {
  const auto r = table_->take(h, out);
  return r.ok() ? KOLO_OK : failure(fn, h, r);
}

int HandleTable::release(const char* fn, kolo_handle h) {
  const auto r = table_->release(h);
  return r.ok() ? KOLO_OK : failure(fn, h, r);
}

}  // namespace kolo::capi

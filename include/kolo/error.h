// The one exception type kolo throws. Internally every recoverable failure
// is a kolo::Error; the C API converts it to a code plus kolo_last_error()
// at the boundary (see docs/errors.md).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kolo {

// Values match kolo_error in kolo.h.
enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotInitialized = 2,
  kAlreadyInitialized = 3,
  kMismatch = 4,
  kPeerLost = 5,
  kTimeout = 6,
  kIo = 7,
  kInternal = 8,
};

std::string_view toString(ErrorCode code);

class Error : public std::runtime_error {
 public:
  // peer: the rank that was lost or disagreed, -1 when none applies.
  Error(ErrorCode code, const std::string& message, int peer = -1);

  ErrorCode code() const noexcept { return code_; }
  int peer() const noexcept { return peer_; }

 private:
  ErrorCode code_;
  int peer_;
};

}  // namespace kolo

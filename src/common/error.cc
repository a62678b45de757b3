#include <kolo/error.h>

#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace kolo {

std::string_view toString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotInitialized: return "not initialized";
    case ErrorCode::kAlreadyInitialized: return "already initialized";
    case ErrorCode::kMismatch: return "mismatch between ranks";
    case ErrorCode::kPeerLost: return "peer lost";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message, int peer)
    : std::runtime_error(message), code_(code), peer_(peer) {}

namespace detail {

void throwCheckFailure(const char* file, int line, const std::string& what) {
  throw Error(ErrorCode::kInternal,
              what + " at " + file + ":" + std::to_string(line));
}

std::string errnoString() {
  int e = errno;
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

}  // namespace detail
}  // namespace kolo

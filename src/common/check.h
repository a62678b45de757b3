// Invariant checks and error raising.
//
// Two channels (docs/errors.md):
// - KOLO_CHECK*: a broken invariant inside kolo. Throws Error(kInternal)
//   with both values and file:line.
// - KOLO_THROW(code, message-stream): a recoverable failure the caller
//   should see (bad input, peer lost, timeout, mismatch).
#pragma once

#include <kolo/error.h>

#include <sstream>
#include <string>

namespace kolo::detail {

[[noreturn]] void throwCheckFailure(const char* file, int line,
                                    const std::string& what);

}  // namespace kolo::detail

#define KOLO_THROW(code, stream_expr)              \
  do {                                             \
    std::ostringstream kolo_throw_os_;             \
    kolo_throw_os_ << stream_expr;                 \
    throw ::kolo::Error((code), kolo_throw_os_.str()); \
  } while (0)

#define KOLO_THROW_PEER(code, peer, stream_expr)              \
  do {                                                        \
    std::ostringstream kolo_throw_os_;                        \
    kolo_throw_os_ << stream_expr;                            \
    throw ::kolo::Error((code), kolo_throw_os_.str(), (peer)); \
  } while (0)

#define KOLO_CHECK(cond)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      ::kolo::detail::throwCheckFailure(__FILE__, __LINE__,               \
                                        "check failed: " #cond);          \
    }                                                                     \
  } while (0)

#define KOLO_CHECK_OP_(a, b, op)                                          \
  do {                                                                    \
    const auto& kolo_a_ = (a);                                            \
    const auto& kolo_b_ = (b);                                            \
    if (!(kolo_a_ op kolo_b_)) {                                          \
      std::ostringstream kolo_os_;                                        \
      kolo_os_ << "check failed: " #a " " #op " " #b " (" << kolo_a_      \
               << " vs " << kolo_b_ << ")";                               \
      ::kolo::detail::throwCheckFailure(__FILE__, __LINE__, kolo_os_.str()); \
    }                                                                     \
  } while (0)

#define KOLO_CHECK_EQ(a, b) KOLO_CHECK_OP_(a, b, ==)
#define KOLO_CHECK_NE(a, b) KOLO_CHECK_OP_(a, b, !=)
#define KOLO_CHECK_LT(a, b) KOLO_CHECK_OP_(a, b, <)
#define KOLO_CHECK_LE(a, b) KOLO_CHECK_OP_(a, b, <=)
#define KOLO_CHECK_GT(a, b) KOLO_CHECK_OP_(a, b, >)
#define KOLO_CHECK_GE(a, b) KOLO_CHECK_OP_(a, b, >=)

// For system calls: throws Error(kIo) with strerror(errno).
#define KOLO_SYSCHECK(expr, what)                                         \
  do {                                                                    \
    if ((expr) < 0) {                                                     \
      KOLO_THROW(::kolo::ErrorCode::kIo, what << ": " << ::kolo::detail::errnoString()); \
    }                                                                     \
  } while (0)

namespace kolo::detail {
std::string errnoString();
}  // namespace kolo::detail

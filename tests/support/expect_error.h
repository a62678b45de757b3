// Small assertions that the C++ tests share: the kolo::Error a call throws,
// and whether a message contains a part.
#pragma once

#include <gtest/gtest.h>
#include <kolo/error.h>

#include <string>

namespace kolo::test {

// Runs fn and returns the kolo::Error it throws (fails the test if none).
template <typename Fn>
Error expectError(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a kolo::Error";
  return Error(ErrorCode::kOk, "");
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace kolo::test

#include "train_flags.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <kolo/error.h>

namespace kolo::predict::cli {

namespace {

[[noreturn]] void bad(const std::string& flag, const std::string& text,
                      const std::string& expected) {
  throw Error(ErrorCode::kInvalidArgument,
              "kolo-predict train: " + flag + " '" + text + "': expected " + expected);
}

// The number at the start of `text` and the lower-cased rest.
bool split(const std::string& text, double* value, std::string* unit) {
  const char* begin = text.c_str();
  char* end = nullptr;
  *value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(*value)) return false;
  unit->clear();
  for (const char* p = end; *p; ++p) {
    *unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  }
  return true;
}

}  // namespace

double parseCount(const std::string& flag, const std::string& text) {
  double v;
  std::string u;
  const char* expected = "a number with an optional K, M or G (e.g. 25.6M)";
  if (!split(text, &v, &u) || v < 0) bad(flag, text, expected);
  if (u.empty()) return v;
  if (u == "k") return v * 1e3;
  if (u == "m") return v * 1e6;
  if (u == "g") return v * 1e9;
  bad(flag, text, expected);
}

double parseBitsPerSecond(const std::string& flag, const std::string& text) {
  double v;
  std::string u;
  const char* expected = "a rate such as 25gbit, 100mbit or 10g (bits per second)";
  if (!split(text, &v, &u) || !(v > 0)) bad(flag, text, expected);
  if (u.size() > 3 && u.compare(u.size() - 3, 3, "bit") == 0) u.resize(u.size() - 3);
  if (u.size() > 2 && u.compare(u.size() - 2, 2, "/s") == 0) bad(flag, text, expected);
  if (u.empty()) return v;
  if (u == "k") return v * 1e3;
  if (u == "m") return v * 1e6;
  if (u == "g") return v * 1e9;
  if (u == "t") return v * 1e12;
  bad(flag, text, expected);
}

double parseSeconds(const std::string& flag, const std::string& text) {
  double v;
  std::string u;
  const char* expected = "a time such as 2us, 1.5ms or 0.1s";
  if (!split(text, &v, &u) || v < 0) bad(flag, text, expected);
  if (u.empty() || u == "s") return v;
  if (u == "ms") return v * 1e-3;
  if (u == "us") return v * 1e-6;
  if (u == "ns") return v * 1e-9;
  bad(flag, text, expected);
}

int parseInt(const std::string& flag, const std::string& text, int minimum) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < minimum || v > 1 << 30) {
    bad(flag, text, "an integer >= " + std::to_string(minimum));
  }
  return static_cast<int>(v);
}

}  // namespace kolo::predict::cli

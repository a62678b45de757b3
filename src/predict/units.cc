#include "predict/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kolo::predict {
namespace {

[[noreturn]] void fail(std::string_view what, std::string_view text,
                       const char* expected) {
  throw UnitError(std::string(what) + " '" + std::string(text) + "': " + expected);
}

// The leading number of `text` (digits, one '.', an exponent) and the rest
// in lower case; false when there is no number or it is negative.
bool split(std::string_view text, double* value, std::string* unit) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  s = s.substr(i);
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) {
    return false;
  }
  size_t end = 0;
  while (end < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) {
    ++end;
  }
  // An exponent only when digits follow ("1e6", not the "e" of a unit).
  if (end + 1 < s.size() && (s[end] == 'e' || s[end] == 'E') &&
      (std::isdigit(static_cast<unsigned char>(s[end + 1])) ||
       ((s[end + 1] == '-' || s[end + 1] == '+') && end + 2 < s.size() &&
        std::isdigit(static_cast<unsigned char>(s[end + 2]))))) {
    end += 2;
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  }
  const std::string number = s.substr(0, end);
  char* stop = nullptr;
  const double v = std::strtod(number.c_str(), &stop);
  if (stop != number.c_str() + number.size() || !std::isfinite(v) || v < 0) return false;
  *value = v;
  unit->clear();
  for (size_t j = end; j < s.size(); ++j) {
    if (std::isspace(static_cast<unsigned char>(s[j]))) continue;
    unit->push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[j]))));
  }
  return true;
}

std::string trimmed(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

}  // namespace

size_t parseBytes(std::string_view what, std::string_view text) {
  constexpr const char* kExpected =
      "expected a size in bytes such as 4096, 4K, 64M or 1.5G (K = 1024)";
  double v = 0;
  std::string unit;
  if (!split(text, &v, &unit)) fail(what, text, kExpected);
  if (!unit.empty() && unit.back() == 'b' && unit != "b") unit.pop_back();  // KB, MB
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();                  // KiB
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k") {
    scale = 1024.0;
  } else if (unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    fail(what, text, kExpected);
  }
  const double bytes = std::round(v * scale);
  if (bytes > 1e18) fail(what, text, "too large");
  return static_cast<size_t>(bytes);
}

double parseCount(std::string_view what, std::string_view text) {
  constexpr const char* kExpected = "expected a count such as 1000, 25.6M or 1.2G";
  double v = 0;
  std::string unit;
  if (!split(text, &v, &unit)) fail(what, text, kExpected);
  if (unit.empty()) return v;
  if (unit == "k") return v * 1e3;
  if (unit == "m") return v * 1e6;
  if (unit == "g" || unit == "b") return v * 1e9;
  fail(what, text, kExpected);
}

double parseRate(std::string_view what, std::string_view text) {
  constexpr const char* kExpected =
      "expected a link rate such as 25gbit, 100mbit, 10gbps or 0 (not limited)";
  double v = 0;
  std::string unit;
  if (!split(text, &v, &unit)) fail(what, text, kExpected);
  if (unit.empty()) return v;
  if (unit.size() > 3 && unit.compare(unit.size() - 3, 3, "bit") == 0) {
    unit.resize(unit.size() - 3);
  } else if (unit.size() >= 3 && unit.compare(unit.size() - 3, 3, "bps") == 0) {
    unit.resize(unit.size() - 3);
  } else if (unit == "bit") {
    unit.clear();
  } else {
    fail(what, text, kExpected);
  }
  if (unit.empty()) return v;
  if (unit == "k") return v * 1e3;
  if (unit == "m") return v * 1e6;
  if (unit == "g") return v * 1e9;
  if (unit == "t") return v * 1e12;
  fail(what, text, kExpected);
}

double parseDuration(std::string_view what, std::string_view text) {
  constexpr const char* kExpected =
      "expected a duration such as 2us, 0.5ms, 100ns, 1s or 0";
  double v = 0;
  std::string unit;
  if (!split(text, &v, &unit)) fail(what, text, kExpected);
  if (unit.empty()) {
    if (v == 0) return 0;
    fail(what, text, "a duration needs a unit (ns, us, ms or s), e.g. 2us");
  }
  if (unit == "ns") return v * 1e-9;
  if (unit == "us" || unit == "\xc2\xb5s") return v * 1e-6;
  if (unit == "ms") return v * 1e-3;
  if (unit == "s") return v;
  fail(what, text, kExpected);
}

std::string formatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return trimmed(bytes) + " " + units[u];
}

std::string formatRate(double bps) {
  if (bps <= 0) return "not limited";
  const char* units[] = {"bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"};
  int u = 0;
  while (bps >= 1000 && u < 4) {
    bps /= 1000;
    ++u;
  }
  return trimmed(bps) + " " + units[u];
}

std::string formatSeconds(double s) {
  if (s == 0) return "0 s";
  if (s < 1e-6) return trimmed(s * 1e9) + " ns";
  if (s < 1e-3) return trimmed(s * 1e6) + " us";
  if (s < 1) return trimmed(s * 1e3) + " ms";
  return trimmed(s) + " s";
}

}  // namespace kolo::predict

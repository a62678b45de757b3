#include "common/settings.h"

#include <cstdlib>
#include <sstream>

#include "common/check.h"

namespace kolo {
namespace {

void parseInto(const char* env, const char* text, double* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || v < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               env << "='" << text << "' is not a non-negative number");
  }
  *out = v;
}

void parseInto(const char* env, const char* text, int64_t* out) {
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               env << "='" << text << "' is not a non-negative integer");
  }
  *out = v;
}

void parseInto(const char*, const char* text, std::string* out) { *out = text; }

template <typename T>
std::string show(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

Settings Settings::fromEnvironment() {
  Settings s;
#define KOLO_SETTING_READ(type, field, env, def, doc) \
  if (const char* v = std::getenv(env); v != nullptr && *v != '\0') parseInto(env, v, &s.field);
  KOLO_SETTINGS(KOLO_SETTING_READ)
#undef KOLO_SETTING_READ
  return s;
}

std::vector<Settings::Description> Settings::describe() {
  std::vector<Description> out;
  Settings defaults;
#define KOLO_SETTING_DESCRIBE(type, field, env, def, doc) \
  out.push_back({env, show(defaults.field), doc});
  KOLO_SETTINGS(KOLO_SETTING_DESCRIBE)
#undef KOLO_SETTING_DESCRIBE
  return out;
}

}  // namespace kolo

// Minimal leveled logging to stderr: KOLO_LOG(kWarning) << "text";
// Lines are prefixed "kolo[rank] LEVEL: ". The level and rank are set once
// at init (setLogLevel/setLogRank); before that rank shows as '?'.
#pragma once

#include <sstream>
#include <string_view>

namespace kolo {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

void setLogLevel(LogLevel level);
LogLevel parseLogLevel(std::string_view name);  // throws on bad name
void setLogRank(int rank);
bool logEnabled(LogLevel level);

namespace detail {
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};
}  // namespace detail

}  // namespace kolo

#define KOLO_LOG(level)                                  \
  if (!::kolo::logEnabled(::kolo::LogLevel::level)) {    \
  } else                                                 \
    ::kolo::detail::LogLine(::kolo::LogLevel::level)

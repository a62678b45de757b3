#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "common/check.h"

namespace kolo {
namespace {
std::atomic<int> gLevel{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> gRank{-1};

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}
}  // namespace

void setLogLevel(LogLevel level) { gLevel = static_cast<int>(level); }
void setLogRank(int rank) { gRank = rank; }
bool logEnabled(LogLevel level) { return static_cast<int>(level) >= gLevel; }

LogLevel parseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "KOLO_LOG_LEVEL='" << name
                                << "' (expected debug, info, warning or error)");
}

namespace detail {
LogLine::~LogLine() {
  int rank = gRank;
  std::string line = "kolo[" + (rank < 0 ? std::string("?") : std::to_string(rank)) +
                     "] " + levelName(level_) + ": " + os_.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}
}  // namespace detail

}  // namespace kolo

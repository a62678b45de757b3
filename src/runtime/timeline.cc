// The Chrome-trace writer: one JSON object per line inside one array.
//
// The file is "[" + events separated by ",\n" + "]". Every event carries
// pid = rank and tid = the tensor's track; a track's first event is
// preceded by a "thread_name" metadata event naming it after the tensor, so
// the viewer shows one row per tensor. Writes go through stdio's buffer
// under mu_, flushed every kFlushEvery events so a crashed run leaves most
// of its trace behind.
#include "runtime/timeline.h"

#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/check.h"

namespace kolo::runtime {
namespace {

constexpr int64_t kFlushEvery = 1000;

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one.
size_t utf8Length(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t min;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void appendU(std::string& out, unsigned value) {
  static const char kHex[] = "0123456789abcdef";
  out += "\\u00";
  out += kHex[(value >> 4) & 0xF];
  out += kHex[value & 0xF];
}

}  // namespace

std::string jsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      appendU(out, c);
    } else if (c >= 0x80) {
      // Valid UTF-8 passes through; a stray byte is written as the code
      // point of the same value, so the file stays valid UTF-8 JSON.
      const size_t n = utf8Length(s, i);
      if (n == 0) {
        appendU(out, c);
      } else {
        out.append(s, i, n);
        i += n;
        continue;
      }
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string timelineArgs(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out = "{";
  for (const auto& [key, value] : fields) {
    if (out.size() > 1) out += ",";
    out += "\"" + jsonEscape(key) + "\":\"" + jsonEscape(value) + "\"";
  }
  return out + "}";
}

std::unique_ptr<TimelineWriter> TimelineWriter::open(const std::string& path, int rank) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "cannot write the timeline file '"
                                                << path << "': " << std::strerror(errno));
  }
  return std::unique_ptr<TimelineWriter>(new TimelineWriter(file, path, rank));
}

TimelineWriter::TimelineWriter(std::FILE* file, std::string path, int rank)
    : file_(file), path_(std::move(path)), rank_(rank), start_(Clock::now()) {
  std::lock_guard<std::mutex> lock(mu_);
  std::fputs("[\n", file_);
  std::ostringstream os;
  os << R"({"name":"process_name","ph":"M","pid":)" << rank_
     << R"(,"args":{"name":"rank )" << rank_ << R"("}})";
  write(os.str());
  os.str("");
  os << R"({"name":"process_sort_index","ph":"M","pid":)" << rank_
     << R"(,"args":{"sort_index":)" << rank_ << "}}";
  write(os.str());
}

TimelineWriter::~TimelineWriter() {
  close();
}

int TimelineWriter::trackOf(const std::string& tensor) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  const int tid = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(tensor, tid);
  std::ostringstream os;
  os << R"({"name":"thread_name","ph":"M","pid":)" << rank_ << R"(,"tid":)" << tid
     << R"(,"args":{"name":")" << jsonEscape(tensor) << R"("}})";
  write(os.str());
  return tid;
}

void TimelineWriter::write(const std::string& event) {
  if (file_ == nullptr) return;
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fwrite(event.data(), 1, event.size(), file_);
  if (++sinceFlush_ >= kFlushEvery) {
    std::fflush(file_);
    sinceFlush_ = 0;
  }
}

namespace {

// Microseconds since `start`; events from before the writer opened are
// placed at 0.
int64_t micros(TimelineWriter::Clock::time_point start,
               TimelineWriter::Clock::time_point t) {
  if (t < start) return 0;
  return std::chrono::duration_cast<std::chrono::microseconds>(t - start).count();
}

}  // namespace

void TimelineWriter::begin(const std::string& tensor, const std::string& phase,
                           const std::string& args, Clock::time_point t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  const int tid = trackOf(tensor);
  std::ostringstream os;
  os << R"({"name":")" << jsonEscape(phase) << R"(","ph":"B","ts":)" << micros(start_, t)
     << R"(,"pid":)" << rank_ << R"(,"tid":)" << tid;
  if (!args.empty()) os << R"(,"args":)" << args;
  os << "}";
  write(os.str());
}

void TimelineWriter::end(const std::string& tensor, Clock::time_point t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  const int tid = trackOf(tensor);
  std::ostringstream os;
  os << R"({"ph":"E","ts":)" << micros(start_, t) << R"(,"pid":)" << rank_ << R"(,"tid":)"
     << tid << "}";
  write(os.str());
}

void TimelineWriter::instant(const std::string& tensor, const std::string& what,
                             Clock::time_point t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  const int tid = trackOf(tensor);
  std::ostringstream os;
  os << R"({"name":")" << jsonEscape(what) << R"(","ph":"i","s":"t","ts":)"
     << micros(start_, t) << R"(,"pid":)" << rank_ << R"(,"tid":)" << tid << "}";
  write(os.str());
}

void TimelineWriter::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

}  // namespace kolo::runtime

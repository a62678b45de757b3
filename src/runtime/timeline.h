// A Chrome-trace timeline of the runtime (KOLO_TIMELINE=path.json, or
// start/stop at run time), viewable in Perfetto or chrome://tracing.
//
// Format: the JSON array form of the Trace Event Format. One process per
// rank ("pid": rank, named "rank R" by a metadata event); one track ("tid")
// per tensor name, named after it; duration events "B"/"E" for the phases
//   NEGOTIATE      submitted -> ready on every rank
//   WAIT_FOR_DATA  (optional) inputs not yet available
//   MEMCPY_IN_FUSION_BUFFER, COLLECTIVE (args: algorithm, bytes, bucket),
//   MEMCPY_OUT_FUSION_BUFFER (the copies only where a bucket goes through
//   the fusion buffer; a segmented bucket has none, see docs/runtime.md)
// and instant events "i" (e.g. a stall warning). Timestamps are
// microseconds since the writer was opened.
//
// Contract
// - open() creates/truncates the file (throws Error(kInvalidArgument)
//   naming the path when it cannot); close() (or the destructor) writes the
//   closing bracket, so a finished file is valid JSON. A file whose process
//   died mid-run lacks only the bracket, which the viewers accept.
// - begin/end/instant after close() are ignored. `args` of begin() is a
//   JSON object written as given (timelineArgs() builds one), or empty.
// - Thread-safe: events from any thread are serialized under one mutex and
//   written through a buffered stream, flushed on close and every 1000
//   events.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kolo::runtime {

// The phase names the runtime writes.
namespace phase {
inline constexpr char kNegotiate[] = "NEGOTIATE";
inline constexpr char kWaitForData[] = "WAIT_FOR_DATA";
inline constexpr char kMemcpyIn[] = "MEMCPY_IN_FUSION_BUFFER";
inline constexpr char kCollective[] = "COLLECTIVE";
inline constexpr char kMemcpyOut[] = "MEMCPY_OUT_FUSION_BUFFER";
}  // namespace phase

class TimelineWriter {
 public:
  using Clock = std::chrono::steady_clock;

  static std::unique_ptr<TimelineWriter> open(const std::string& path, int rank);
  ~TimelineWriter();

  void begin(const std::string& tensor, const std::string& phase,
             const std::string& args = "", Clock::time_point t = Clock::now());
  void end(const std::string& tensor, Clock::time_point t = Clock::now());
  void instant(const std::string& tensor, const std::string& what,
               Clock::time_point t = Clock::now());
  void close();

  const std::string& path() const { return path_; }

 private:
  TimelineWriter(std::FILE* file, std::string path, int rank);
  int trackOf(const std::string& tensor);  // mu_ held
  void write(const std::string& event);    // mu_ held

  std::mutex mu_;
  std::FILE* file_;
  std::string path_;
  int rank_;
  Clock::time_point start_;
  std::map<std::string, int> tracks_;
  bool first_ = true;
  int64_t sinceFlush_ = 0;
};

// A scoped phase of one tensor: begin() when made, end() when it goes out
// of scope (an exception included). Does nothing with a null writer.
// `tensor` must outlive the span.
class TimelineSpan {
 public:
  TimelineSpan(TimelineWriter* tl, const std::string& tensor, const char* phase,
               const std::string& args = "")
      : tl_(tl), tensor_(&tensor) {
    if (tl_) tl_->begin(tensor, phase, args);
  }
  ~TimelineSpan() {
    if (tl_) tl_->end(*tensor_);
  }
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  TimelineWriter* tl_;
  const std::string* tensor_;
};

// JSON string escaping ("\"", "\\", control characters); bytes that are
// not valid UTF-8 become \u00XX, so any name gives a valid file.
std::string jsonEscape(const std::string& s);

// A JSON object of string fields for begin()'s args, e.g.
// timelineArgs({{"algorithm", "ring"}, {"bytes", "4096"}}).
std::string timelineArgs(const std::vector<std::pair<std::string, std::string>>& fields);

}  // namespace kolo::runtime

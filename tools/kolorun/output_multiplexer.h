// Re-emits the ranks' output, line by line, prefixed with "[rank] " (or
// "[label] " for a rank given a label, e.g. "[host:rank] ").
//
// Contract
// - Each stream (a rank's stdout or stderr pipe) is read without blocking
//   when poll() says it is readable; complete lines are written to kolorun's
//   stdout or stderr, one write per batch of whole lines, so lines of
//   different ranks never interleave mid-line. A line longer than
//   maxLineBytes is cut and emitted in pieces of maxLineBytes, each a line
//   of its own with the prefix, rather than held forever.
// - A partial last line is flushed (with a newline added) when its stream
//   reaches end-of-file or is closed.
// - With an output directory, each stream's raw bytes also go, unprefixed,
//   to DIR/rank.R.stdout or DIR/rank.R.stderr.
// - The last tailLines lines of every rank (stdout and stderr, in the order
//   read) are kept for the failure report.
// - Not thread-safe; used from kolorun's single event-loop thread.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace kolo::kolorun {

enum class StreamKind { kStdout, kStderr };

class OutputMultiplexer {
 public:
  struct Config {
    int stdoutFd = 1;
    int stderrFd = 2;
    std::string outputDir;  // "" = no per-rank files
    size_t tailLines = 10;
    size_t maxLineBytes = 64 * 1024;
  };

  // Creates outputDir (and parents) when set; throws std::runtime_error when
  // it cannot.
  explicit OutputMultiplexer(Config config);
  ~OutputMultiplexer();  // closes every stream still open (no flush)
  OutputMultiplexer(const OutputMultiplexer&) = delete;
  OutputMultiplexer& operator=(const OutputMultiplexer&) = delete;

  // The prefix of `rank`'s lines becomes "[label] ".
  void setLabel(int rank, std::string label);

  // Takes ownership of `fd`, a non-blocking read end.
  void addStream(int rank, StreamKind kind, int fd);

  // Fds of the streams still open, for poll().
  std::vector<int> openFds() const;

  // Reads what `fd` has now and emits its whole lines. On end-of-file or a
  // read error flushes the partial line, closes the stream and returns false.
  bool readAvailable(int fd);

  // Flushes and closes every open stream of `rank` (e.g. when a process that
  // outlived the rank still holds the pipe).
  void closeRank(int rank);
  void closeAll();
  bool rankOpen(int rank) const;
  bool anyOpen() const { return !streams_.empty(); }

  std::vector<std::string> tail(int rank) const;

  // kolorun's own message, written to stderr as one line "kolorun: text".
  void note(const std::string& text);

 private:
  struct Stream {
    int rank;
    StreamKind kind;
    std::string pending;  // bytes after the last newline
    int fileFd = -1;      // raw copy in outputDir, or -1
  };

  std::string prefix(int rank) const;
  void emitLines(Stream& stream, const char* data, size_t size);
  void flushPartial(Stream& stream);
  void closeStream(int fd);
  void remember(int rank, std::string line);
  void writeOut(StreamKind kind, const std::string& text);

  Config config_;
  std::map<int, Stream> streams_;  // by fd
  std::map<int, std::deque<std::string>> tails_;
  std::map<int, std::string> labels_;
  bool stdoutBroken_ = false;  // EPIPE or the like: stop writing there
  bool stderrBroken_ = false;
};

}  // namespace kolo::kolorun

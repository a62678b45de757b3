#include "output_multiplexer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace kolo::kolorun {
namespace {

// Writes everything (restarting on EINTR, waiting out EAGAIN); false on error.
bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        usleep(1000);
        continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string OutputMultiplexer::prefix(int rank) const {
  auto it = labels_.find(rank);
  return "[" + (it != labels_.end() ? it->second : std::to_string(rank)) + "] ";
}

void OutputMultiplexer::setLabel(int rank, std::string label) {
  labels_[rank] = std::move(label);
}

OutputMultiplexer::OutputMultiplexer(Config config) : config_(std::move(config)) {
  if (!config_.outputDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config_.outputDir, ec);
    if (ec) {
      throw std::runtime_error("cannot create output directory " + config_.outputDir +
                               ": " + ec.message());
    }
  }
}

OutputMultiplexer::~OutputMultiplexer() {
  for (auto& [fd, stream] : streams_) {
    close(fd);
    if (stream.fileFd >= 0) close(stream.fileFd);
  }
}

void OutputMultiplexer::addStream(int rank, StreamKind kind, int fd) {
  Stream stream{rank, kind, {}, -1};
  if (!config_.outputDir.empty()) {
    std::string path = config_.outputDir + "/rank." + std::to_string(rank) +
                       (kind == StreamKind::kStdout ? ".stdout" : ".stderr");
    stream.fileFd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (stream.fileFd < 0) {
      std::string why = std::strerror(errno);
      close(fd);
      throw std::runtime_error("cannot open " + path + ": " + why);
    }
  }
  streams_.emplace(fd, std::move(stream));
}

std::vector<int> OutputMultiplexer::openFds() const {
  std::vector<int> fds;
  fds.reserve(streams_.size());
  for (const auto& [fd, stream] : streams_) fds.push_back(fd);
  return fds;
}

bool OutputMultiplexer::readAvailable(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) return false;
  Stream& stream = it->second;
  char buf[65536];
  // Bounded so that one chatty rank cannot starve the others.
  for (int round = 0; round < 16; ++round) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (stream.fileFd >= 0 && !writeAll(stream.fileFd, buf, static_cast<size_t>(n))) {
        close(stream.fileFd);
        stream.fileFd = -1;
      }
      emitLines(stream, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    closeStream(fd);  // end-of-file, or an error reading
    return false;
  }
  return true;
}

void OutputMultiplexer::emitLines(Stream& stream, const char* data, size_t size) {
  std::string out;
  const std::string pre = prefix(stream.rank);
  // Appends `text` as output lines: pieces of maxLineBytes, each with the
  // prefix, whichever reads the line arrived in.
  auto emit = [&](std::string text) {
    for (size_t at = 0; at < text.size() || at == 0; at += config_.maxLineBytes) {
      std::string piece = text.substr(at, config_.maxLineBytes);
      out += pre;
      out += piece;
      out += '\n';
      remember(stream.rank, std::move(piece));
      if (text.empty()) break;
    }
  };
  size_t start = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != '\n') continue;
    std::string line = std::move(stream.pending);
    stream.pending.clear();
    line.append(data + start, i - start);
    start = i + 1;
    emit(std::move(line));
  }
  stream.pending.append(data + start, size - start);
  // An endless line is cut rather than buffered without bound.
  if (stream.pending.size() >= config_.maxLineBytes) {
    const size_t whole =
        stream.pending.size() / config_.maxLineBytes * config_.maxLineBytes;
    emit(stream.pending.substr(0, whole));
    stream.pending.erase(0, whole);
  }
  if (!out.empty()) writeOut(stream.kind, out);
}

void OutputMultiplexer::flushPartial(Stream& stream) {
  if (stream.pending.empty()) return;
  writeOut(stream.kind, prefix(stream.rank) + stream.pending + "\n");
  remember(stream.rank, std::move(stream.pending));
  stream.pending.clear();
}

void OutputMultiplexer::closeStream(int fd) {
  auto it = streams_.find(fd);
  if (it == streams_.end()) return;
  flushPartial(it->second);
  if (it->second.fileFd >= 0) close(it->second.fileFd);
  close(fd);
  streams_.erase(it);
}

void OutputMultiplexer::closeRank(int rank) {
  std::vector<int> fds;
  for (const auto& [fd, stream] : streams_) {
    if (stream.rank == rank) fds.push_back(fd);
  }
  for (int fd : fds) {
    readAvailable(fd);  // whatever is still buffered in the pipe
    closeStream(fd);
  }
}

void OutputMultiplexer::closeAll() {
  for (int fd : openFds()) {
    readAvailable(fd);
    closeStream(fd);
  }
}

bool OutputMultiplexer::rankOpen(int rank) const {
  for (const auto& [fd, stream] : streams_) {
    if (stream.rank == rank) return true;
  }
  return false;
}

std::vector<std::string> OutputMultiplexer::tail(int rank) const {
  auto it = tails_.find(rank);
  if (it == tails_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

void OutputMultiplexer::note(const std::string& text) {
  writeOut(StreamKind::kStderr, "kolorun: " + text + "\n");
}

void OutputMultiplexer::remember(int rank, std::string line) {
  if (config_.tailLines == 0) return;
  auto& lines = tails_[rank];
  lines.push_back(std::move(line));
  while (lines.size() > config_.tailLines) lines.pop_front();
}

void OutputMultiplexer::writeOut(StreamKind kind, const std::string& text) {
  bool& broken = kind == StreamKind::kStdout ? stdoutBroken_ : stderrBroken_;
  if (broken) return;
  int fd = kind == StreamKind::kStdout ? config_.stdoutFd : config_.stderrFd;
  if (!writeAll(fd, text.data(), text.size())) broken = true;
}

}  // namespace kolo::kolorun

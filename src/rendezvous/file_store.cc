#include "rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/check.h"
#include "common/private_path.h"
#include "common/sha256.h"

namespace kolo::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kSealContext = "kolo file store";
constexpr size_t kMacBytes = 32;

// mkdir -p; the store's own directory (the last) with mode 0700. Then the
// store's directory must be a directory of this user that nobody else may
// write (a symbolic link is refused too: lstat).
void makeDirectories(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    const mode_t mode = pos == std::string::npos ? 0700 : 0777;
    if (::mkdir(partial.c_str(), mode) < 0 && errno != EEXIST) {
      KOLO_THROW(ErrorCode::kIo, "cannot create the file store directory '"
                                     << partial << "': " << detail::errnoString());
    }
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode)) {
    KOLO_THROW(ErrorCode::kIo, "file store path '"
                                   << dir << "' is not a directory"
                                   << (S_ISLNK(st.st_mode) ? " (a symbolic link)" : ""));
  }
  requirePrivate(st, "the file store directory", dir,
                 "remove it (or, when it is yours, chmod go-w it), or name "
                 "another directory in KOLO_RENDEZVOUS=file:///DIR");
}

// Reads a whole file; false when it does not exist.
bool readFile(const std::string& path, std::vector<uint8_t>* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    KOLO_THROW(ErrorCode::kIo, "cannot open file store entry '"
                                   << path << "': " << detail::errnoString());
  }
  out->clear();
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string why = detail::errnoString();
      ::close(fd);
      KOLO_THROW(ErrorCode::kIo,
                 "cannot read file store entry '" << path << "': " << why);
    }
    if (n == 0) break;
    out->insert(out->end(), buf, buf + n);
  }
  ::close(fd);
  return true;
}

// Writes `value` to a unique temporary file in the same directory, then
// renames it over `path` (atomic on POSIX file systems).
void writeFileAtomically(const std::string& path, const std::vector<uint8_t>& value) {
  static std::atomic<uint64_t> counter{0};
  // Named ".t<entry>.<pid>.<n>" beside it: a leading dot never starts the
  // name of an entry, so no key can collide with a temporary file.
  size_t slash = path.rfind('/');
  std::string tmp = path.substr(0, slash + 1) + ".t" + path.substr(slash + 1) + "." +
                    std::to_string(::getpid()) + "." +
                    std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    KOLO_THROW(ErrorCode::kIo, "cannot create file store entry '"
                                   << tmp << "': " << detail::errnoString());
  }
  size_t off = 0;
  while (off < value.size()) {
    ssize_t n = ::write(fd, value.data() + off, value.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string why = detail::errnoString();
      ::close(fd);
      ::unlink(tmp.c_str());
      KOLO_THROW(ErrorCode::kIo,
                 "cannot write file store entry '" << tmp << "': " << why);
    }
    off += n;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) < 0) {
    std::string why = detail::errnoString();
    ::unlink(tmp.c_str());
    KOLO_THROW(ErrorCode::kIo,
               "cannot rename '" << tmp << "' to '" << path << "': " << why);
  }
}

}  // namespace

FileStore::FileStore(std::string directory, std::string secret)
    : directory_(std::move(directory)), secret_(std::move(secret)) {
  while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  if (directory_.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "file store directory is empty");
  }
  makeDirectories(directory_);
}

std::string FileStore::pathOf(const std::string& key, char kind) const {
  static const char* kHex = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size() + 4);
  name.push_back(kind);  // never empty, never "." or "..", never hidden
  for (unsigned char c : key) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (plain) {
      name.push_back(static_cast<char>(c));
    } else {
      name.push_back('%');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 15]);
    }
  }
  return directory_ + "/" + name;
}

std::vector<uint8_t> FileStore::seal(const std::string& key,
                                     const std::vector<uint8_t>& value) const {
  std::string msg(kSealContext);
  const uint32_t keyBytes = static_cast<uint32_t>(key.size());
  msg.append(reinterpret_cast<const char*>(&keyBytes), sizeof(keyBytes));
  msg.append(key);
  msg.append(value.begin(), value.end());
  const Digest mac = hmacSha256(secret_, msg);
  std::vector<uint8_t> sealed(kMacBytes + value.size());
  std::memcpy(sealed.data(), mac.data(), kMacBytes);
  if (!value.empty()) std::memcpy(sealed.data() + kMacBytes, value.data(), value.size());
  return sealed;
}

std::vector<uint8_t> FileStore::unseal(const std::string& key,
                                       std::vector<uint8_t> sealed) const {
  if (sealed.size() >= kMacBytes) {
    std::vector<uint8_t> value(sealed.begin() + kMacBytes, sealed.end());
    const std::vector<uint8_t> expected = seal(key, value);
    if (constantTimeEqual(expected.data(), sealed.data(), kMacBytes)) return value;
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "file store entry '" << pathOf(key) << "' (key '" << key
                                  << "') is not signed with this rank's job secret: "
                                     "the ranks' KOLO_JOB_SECRET differ, or kolo did "
                                     "not write it (an earlier job's directory, or "
                                     "another process)");
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  writeFileAtomically(pathOf(key), seal(key, value));
}

std::vector<uint8_t> FileStore::get(const std::string& key,
                                    std::chrono::milliseconds timeout) {
  const std::string path = pathOf(key);
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  std::vector<uint8_t> value;
  for (;;) {
    if (readFile(path, &value)) return unseal(key, std::move(value));
    auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(pause, deadline - now + std::chrono::microseconds(1)));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  KOLO_THROW(ErrorCode::kTimeout,
             "timed out after " << timeout.count() / 1000.0 << " s waiting for key '"
                                << key << "' in the file store '" << directory_
                                << "' (did every rank start, and do all hosts share "
                                   "this directory?)");
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const std::string path = pathOf(key);
  const std::string lockPath = pathOf(key, 'l');
  int fd = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    KOLO_THROW(ErrorCode::kIo,
               "cannot open lock file '" << lockPath << "': " << detail::errnoString());
  }
  while (::flock(fd, LOCK_EX) < 0) {
    if (errno == EINTR) continue;
    std::string why = detail::errnoString();
    ::close(fd);
    KOLO_THROW(ErrorCode::kIo, "cannot lock '" << lockPath << "': " << why);
  }
  int64_t result = 0;
  try {
    std::vector<uint8_t> current;
    int64_t value = 0;
    if (readFile(path, &current)) {
      current = unseal(key, std::move(current));
      std::string text(current.begin(), current.end());
      char* end = nullptr;
      errno = 0;
      value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || errno != 0 || *end != '\0') {
        KOLO_THROW(ErrorCode::kInvalidArgument,
                   "file store key '" << key << "' in '" << directory_
                                      << "' holds a value that is not a counter");
      }
    }
    result = value + delta;
    std::string text = std::to_string(result);
    writeFileAtomically(path, seal(key, std::vector<uint8_t>(text.begin(), text.end())));
  } catch (...) {
    ::flock(fd, LOCK_UN);
    ::close(fd);
    throw;
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return result;
}

}  // namespace kolo::rendezvous

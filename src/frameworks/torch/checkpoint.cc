#include "frameworks/torch/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <tuple>
#include <vector>

#include "frameworks/torch/byte_collectives.h"

namespace kolo::torch::checkpoint {
namespace {

constexpr const char* kFormat = "kolo-cpp-checkpoint";
constexpr int64_t kVersion = 1;

// A failure on rank 0, turned into every rank's error by agree().
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string systemError(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// ---- path patterns
// ----------------------------------------------------------------------

// `path` with each "{name}" or "{name:0Nd}" / "{name:Nd}" replaced by the
// state's value `name` (zero- or space-padded to N digits).
std::string expand(const std::string& path, const ElasticState& state) {
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t open = path.find('{', at);
    if (open == std::string::npos) break;
    const size_t close = path.find('}', open);
    if (close == std::string::npos) throw Failure("unclosed '{' in the path");
    out.append(path, at, open - at);
    const std::string field = path.substr(open + 1, close - open - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    std::string text;
    try {
      text = std::to_string(state.value(name));
    } catch (const Error&) {
      throw Failure("the field {" + field + "} names no value of the state");
    }
    if (colon != std::string::npos) {
      const std::string spec = field.substr(colon + 1);
      const bool zeros = !spec.empty() && spec[0] == '0';
      const std::string digits = spec.substr(zeros ? 1 : 0);
      if (digits.size() < 2 || digits.back() != 'd' ||
          !std::all_of(digits.begin(), digits.end() - 1, ::isdigit)) {
        throw Failure("the field {" + field + "} has a format other than :Nd or :0Nd");
      }
      const size_t width = std::stoul(digits.substr(0, digits.size() - 1));
      const bool negative = !text.empty() && text[0] == '-';
      const std::string body = negative ? text.substr(1) : text;
      if (text.size() < width) {
        text = zeros
                   ? (negative ? "-" : "") + std::string(width - text.size(), '0') + body
                   : std::string(width - text.size(), ' ') + text;
      }
    }
    out += text;
    at = close + 1;
  }
  out.append(path, at, std::string::npos);
  return out;
}

bool hasFields(const std::string& path) {
  const size_t open = path.find('{');
  return open != std::string::npos && path.find('}', open) != std::string::npos;
}

// The files matching `pattern` (its fields as wildcards), oldest first (by
// time of modification, then name).
std::vector<std::string> matching(const std::string& pattern) {
  std::string wildcard;
  size_t at = 0;
  while (true) {
    const size_t open = pattern.find('{', at);
    const size_t close = open == std::string::npos ? open : pattern.find('}', open);
    if (close == std::string::npos) break;
    wildcard.append(pattern, at, open - at);
    wildcard += '*';
    at = close + 1;
  }
  wildcard.append(pattern, at, std::string::npos);
  glob_t g{};
  std::vector<std::tuple<int64_t, int64_t, std::string>> files;
  if (::glob(wildcard.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      struct stat st {};
      if (::stat(g.gl_pathv[i], &st) != 0) continue;
      files.emplace_back(st.st_mtim.tv_sec, st.st_mtim.tv_nsec, g.gl_pathv[i]);
    }
  }
  ::globfree(&g);
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (auto& f : files) out.push_back(std::get<2>(f));
  return out;
}

// ---- files
// --------------------------------------------------------------------------------

std::string directoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Temporary file, fsync, rename over `path`, fsync of the directory.
void writeAtomically(const std::string& bytes, const std::string& path) {
  const std::string dir = directoryOf(path);
  const std::string base =
      path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  const std::string tmp = dir + "/." + base + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Failure(systemError("cannot create", tmp));
  size_t done = 0;
  bool ok = true;
  while (ok && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  std::string error = ok ? "" : systemError("cannot write", tmp);
  if (ok && ::fsync(fd) != 0) error = systemError("cannot fsync", tmp);
  ::close(fd);
  if (error.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    error = systemError("cannot rename the temporary file to", path);
  }
  if (!error.empty()) {
    ::unlink(tmp.c_str());
    throw Failure(error);
  }
  const int dirFd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
}

void prune(const std::string& pattern, int keepLast) {
  const std::vector<std::string> files = matching(pattern);
  for (size_t i = 0; i + static_cast<size_t>(keepLast) < files.size(); ++i) {
    if (::unlink(files[i].c_str()) != 0)
      throw Failure(systemError("cannot remove", files[i]));
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure(systemError("cannot open", path));
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// ---- generators and archives
// --------------------------------------------------------------

std::string rngState() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  const at::Tensor t = gen.get_state().contiguous();
  return std::string(static_cast<const char*>(t.data_ptr()),
                     static_cast<size_t>(t.nbytes()));
}

void setRngState(const std::string& bytes) {
  at::Tensor t = ::torch::empty({static_cast<int64_t>(bytes.size())}, ::torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
}

::torch::Tensor bytesTensor(const std::string& bytes) {
  ::torch::Tensor t =
      ::torch::empty({static_cast<int64_t>(bytes.size())}, ::torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string tensorBytes(const ::torch::Tensor& t) {
  const ::torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     static_cast<size_t>(c.nbytes()));
}

std::string archiveBytes(::torch::serialize::OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&](const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  return bytes;
}

// The generator states as an archive: "count", then "rng/<i>".
void writeRngs(::torch::serialize::OutputArchive& archive,
               const std::vector<std::string>& rngs) {
  archive.write("rng/count", c10::IValue(static_cast<int64_t>(rngs.size())));
  for (size_t i = 0; i < rngs.size(); ++i) {
    archive.write("rng/" + std::to_string(i), bytesTensor(rngs[i]));
  }
}

std::vector<std::string> readRngs(::torch::serialize::InputArchive& archive) {
  c10::IValue count;
  if (!archive.try_read("rng/count", count) || !count.isInt() || count.toInt() < 1) {
    throw Failure("no generator states");
  }
  std::vector<std::string> rngs;
  for (int64_t i = 0; i < count.toInt(); ++i) {
    ::torch::Tensor t;
    if (!archive.try_read("rng/" + std::to_string(i), t)) {
      throw Failure("no generator state of rank " + std::to_string(i));
    }
    rngs.push_back(tensorBytes(t));
  }
  return rngs;
}

// An exception's message; libtorch's without its stack trace.
std::string reason(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e))
    return c10->what_without_backtrace();
  return e.what();
}

// Rank 0's outcome on every rank: the same error everywhere.
void agree(Context& context, const std::string& what, const std::string& error) {
  const std::string agreed =
      broadcastBytes(context, "kolo.checkpoint." + what + "/error", error, 0);
  if (!agreed.empty()) throw Error(ErrorCode::kInvalidArgument, agreed);
}

// Rank 0: reads the newest file of `path` (its name into `target`) into
// `state`; returns the generator states.
std::vector<std::string> readInto(const std::string& path, ElasticState& state,
                                  std::string& target) {
  target = path;
  if (hasFields(path)) {
    const std::vector<std::string> files = matching(path);
    if (files.empty()) throw Failure("no file matches the pattern");
    target = files.back();
  }
  const std::string bytes = readFile(target);
  ::torch::serialize::InputArchive archive;
  try {
    archive.load_from(bytes.data(), bytes.size());
  } catch (const c10::Error& e) {
    // A torn file, or one written by Python's kolo.torch.checkpoint
    // (torch.save), which is not a libtorch archive.
    throw Failure(std::string("not a readable kolo C++ checkpoint (") +
                  e.what_without_backtrace() + ")");
  }
  c10::IValue format, version;
  if (!archive.try_read("kolo/format", format) || !format.isString() ||
      format.toStringRef() != kFormat) {
    throw Failure("not a kolo C++ checkpoint");
  }
  if (!archive.try_read("kolo/version", version) || !version.isInt() ||
      version.toInt() != kVersion) {
    throw Failure(
        "format version " +
        (version.isInt() ? std::to_string(version.toInt()) : std::string("unknown")) +
        "; this kolo reads " + std::to_string(kVersion));
  }
  ::torch::serialize::InputArchive sub;
  if (!archive.try_read("state", sub)) throw Failure("no state in the file");
  state.read(sub);
  return readRngs(archive);
}

}  // namespace

std::string save(const std::string& path, ElasticState& state, SaveOptions options) {
  if (options.keepLast < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "checkpoint::save: keepLast must be >= 0, got " +
                    std::to_string(options.keepLast));
  }
  Context& context = state.context();
  const std::vector<std::string> rngs =
      allgatherBytes(context, "kolo.checkpoint.rng_gather", rngState());
  std::string target, error;
  if (context.rank() == 0) {
    try {
      target = expand(path, state);
      ::torch::serialize::OutputArchive archive;
      archive.write("kolo/format", c10::IValue(std::string(kFormat)));
      archive.write("kolo/version", c10::IValue(kVersion));
      archive.write("kolo/world_size", c10::IValue(static_cast<int64_t>(context.size())));
      ::torch::serialize::OutputArchive sub(archive.compilation_unit());
      state.write(sub);
      archive.write("state", sub);
      writeRngs(archive, rngs);
      writeAtomically(archiveBytes(archive), target);
      if (options.keepLast > 0 && hasFields(path)) prune(path, options.keepLast);
    } catch (const std::exception& e) {
      error = "checkpoint::save: cannot write '" + (target.empty() ? path : target) +
              "': " + reason(e);
    }
  }
  agree(context, "save", error);
  return broadcastBytes(context, "kolo.checkpoint.saved", target, 0);
}

std::string load(const std::string& path, ElasticState& state) {
  Context& context = state.context();
  std::string target, error, rngBlob;
  if (context.rank() == 0) {
    try {
      ::torch::serialize::OutputArchive archive;
      writeRngs(archive, readInto(path, state, target));
      rngBlob = archiveBytes(archive);
    } catch (const std::exception& e) {
      error = "checkpoint::load: cannot load '" + (target.empty() ? path : target) +
              "': " + reason(e);
    }
  }
  agree(context, "load", error);
  state.sync();  // rank 0's loaded state everywhere, committed
  rngBlob = broadcastBytes(context, "kolo.checkpoint.rng_load", rngBlob, 0);
  ::torch::serialize::InputArchive archive;
  archive.load_from(rngBlob.data(), rngBlob.size());
  const std::vector<std::string> rngs = readRngs(archive);
  setRngState(rngs[static_cast<size_t>(context.rank()) % rngs.size()]);
  return broadcastBytes(context, "kolo.checkpoint.loaded", target, 0);
}

}  // namespace kolo::torch::checkpoint

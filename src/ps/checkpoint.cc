// Shard files: an 80-byte header (magic "KPSCKPT1", u32 shard, u32 shards,
// u8 mode, u8 hasRule, u8 optimizer kind, u8 0, u32 0, then u64 version,
// updates, rule steps, elements, and the three state buffers' lengths),
// the floats (values, then the buffers a, b, c), then the SHA-256 of all
// that. The manifest is text, one record per line, so a person can read
// which shard map a checkpoint was saved with.
#include "ps/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "common/byte_codec.h"
#include "common/check.h"

namespace kolo::ps {
namespace {

constexpr char kShardMagic[8] = {'K', 'P', 'S', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kShardHeaderBytes = 80;
constexpr const char* kManifestFirstLine = "kolo parameter-server checkpoint 1";

// Shard files are little endian on every machine.
constexpr ByteOrder kOrder = ByteOrder::kLittle;

void putFloats(ByteWriter<std::string>& out, const std::vector<float>& v) {
  for (float f : v) out.put<float>(f);
}
// n floats; the caller checked that the reader holds them.
std::vector<float> getFloats(ByteReader& in, uint64_t n) {
  std::vector<float> v(n);
  for (float& f : v) f = in.get<float>();
  return v;
}

// tmp in the same directory, fsync, rename: readers see the old file or
// the new one, never a part.
void writeAtomically(const std::string& path, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    KOLO_THROW(ErrorCode::kIo, "cannot create checkpoint file '"
                                   << tmp << "': " << detail::errnoString());
  }
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = detail::errnoString();
      ::close(fd);
      ::unlink(tmp.c_str());
      KOLO_THROW(ErrorCode::kIo, "cannot write checkpoint file '" << tmp << "': " << why);
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) < 0 || ::close(fd) < 0) {
    const std::string why = detail::errnoString();
    ::unlink(tmp.c_str());
    KOLO_THROW(ErrorCode::kIo, "cannot flush checkpoint file '" << tmp << "': " << why);
  }
  if (::rename(tmp.c_str(), path.c_str()) < 0) {
    const std::string why = detail::errnoString();
    ::unlink(tmp.c_str());
    KOLO_THROW(ErrorCode::kIo,
               "cannot rename '" << tmp << "' to '" << path << "': " << why);
  }
}

std::string readWhole(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    KOLO_THROW(ErrorCode::kIo,
               "cannot open " << what << " '" << path << "': " << detail::errnoString());
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string hex(const Digest& d) {
  return toHex(d.data(), d.size());
}

}  // namespace

std::string shardFileName(uint32_t shard, uint32_t shards, const std::string& id) {
  return "shard-" + std::to_string(shard) + "-of-" + std::to_string(shards) + "." + id +
         ".kps";
}

std::string manifestPath(const std::string& dir) {
  return dir + "/manifest.kps";
}

Digest writeShardFile(const std::string& file, const ShardState& s) {
  std::string b;
  ByteWriter w(b, kOrder);
  w.bytes(kShardMagic, sizeof(kShardMagic));
  w.put<uint32_t>(s.shard).put<uint32_t>(s.shards);
  w.put<uint8_t>(static_cast<uint8_t>(s.mode));
  w.put<uint8_t>(s.hasRule ? 1 : 0);
  w.put<uint8_t>(static_cast<uint8_t>(s.kind));
  w.put<uint8_t>(0).put<uint32_t>(0);
  for (uint64_t v : {s.version, s.updates, s.rule.steps, uint64_t{s.values.size()},
                     uint64_t{s.rule.a.size()}, uint64_t{s.rule.b.size()},
                     uint64_t{s.rule.c.size()}}) {
    w.put<uint64_t>(v);
  }
  KOLO_CHECK_EQ(b.size(), kShardHeaderBytes);
  putFloats(w, s.values);
  putFloats(w, s.rule.a);
  putFloats(w, s.rule.b);
  putFloats(w, s.rule.c);
  const Digest d = sha256(b);
  w.bytes(d.data(), d.size());
  writeAtomically(file, b);
  return d;
}

ShardState readShardFile(const std::string& file, const Digest* expected, uint32_t shard,
                         uint32_t shards, uint64_t elements) {
  const std::string b = readWhole(file, "checkpoint shard file");
  auto bad = [&](const std::string& what) {
    KOLO_THROW(ErrorCode::kMismatch, "checkpoint shard file '" << file << "': " << what);
  };
  if (b.size() < kShardHeaderBytes + 32 ||
      std::memcmp(b.data(), kShardMagic, sizeof(kShardMagic)) != 0) {
    bad("torn or not a shard file (" + std::to_string(b.size()) +
        " bytes, no KPSCKPT1 header)");
  }
  ShardState s;
  ByteReader in(b, kOrder);
  in.bytes(sizeof(kShardMagic));
  s.shard = in.get<uint32_t>();
  s.shards = in.get<uint32_t>();
  const uint8_t mode = in.get<uint8_t>();
  s.hasRule = in.get<uint8_t>() != 0;
  const uint8_t kind = in.get<uint8_t>();
  in.bytes(5);  // padding
  uint64_t n[7];
  for (uint64_t& v : n) v = in.get<uint64_t>();
  KOLO_CHECK(in.ok());  // the size was checked above
  // Sizes first (a torn file), before trusting any count to allocate.
  const uint64_t limit = b.size() / 4;
  if (n[3] > limit || n[4] > limit || n[5] > limit || n[6] > limit) {
    bad("torn: " + std::to_string(b.size()) + " bytes cannot hold the counts it states");
  }
  const uint64_t want = kShardHeaderBytes + 4 * (n[3] + n[4] + n[5] + n[6]) + 32;
  if (b.size() != want) {
    bad("torn: " + std::to_string(b.size()) + " bytes, its header says " +
        std::to_string(want));
  }
  Digest d;
  std::memcpy(d.data(), b.data() + b.size() - 32, 32);
  if (sha256(std::string_view(b.data(), b.size() - 32)) != d) {
    bad("checksum mismatch: the file is torn or corrupted");
  }
  if (expected != nullptr && *expected != d) {
    bad("SHA-256 " + hex(d) + ", the manifest names " + hex(*expected) +
        " (a shard file of another save)");
  }
  if (s.shard != shard || s.shards != shards) {
    bad("shard " + std::to_string(s.shard) + " of " + std::to_string(s.shards) +
        ", expected shard " + std::to_string(shard) + " of " + std::to_string(shards));
  }
  if (n[3] != elements) {
    bad(std::to_string(n[3]) + " elements, this job's shard has " +
        std::to_string(elements));
  }
  if (mode > static_cast<uint8_t>(Mode::kEasgd) ||
      kind > static_cast<uint8_t>(OptimizerKind::kRmsprop)) {
    bad("unknown mode " + std::to_string(mode) + " or optimizer " + std::to_string(kind));
  }
  s.mode = static_cast<Mode>(mode);
  s.kind = static_cast<OptimizerKind>(kind);
  s.version = n[0];
  s.updates = n[1];
  s.rule.steps = n[2];
  s.values = getFloats(in, n[3]);
  s.rule.a = getFloats(in, n[4]);
  s.rule.b = getFloats(in, n[5]);
  s.rule.c = getFloats(in, n[6]);
  KOLO_CHECK(in.ok() && in.remaining() == 32);  // the size was checked above
  return s;
}

void makeCheckpointDirectory(const std::string& dir) {
  if (dir.empty()) KOLO_THROW(ErrorCode::kInvalidArgument, "checkpoint path is empty");
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i != dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (::mkdir(part.c_str(), 0755) < 0 && errno != EEXIST) {
      KOLO_THROW(ErrorCode::kIo, "cannot create checkpoint directory '"
                                     << part << "': " << detail::errnoString());
    }
  }
}

void writeManifest(const std::string& dir, const Manifest& m) {
  std::ostringstream o;
  o << kManifestFirstLine << "\n"
    << "mode " << modeName(m.mode) << "\n"
    << "optimizer " << m.optimizer << "\n"
    << "servers " << m.shards.size() << "\n"
    << "tensors " << m.tensorElements.size() << "\n";
  for (size_t t = 0; t < m.tensorElements.size(); ++t) {
    o << "tensor " << t << " " << m.tensorElements[t] << "\n";
  }
  for (size_t s = 0; s < m.shards.size(); ++s) {
    const ManifestShard& sh = m.shards[s];
    o << "shard " << s << " " << sh.file << " " << sh.elements << " " << sh.version << " "
      << hex(sh.digest) << " " << sh.pieces.size() << "\n";
    for (const Piece& p : sh.pieces) {
      o << "piece " << s << " " << p.tensor << " " << p.offset << " " << p.count << " "
        << p.shardOffset << "\n";
    }
  }
  o << "end\n";
  writeAtomically(manifestPath(dir), o.str());
}

namespace {

Digest parseDigest(const std::string& text,
                   const std::function<void(const std::string&)>& bad) {
  Digest d{};
  if (text.size() != 64)
    bad("a SHA-256 of " + std::to_string(text.size()) + " characters");
  for (size_t i = 0; i < 32; ++i) {
    const std::string byte = text.substr(2 * i, 2);
    char* end = nullptr;
    const unsigned long v = std::strtoul(byte.c_str(), &end, 16);
    if (end != byte.c_str() + 2) bad("SHA-256 '" + text + "' is not hexadecimal");
    d[i] = static_cast<uint8_t>(v);
  }
  return d;
}

}  // namespace

Manifest readManifest(const std::string& dir) {
  const std::string path = manifestPath(dir);
  const std::string text = readWhole(path, "checkpoint manifest");
  if (text.size() < 4 || text.compare(text.size() - 4, 4, "end\n") != 0) {
    KOLO_THROW(ErrorCode::kMismatch, "checkpoint manifest '"
                                         << path << "' is torn: " << text.size()
                                         << " bytes without the closing 'end' line");
  }
  std::istringstream in(text);
  std::string line;
  int number = 0;
  auto bad = [&](const std::string& what) {
    KOLO_THROW(ErrorCode::kMismatch, "checkpoint manifest '"
                                         << path << "' line " << number << ": " << what
                                         << " (line: '" << line << "')");
  };
  auto next = [&](const std::string& key) -> std::istringstream {
    ++number;
    if (!std::getline(in, line)) bad("ends before '" + key + "' (torn?)");
    std::istringstream f(line);
    std::string k;
    f >> k;
    if (k != key) bad("expected '" + key + "'");
    return f;
  };
  ++number;
  if (!std::getline(in, line) || line != kManifestFirstLine) {
    bad(std::string("expected '") + kManifestFirstLine + "'");
  }
  Manifest m;
  std::string word;
  next("mode") >> word;
  try {
    m.mode = parseMode(word);
  } catch (const Error&) {
    bad("unknown mode '" + word + "'");
  }
  next("optimizer") >> m.optimizer;
  size_t servers = 0, tensors = 0;
  if (!(next("servers") >> servers) || servers == 0 || servers > (1u << 20)) {
    bad("bad server count");
  }
  if (!(next("tensors") >> tensors) || tensors > (1u << 20)) bad("bad tensor count");
  for (size_t t = 0; t < tensors; ++t) {
    size_t index = 0;
    uint64_t n = 0;
    if (!(next("tensor") >> index >> n) || index != t) bad("bad tensor record");
    m.tensorElements.push_back(n);
  }
  for (size_t s = 0; s < servers; ++s) {
    ManifestShard sh;
    size_t index = 0, pieces = 0;
    std::string digest;
    if (!(next("shard") >> index >> sh.file >> sh.elements >> sh.version >> digest >>
          pieces) ||
        index != s || pieces > (1u << 24)) {
      bad("bad shard record");
    }
    sh.digest = parseDigest(digest, bad);
    for (size_t k = 0; k < pieces; ++k) {
      Piece p;
      if (!(next("piece") >> index >> p.tensor >> p.offset >> p.count >> p.shardOffset) ||
          index != s) {
        bad("bad piece record");
      }
      sh.pieces.push_back(p);
    }
    m.shards.push_back(std::move(sh));
  }
  next("end");
  return m;
}

void checkManifest(const Manifest& m, const std::string& dir, const PsConfig& config,
                   int servers) {
  std::ostringstream diff;
  const std::string optimizer =
      config.mode == Mode::kEasgd ? "none" : optimizerKindName(config.optimizer.kind);
  if (m.mode != config.mode) {
    diff << "; mode " << modeName(m.mode) << " saved, " << modeName(config.mode)
         << " in this job";
  }
  if (m.optimizer != optimizer) {
    diff << "; optimizer " << m.optimizer << " saved, " << optimizer << " in this job";
  }
  if (m.shards.size() != static_cast<size_t>(servers)) {
    diff << "; " << m.shards.size() << " servers saved, " << servers << " in this job";
  }
  if (m.tensorElements.size() != config.tensorElements.size()) {
    diff << "; " << m.tensorElements.size() << " tensors saved, "
         << config.tensorElements.size() << " in this job";
  } else {
    for (size_t t = 0; t < m.tensorElements.size(); ++t) {
      if (m.tensorElements[t] != config.tensorElements[t]) {
        diff << "; tensor " << t << " has " << m.tensorElements[t] << " elements saved, "
             << config.tensorElements[t] << " in this job";
      }
    }
  }
  if (diff.str().empty()) {
    // Same sizes and servers: the map must be the one this job builds.
    const ShardMap map = ShardMap::build(config.tensorElements, servers);
    for (int s = 0; s < servers; ++s) {
      const auto& saved = m.shards[s].pieces;
      const auto& mine = map.shards[s];
      bool same =
          saved.size() == mine.size() && m.shards[s].elements == map.shardElements[s];
      for (size_t k = 0; same && k < saved.size(); ++k) {
        same = saved[k].tensor == mine[k].tensor && saved[k].offset == mine[k].offset &&
               saved[k].count == mine[k].count &&
               saved[k].shardOffset == mine[k].shardOffset;
      }
      if (!same) {
        diff << "; shard " << s << "'s pieces differ from this job's shard map ("
             << saved.size() << " pieces of " << m.shards[s].elements
             << " elements saved, " << mine.size() << " of " << map.shardElements[s]
             << " here)";
      }
    }
  }
  if (!diff.str().empty()) {
    KOLO_THROW(ErrorCode::kMismatch,
               "checkpoint '" << dir << "' does not fit this job" << diff.str());
  }
}

void removeStaleShardFiles(const std::string& dir, const Manifest& m) {
  std::set<std::string> keep;
  for (const ManifestShard& s : m.shards) keep.insert(s.file);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const bool shardFile = name.rfind("shard-", 0) == 0 && name.size() > 4 &&
                           name.compare(name.size() - 4, 4, ".kps") == 0;
    if (shardFile && keep.count(name) == 0) ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

}  // namespace kolo::ps

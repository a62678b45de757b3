// The scale model's constants: per path (a transport, or the shared-memory
// arena of the shm allreduce), the cost of a message, a byte and a call.
//
// A path's terms, all in seconds (allreduce_model.cc says where each is
// counted):
//   alpha    latency of one step: a message's one-way time before its
//            bytes count (on a shaped link the link's own latency is added
//            to it, from JobShape::linkLatency)
//   beta     seconds per byte moved from one rank to another by the
//            transport's own work (copies, system calls); on a shaped link
//            a byte costs max(beta, contention * 8 / link rate)
//   gamma    seconds per byte of one elementwise reduction (float32 sum)
//   message  seconds per message sent beyond the first of a step (the
//            pipelined ring's 128 KiB chunks)
//   call     seconds per allreduce call: the communicator's bookkeeping
//   wake     seconds per step when the ranks sharing the cores outnumber
//            them and keep polling or yielding while they wait (ranks with
//            a host-mate, on the shared-memory transport): a rank whose
//            message has arrived waits its turn for a core among them
//            (allreduce_model.cc); never paid with a core per rank
//
// The constants file (JSON, written by `kolo-predict calibrate`):
//   {"kolo_predict_constants": 1, "source": "...",
//    "paths": {"tcp": {"alpha": 2.1e-05, "beta": 1.2e-10, "gamma": 3e-10,
//                      "message": 1e-06, "call": 5e-06, "wake": 0}, ...}}
// Paths not in the file keep their built-in values; unknown paths or terms
// are an error naming them.
//
// Where kolo finds it: KOLO_PREDICT_CONSTANTS names a file (read by rank 0
// at init and used by every rank, docs/scale.md); empty: builtInConstants(),
// fitted on the machine kolo was developed on.
#pragma once

#include <array>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kolo::predict {

class ConstantsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Path { kShm, kTcp, kMpi, kShmArena };
inline constexpr int kPaths = 4;
std::string_view toString(Path p);  // "shm", "tcp", "mpi", "shm-arena"
// Throws ConstantsError naming `what` and the valid names.
Path pathFromName(std::string_view what, std::string_view name);

enum class Term { kAlpha, kBeta, kGamma, kMessage, kCall, kWake };
inline constexpr int kTerms = 6;
std::string_view toString(Term t);  // "alpha", "beta", ...

struct PathConstants {
  std::array<double, kTerms> value{};  // indexed by Term
  double operator[](Term t) const { return value[static_cast<int>(t)]; }
  double& operator[](Term t) { return value[static_cast<int>(t)]; }
};

struct Constants {
  std::array<PathConstants, kPaths> paths{};
  std::string source;  // where they came from (file, fit), for reports

  const PathConstants& operator[](Path p) const { return paths[static_cast<int>(p)]; }
  PathConstants& operator[](Path p) { return paths[static_cast<int>(p)]; }
  double get(Path p, Term t) const { return (*this)[p][t]; }
};

// The defaults compiled in (fitted with `kolo-predict calibrate` on the
// development machine; docs/scale.md gives the run).
const Constants& builtInConstants();

// The file's constants over `base` (paths and terms it does not name keep
// base's values). Throws ConstantsError naming `source` and what is wrong:
// not JSON, not the constants format, a negative or non-number value, an
// unknown path or term.
Constants constantsFromJson(std::string_view text, std::string_view source,
                            const Constants& base = builtInConstants());
// The file's text read and parsed; a missing or unreadable file is an error
// naming it.
Constants loadConstants(const std::string& path,
                        const Constants& base = builtInConstants());
// The JSON text of `c` (every path, every term), one path per line.
std::string constantsToJson(const Constants& c);
// Writes constantsToJson(c) to `path`; throws ConstantsError naming it.
void saveConstants(const std::string& path, const Constants& c);

}  // namespace kolo::predict

// Which stores fill shared staging memory: plain ones or non-temporal
// (streaming) ones, chosen from the measured time of recent calls.
//
// Why it is measured: which kind is faster depends on where the ranks'
// cores sit. Sharing a last-level cache, plain stores leave the staged lines
// in that cache, where the peers read them, and streaming stores send them
// to memory: a fused bucket of 1,000 x 4 KiB took 0.21 ms with plain stores
// and 0.41 ms streamed on this project's 2-core virtual machine. Without a
// shared cache, each plain store must first take its line back from the
// peer's cache (the peer read it the step before), while streaming stores
// write whole lines without asking: 0.47 ms plain, 0.29 ms streamed, on the
// same machine minutes later (docs/performance-history.md). A virtual machine's
// cores move between those placements while a job runs, and its guest sees
// no cache topology, so nothing can be looked up once.
//
// Contract
// - pick(bytes) -> the kind for the next call that stages `bytes` bytes.
//   Calls are grouped in size classes (powers of two). The first two calls
//   of a class try plain, then streaming; after that, the kind whose recent
//   calls (median of its last kSamples, in seconds per byte) were faster,
//   except every kExplorePeriod-th call of the class, which uses the other
//   kind so that a change of placement is noticed.
// - record(bytes, kind, seconds): how long that call took, whole.
// - The schedule depends only on the sequence of call sizes, which every
//   rank of a collective sees alike, so the ranks try the other kind in the
//   same calls and measure the same configuration. Either kind gives the
//   same result: only speed depends on the choice.
// - A fixed kind (constructor argument) disables the measuring.
// - Thread-safety: none; one per communicator, used by its one worker.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kolo::collectives {

enum class StoreKind : uint8_t { kPlain, kStreaming };

class StagingStores {
 public:
  static constexpr int kSamples = 5;
  static constexpr uint64_t kExplorePeriod = 16;

  // nullopt: measure and choose; a kind: always that one.
  explicit StagingStores(std::optional<StoreKind> fixed = std::nullopt) : fixed_(fixed) {}

  // "auto" -> nullopt, "plain", "streaming"; anything else throws
  // Error(kInvalidArgument) naming `what` and the value.
  static std::optional<StoreKind> parse(const std::string& what, const std::string& text);

  StoreKind pick(size_t bytes);
  void record(size_t bytes, StoreKind kind, double seconds);

  // The kind the measurements favour now for `bytes` (what pick returns
  // outside exploration); for logs and tests.
  StoreKind favoured(size_t bytes) const;

 private:
  struct Arm {
    std::array<double, kSamples> perByte{};  // ring of recent samples
    int count = 0;                           // samples held, up to kSamples
    int next = 0;                            // where the next one goes
    double median() const;
  };
  struct SizeClass {
    uint64_t calls = 0;
    std::array<Arm, 2> arms;
  };
  static constexpr int kClasses = 64;
  static int classOf(size_t bytes);

  std::optional<StoreKind> fixed_;
  std::array<SizeClass, kClasses> classes_{};
};

}  // namespace kolo::collectives

// StagingStores: a two-armed choice per size class. The call counter of a
// class drives the schedule (calls 0 and 1 try plain and streaming; every
// kExplorePeriod-th call from then on tries the kind not favoured), so the
// ranks of one collective, which make the same calls, explore together.
// The favoured kind compares the medians of each kind's last kSamples
// calls: a median ignores the odd call that waited on a descheduled peer,
// which a mean would carry for many calls.
#include "collectives/staging_stores.h"

#include <algorithm>
#include <bit>

#include "common/check.h"

namespace kolo::collectives {

std::optional<StoreKind> StagingStores::parse(const std::string& what,
                                              const std::string& text) {
  if (text == "auto") return std::nullopt;
  if (text == "plain") return StoreKind::kPlain;
  if (text == "streaming") return StoreKind::kStreaming;
  KOLO_THROW(ErrorCode::kInvalidArgument,
             what << "='" << text << "' (expected auto, plain or streaming)");
}

double StagingStores::Arm::median() const {
  std::array<double, kSamples> sorted{};
  for (int i = 0; i < count; ++i) {  // insertion sort of a handful
    int j = i;
    for (; j > 0 && sorted[j - 1] > perByte[i]; --j) sorted[j] = sorted[j - 1];
    sorted[j] = perByte[i];
  }
  return count % 2 == 1 ? sorted[count / 2]
                        : (sorted[count / 2 - 1] + sorted[count / 2]) / 2;
}

int StagingStores::classOf(size_t bytes) {
  return std::min(kClasses - 1, static_cast<int>(std::bit_width(bytes)));
}

StoreKind StagingStores::favoured(size_t bytes) const {
  if (fixed_) return *fixed_;
  const SizeClass& c = classes_[classOf(bytes)];
  const Arm& plain = c.arms[0];
  const Arm& streaming = c.arms[1];
  if (plain.count == 0 || streaming.count == 0) return StoreKind::kPlain;
  return streaming.median() < plain.median() ? StoreKind::kStreaming : StoreKind::kPlain;
}

StoreKind StagingStores::pick(size_t bytes) {
  if (fixed_) return *fixed_;
  SizeClass& c = classes_[classOf(bytes)];
  const uint64_t call = c.calls++;
  if (call < 2) return call == 0 ? StoreKind::kPlain : StoreKind::kStreaming;
  const StoreKind best = favoured(bytes);
  if (call % kExplorePeriod != 0) return best;
  return best == StoreKind::kPlain ? StoreKind::kStreaming : StoreKind::kPlain;
}

void StagingStores::record(size_t bytes, StoreKind kind, double seconds) {
  if (fixed_ || bytes == 0) return;
  Arm& a = classes_[classOf(bytes)].arms[kind == StoreKind::kPlain ? 0 : 1];
  a.perByte[a.next] = seconds / static_cast<double>(bytes);
  a.next = (a.next + 1) % kSamples;
  a.count = std::min(a.count + 1, kSamples);
}

}  // namespace kolo::collectives

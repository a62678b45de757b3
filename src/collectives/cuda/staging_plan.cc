// planRuns (staging_plan.h): one pass over the pieces in layout order.
#include "collectives/cuda/staging_plan.h"

#include "common/check.h"

namespace kolo::collectives::cuda {

std::vector<StagingRun> planRuns(const std::vector<StagedPiece>& pieces) {
  std::vector<StagingRun> runs;
  size_t end = 0;  // where the previous piece ended
  for (size_t i = 0; i < pieces.size(); ++i) {
    const StagedPiece& p = pieces[i];
    if (i > 0 && p.offset < end) {
      KOLO_THROW(ErrorCode::kInvalidArgument, "staging plan: piece "
                                                  << i << " at byte offset " << p.offset
                                                  << " overlaps piece " << i - 1
                                                  << ", which ends at " << end);
    }
    const bool contiguous = i > 0 && p.offset == end;
    end = p.offset + p.bytes;
    if (p.device < 0) continue;
    if (!runs.empty() && contiguous && runs.back().device == p.device &&
        runs.back().first + runs.back().count == i) {
      runs.back().count += 1;
      runs.back().bytes += p.bytes;
      continue;
    }
    runs.push_back(StagingRun{p.device, i, 1, p.offset, p.bytes});
  }
  return runs;
}

}  // namespace kolo::collectives::cuda

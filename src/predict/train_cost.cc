#include "predict/train_cost.h"

#include <algorithm>

namespace kolo::predict {

AllreduceModelFn selectedAllreduceModel(const JobShape& base,
                                        const Constants& constants) {
  return [base, constants](int ranks, int ranksPerHost, size_t bytes) {
    if (ranks <= 1) return 0.0;
    JobShape shape = base;
    shape.ranks = ranks;
    shape.ranksPerHost = std::max(1, std::min(ranksPerHost, ranks));
    shape.shmArena = base.shmArena && shape.hosts() == 1;
    return selectedAllreduceSeconds(bytes, shape, constants);
  };
}

void fillPsCosts(const JobShape& base, const Constants& constants,
                 TrainRequest& request) {
  request.ps.latencySeconds = constants.get(base.inter, Term::kAlpha);
  request.ps.reduceSecondsPerByte = constants.get(base.inter, Term::kGamma);
  request.ps.updateSecondsPerByte = 3 * constants.get(base.inter, Term::kGamma);
}

}  // namespace kolo::predict

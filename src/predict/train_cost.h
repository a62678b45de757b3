// The training model's allreduce time from the allreduce model: a fused
// buffer costs what kolo's selection would run for it (allreduce_model.h,
// selectedAllreduceSeconds), without the descriptor exchange (the
// runtime's negotiated calls skip it).
#pragma once

#include "predict/allreduce_model.h"
#include "predict/constants.h"
#include "predict/train_request.h"

namespace kolo::predict {

// `base` gives the links, paths and cores; each call sets the rank count
// and ranks per host (min(ranksPerHost, ranks)); the shm arena is used
// when base.shmArena and the ranks fit on one host.
AllreduceModelFn selectedAllreduceModel(const JobShape& base, const Constants& constants);

// The parameter servers' message latency and byte costs from the same
// constants: a message's transport latency (request.ps.latencySeconds,
// added to the link's) = alpha of the inter-host path;
// a server sums pushes at its gamma per byte and applies an update at
// 3 x gamma per byte (SGD with momentum reads and writes three vectors).
void fillPsCosts(const JobShape& base, const Constants& constants, TrainRequest& request);

}  // namespace kolo::predict

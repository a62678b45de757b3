#include "frameworks/torch/pipeline_schedule.h"

#include <algorithm>

#include "common/check.h"

namespace kolo::torch::pipeline {

const std::vector<std::string>& scheduleNames() {
  static const std::vector<std::string> names = {"gpipe", "1f1b"};
  return names;
}

namespace {

std::vector<Slot> gpipe(int64_t chunks) {
  std::vector<Slot> order;
  for (int64_t m = 0; m < chunks; ++m) order.push_back({true, m});
  for (int64_t m = 0; m < chunks; ++m) order.push_back({false, m});
  return order;
}

std::vector<Slot> oneForwardOneBackward(int stage, int stages, int64_t chunks) {
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, chunks);
  std::vector<Slot> order;
  for (int64_t m = 0; m < warmup; ++m) order.push_back({true, m});
  int64_t b = 0;
  for (int64_t f = warmup; f < chunks; ++f, ++b) {
    order.push_back({true, f});
    order.push_back({false, b});
  }
  for (; b < chunks; ++b) order.push_back({false, b});
  return order;
}

}  // namespace

std::vector<Slot> scheduleOrder(const std::string& schedule, int stage, int stages,
                                int64_t chunks) {
  if (stages < 1 || stage < 0 || stage >= stages || chunks < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "pipeline schedule: stage "
                                                << stage << " of " << stages << " with "
                                                << chunks << " chunks is out of range");
  }
  if (schedule == "gpipe") return gpipe(chunks);
  if (schedule == "1f1b") return oneForwardOneBackward(stage, stages, chunks);
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "pipeline: schedule '" << schedule << "' (expected gpipe or 1f1b)");
}

double bubbleFraction(int stages, int64_t chunks) {
  return static_cast<double>(stages - 1) / static_cast<double>(chunks + stages - 1);
}

}  // namespace kolo::torch::pipeline

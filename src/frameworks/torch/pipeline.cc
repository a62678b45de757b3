// Pipeline: the split, the agreement at construction and the public calls;
// one micro-batch's passes and the failure protocol are in
// pipeline_stage.cc, the schedules in pipeline_schedule.cc.
#include "frameworks/torch/pipeline.h"

#include <algorithm>
#include <atomic>
#include <sstream>

#include "common/check.h"

namespace kolo::torch::pipeline {

namespace {

// Channels for pipelines' messages: distinct per pipeline in this process,
// agreed (the largest proposal) among its ranks; above the C API's
// process-set channels.
std::atomic<uint32_t> nextChannel{1u << 30};

constexpr char kSeparator = '\x1f';

std::string text(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

// The stages' layer boundaries [0, ..., n]; throws when the options are bad.
std::vector<int64_t> layerBounds(int64_t n, int stages, const Options& o) {
  if (o.splitPoints.empty() == o.balance.empty() && !(stages == 1 && o.balance.empty())) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline: give splitPoints or balance (one of them)");
  }
  std::vector<int64_t> bounds = {0};
  if (!o.balance.empty()) {
    int64_t sum = 0;
    for (int64_t b : o.balance) {
      sum += b;
      bounds.push_back(sum);
    }
    bool bad = static_cast<int>(o.balance.size()) != stages || sum != n ||
               *std::min_element(o.balance.begin(), o.balance.end()) < 1;
    if (bad) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "pipeline: balance " << text(o.balance) << " must give " << stages
                                      << " stages of at least one layer each, " << n
                                      << " layers in all");
    }
    return bounds;
  }
  if (static_cast<int>(o.splitPoints.size()) != stages - 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline: " << o.splitPoints.size() << " split points for " << stages
                            << " stages (need " << stages - 1 << ")");
  }
  bounds.insert(bounds.end(), o.splitPoints.begin(), o.splitPoints.end());
  bounds.push_back(n);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    if (bounds[i] >= bounds[i + 1]) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "pipeline: split points "
                     << text(o.splitPoints) << " are outside the model of " << n
                     << " layers or not increasing (each stage needs a layer: 0 < p1 < "
                        "... < "
                     << n << ")");
    }
  }
  return bounds;
}

void checkModes(const Options& o) {
  const auto& names = scheduleNames();
  if (std::find(names.begin(), names.end(), o.schedule) == names.end()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline: schedule '" << o.schedule << "' (expected gpipe or 1f1b)");
  }
  if (o.checkpoint != "never" && o.checkpoint != "except_last" &&
      o.checkpoint != "always") {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline: checkpoint '" << o.checkpoint
                                        << "' (expected never, except_last or always)");
  }
  if (o.chunks < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline: chunks must be positive, got " << o.chunks);
  }
}

std::vector<std::string> fields(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == kSeparator) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// Every rank's `mine`, by rank (two allgathers: the lengths, the bytes).
std::vector<std::string> allgatherStrings(Communicator& comm, const std::string& mine) {
  std::vector<int64_t> lengths(comm.size());
  int64_t length = static_cast<int64_t>(mine.size());
  AllgatherOptions o;
  o.send = &length;
  o.recv = lengths.data();
  o.count = 1;
  o.dtype = DataType::kInt64;
  comm.allgather(o);
  std::vector<size_t> counts(lengths.begin(), lengths.end());
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::string all(total, '\0');
  AllgatherOptions v;
  v.send = mine.data();
  v.recv = all.data();
  v.counts = counts;
  v.dtype = DataType::kUInt8;
  comm.allgather(v);
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t c : counts) {
    out.push_back(all.substr(at, c));
    at += c;
  }
  return out;
}

}  // namespace

Pipeline::Pipeline(::torch::nn::Sequential model, const Options& options,
                   Communicator& comm)
    : options_(options), comm_(comm), stage_(comm.rank()), stages_(comm.size()) {
  std::string error;
  try {
    bounds_ = layerBounds(static_cast<int64_t>(model->size()), stages_, options_);
    checkModes(options_);
  } catch (const Error& e) {
    error = e.what();
  }
  agree(error);
  auto children = model->named_children();
  for (int64_t i = bounds_[stage_]; i < bounds_[stage_ + 1]; ++i) {
    module_->push_back(children[i].key(), *(model->begin() + i));
  }
  links_ = std::make_unique<Links>(comm_, channel_);
}

Pipeline::~Pipeline() {
  if (links_) links_->flush(true);
}

// Every rank's error and options, allgathered: errors first (all of them,
// by rank), then the first disagreement with another rank.
void Pipeline::agree(const std::string& error) {
  const uint32_t proposal = nextChannel.load();
  const std::vector<std::string> mine = {error,
                                         text(bounds_),
                                         options_.schedule,
                                         std::to_string(options_.chunks),
                                         options_.checkpoint,
                                         std::to_string(proposal)};
  std::string joined;
  for (const auto& f : mine) joined += f + kSeparator;
  auto all = allgatherStrings(comm_, joined);
  std::ostringstream errors;
  uint32_t channel = proposal;
  for (size_t r = 0; r < all.size(); ++r) {
    auto theirs = fields(all[r]);
    if (!theirs[0].empty())
      errors << (errors.tellp() ? "; " : "") << "rank " << r << ": " << theirs[0];
    channel = std::max<uint32_t>(channel, static_cast<uint32_t>(std::stoul(theirs[5])));
  }
  if (errors.tellp() > 0) KOLO_THROW(ErrorCode::kInvalidArgument, errors.str());
  static const char* names[] = {"split (layer bounds)", "schedule", "chunks",
                                "checkpoint"};
  for (size_t r = 0; r < all.size(); ++r) {
    auto theirs = fields(all[r]);
    for (size_t k = 1; k <= 4; ++k) {
      if (theirs[k] == mine[k]) continue;
      KOLO_THROW(ErrorCode::kMismatch, "pipeline: ranks disagree on the "
                                           << names[k - 1] << ": rank " << stage_
                                           << " has " << mine[k] << ", rank " << r
                                           << " has " << theirs[k]);
    }
  }
  channel_ = channel;
  uint32_t next = nextChannel.load();
  while (next <= channel && !nextChannel.compare_exchange_weak(next, channel + 1)) {
  }
}

void Pipeline::checkUsable() const {
  if (!failed_.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline stage "
                   << stage_ << " (rank " << stage_
                   << ") is unusable after an earlier failure: " << failed_);
  }
}

std::vector<at::Tensor> Pipeline::split(const at::Tensor& batch, const char* what) const {
  if (!batch.defined() || batch.dim() == 0 || batch.size(0) % options_.chunks != 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline stage "
                   << stage_ << " (rank " << stage_ << "): the " << what
                   << (batch.defined() ? " of shape " + text(batch.sizes().vec())
                                       : std::string(" (undefined)"))
                   << " does not split into " << options_.chunks
                   << " equal micro-batches along dimension 0");
  }
  return batch.chunk(options_.chunks);
}

at::Tensor Pipeline::trainStep(const at::Tensor& batch, const LossFn& lossFn,
                               const at::Tensor& targets) {
  checkUsable();
  Step step;
  step.lossFn = &lossFn;
  peakHeld_ = 0;
  guarded([&] {
    if (isFirst()) step.inputs = split(batch, "batch");
    if (isLast()) step.targets = split(targets, "targets");
    for (const Slot& slot :
         scheduleOrder(options_.schedule, stage_, stages_, options_.chunks)) {
      if (slot.forward) {
        forwardOne(step, slot.microBatch);
      } else {
        backwardOne(step, slot.microBatch);
      }
    }
    links_->flush();
  });
  return isLast() ? at::stack(step.losses).sum() : at::Tensor();
}

at::Tensor Pipeline::forward(const at::Tensor& batch) {
  checkUsable();
  Step step;
  step.grad = false;
  guarded([&] {
    if (isFirst()) step.inputs = split(batch, "batch");
    for (int64_t m = 0; m < options_.chunks; ++m) forwardOne(step, m);
    links_->flush();
  });
  return isLast() ? at::cat(step.outputs) : at::Tensor();
}

void Pipeline::step(::torch::optim::Optimizer& optimizer) {
  optimizer.step();
  optimizer.zero_grad();
}

void Pipeline::guarded(const std::function<void()>& body) {
  try {
    body();
  } catch (const StageFailed&) {
    throw;  // failFrom told the others
  } catch (const Error& e) {
    const ErrorCode c = e.code();
    if (c == ErrorCode::kPeerLost || c == ErrorCode::kTimeout || c == ErrorCode::kIo ||
        c == ErrorCode::kInternal) {
      failed_ = e.what();  // the communicator is broken: nothing to tell
      links_->flush(true);
      throw;
    }
    tellNeighbours(e.what());
    throw;
  } catch (const c10::Error& e) {
    tellNeighbours(e.what_without_backtrace());
    throw;
  } catch (const std::exception& e) {
    tellNeighbours(e.what());
    throw;
  }
}

}  // namespace kolo::torch::pipeline

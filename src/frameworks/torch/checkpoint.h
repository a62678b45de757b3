// Checkpoints of a libtorch training job: the C++ counterpart of
// kolo.torch.checkpoint (docs/elastic.md, "C++").
//
//   kolo::torch::checkpoint::save("ckpt/step{step:06d}.pt", state, {.keepLast = 2});
//   kolo::torch::checkpoint::load("ckpt/step{step:06d}.pt", state);  // the newest
//
// What is written: the state's archive (ElasticState::write: each model's
// parameters and buffers, each optimizer's state and learning rates, each
// sampler's position, each value such as epoch and step), the world size,
// and every rank's torch default CPU generator state, gathered to rank 0.
// The format is a libtorch archive (torch::serialize), kolo's own for C++:
// Python's kolo.torch.checkpoint (torch.save of a dict) does not read it,
// nor this one Python's.
//
// Rank 0 serializes to a temporary file in the target's directory, fsyncs
// it, renames it over the target and fsyncs the directory: a reader finds
// the old file or the new one, never a torn one.
//
// `path` may name the state's values as fields, "{step}" or "{step:06d}"
// (zero-padded to 6 digits); with keepLast = K the older files of the
// pattern (fields replaced by wildcards) beyond the K newest (by time of
// modification, then name) are removed after the new one is in place.
// load() of a pattern reads the newest matching file.
//
// load() reads on rank 0 only, loads into the state, commits (save()),
// syncs every rank from rank 0, and gives each rank back its generator
// state (rank r takes saved rank r mod the saved size when the size
// changed).
//
// Contract: collective (every rank calls, same order). A failure on rank 0
// (an unwritable directory, a missing or damaged file, a state whose
// entries differ from the file's, a field that names no value) is thrown on
// every rank as Error(kInvalidArgument) with rank 0's message, naming the
// path. Returns the path written or read (on every rank).
#pragma once

#include <string>

#include "frameworks/torch/elastic_state.h"

namespace kolo::torch::checkpoint {

struct SaveOptions {
  int keepLast = 0;  // 0: keep every file
};

std::string save(const std::string& path, ElasticState& state, SaveOptions options = {});
std::string load(const std::string& path, ElasticState& state);

}  // namespace kolo::torch::checkpoint

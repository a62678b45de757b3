// Byte strings across the ranks of a Context, through its runtime: what the
// elastic state and the checkpoints use to agree on serialized objects
// (libtorch archives, error messages).
//
// Contract: collective (every rank calls with the same `name`, in the same
// order relative to the Context's other operations); blocks until done;
// failures (a lost peer, a timeout) are thrown as kolo::Error.
#pragma once

#include <string>
#include <vector>

#include "frameworks/torch/context.h"

namespace kolo::torch {

// Root's `bytes` on every rank (the others' input is ignored).
std::string broadcastBytes(Context& context, const std::string& name, std::string bytes,
                           int root);

// Every rank's `bytes`, by rank.
std::vector<std::string> allgatherBytes(Context& context, const std::string& name,
                                        const std::string& bytes);

}  // namespace kolo::torch

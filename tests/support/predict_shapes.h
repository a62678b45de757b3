// What the tests of the scale model share (predict_test, predict_fit_test,
// predict_selection_test; src/predict/): round-number constants per path,
// a job of n ranks on one host over tcp, and an allreduce's predicted time
// in microseconds.
#pragma once

#include <cstddef>

#include "predict/allreduce_model.h"
#include "predict/constants.h"

namespace kolo::predict_shapes {

using predict::Algorithm;
using predict::Constants;
using predict::JobShape;
using predict::Path;
using predict::Term;

constexpr double kUs = 1e-6;

inline predict::PathConstants pathOf(double alpha, double beta, double gamma,
                                     double message, double call) {
  predict::PathConstants p;
  p[Term::kAlpha] = alpha;
  p[Term::kBeta] = beta;
  p[Term::kGamma] = gamma;
  p[Term::kMessage] = message;
  p[Term::kCall] = call;
  return p;
}

// Round numbers: tcp alpha 10 us, beta 1 ns/B, gamma 0.5 ns/B, message
// 2 us, call 3 us; shm (transport and arena) alpha 1 us, beta 0.1 ns/B,
// gamma 0.5 ns/B, call 0.5 us.
inline Constants roundConstants() {
  Constants c;
  c[Path::kTcp] = pathOf(10 * kUs, 1e-9, 0.5e-9, 2 * kUs, 3 * kUs);
  c[Path::kMpi] = c[Path::kTcp];
  c[Path::kShm] = pathOf(1 * kUs, 0.1e-9, 0.5e-9, 0, 0.5 * kUs);
  c[Path::kShmArena] = pathOf(1 * kUs, 0.1e-9, 0.5e-9, 0, 0.5 * kUs);
  c.source = "test";
  return c;
}

// n ranks on one host, tcp between all of them (KOLO_TRANSPORT=tcp).
inline JobShape oneHostTcp(int n) {
  JobShape s;
  s.ranks = n;
  s.ranksPerHost = n;
  s.intra = s.inter = Path::kTcp;
  return s;
}

inline double us(Algorithm a, size_t bytes, const JobShape& s, const Constants& c,
                 predict::CostOptions o = {}) {
  return predict::allreduceSeconds(a, bytes, s, c, o) / kUs;
}

}  // namespace kolo::predict_shapes

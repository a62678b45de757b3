// Calibration: the constants fitted by least squares to measured allreduce
// times, and the measurement file they come from.
//
// The measurement file (CSV, written by `kolo-predict calibrate` and by the
// validation harness bench/scale/):
//   transport,hosts,ranks_per_host,link_bps,algorithm,bytes,seconds
// one row per (setting, algorithm, size); seconds: one allreduce (float32
// sum, out of place, kolo-bench's time); link_bps: the rate of each host's
// link (0: not shaped); transport: KOLO_TRANSPORT of the run (shm or auto:
// shm inside a host and tcp between hosts; tcp: tcp between every pair;
// mpi: MPI between every pair).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "predict/allreduce_model.h"
#include "predict/constants.h"

namespace kolo::predict {

class FitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Measurement {
  std::string transport;  // shm, auto, tcp or mpi
  int hosts = 1;
  int ranksPerHost = 1;
  double linkBps = 0;
  Algorithm algorithm = Algorithm::kRing;
  size_t bytes = 0;
  double seconds = 0;
};

inline constexpr std::string_view kMeasurementHeader =
    "transport,hosts,ranks_per_host,link_bps,algorithm,bytes,seconds";

// Reads the file; a missing header, a short row or a bad field is a
// FitError naming the file, the line and the field.
std::vector<Measurement> readMeasurements(const std::string& path);
std::vector<Measurement> parseMeasurements(std::string_view text,
                                           std::string_view source);
// One CSV line (no newline) in the header's order.
std::string measurementLine(const Measurement& m);

// The shape of the run of a row (block placement, KOLO_TRANSPORT's paths;
// all hosts on one machine when `hostsShareCores`, with `cores` cores, 0:
// not limited).
// `linkBurst` and `spinSeconds` as JobShape's (0: no token bucket; the
// KOLO_SPIN_US default).
JobShape shapeOf(const Measurement& m, int cores = 0, bool hostsShareCores = false,
                 double linkBurst = 0, double spinSeconds = 100e-6);

struct FitOptions {
  // Pull towards the starting constants (relative units): keeps terms the
  // data cannot tell apart (e.g. beta and gamma, which the ring and rhd
  // always see in the same ratio) at their starting ratio instead of
  // letting them trade off. Small enough not to bias identifiable terms.
  double ridge = 1e-4;
  int maxIterations = 30;
  int cores = 0;                 // as shapeOf
  bool hostsShareCores = false;  // as shapeOf
  double linkBurst = 0;          // as shapeOf
  double spinSeconds = 100e-6;   // as shapeOf
  bool agreement = true;         // kolo-bench's calls pay the descriptor exchange
};

struct FitResult {
  Constants constants;
  std::vector<double> predicted;              // per measurement, seconds
  std::vector<std::pair<Path, Term>> fitted;  // the terms the data touched
  double medianRelativeError = 0;             // |predicted - measured| / measured
  double maxRelativeError = 0;
  int iterations = 0;
};

// Minimises about sum log(predicted / measured)^2 over the terms that
// the measurements depend on, each kept >= 0, starting from (and pulled
// slightly towards) `start`. Throws FitError when there is nothing to fit.
FitResult fitConstants(const std::vector<Measurement>& data, const Constants& start,
                       const FitOptions& options = {});

}  // namespace kolo::predict

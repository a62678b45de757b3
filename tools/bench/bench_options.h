// Command line of kolo-bench (nccl-tests style).
//
// parseOptions() never talks to other ranks, so a bad flag is reported before
// any rendezvous: it throws UsageError naming the flag and the value, and the
// caller exits with status 2.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::bench {

enum class Collective { kAllreduce, kBroadcast, kAllgather, kReduceScatter, kAlltoall };

std::string_view toString(Collective c);

struct Options {
  Collective collective = Collective::kAllreduce;
  std::vector<size_t> sizes;  // bytes, in the order measured
  long iters = 20;            // -n
  long warmup = 5;            // -w
  double minTime = 0;         // --min-time: raise iters to last this long
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string algorithm;  // -a (allreduce only)
  int root = 0;           // --root (broadcast)
  bool inPlace = false;   // --inplace (allreduce)
  bool json = false;
  bool check = true;
  bool help = false;
  bool listSettings = false;
};

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses "8", "1K", "64M", "1G" (binary multiples; "KB", "KiB" also
// accepted). Throws UsageError naming flag.
size_t parseSize(std::string_view flag, std::string_view text);

// argv[0] is skipped. Throws UsageError.
Options parseOptions(int argc, const char* const* argv);

// The --help text.
std::string usage();

}  // namespace kolo::bench

// kolo-bench: bandwidth and latency of kolo's collectives, nccl-tests style.
//
//   build/bin/kolorun -np 2 build/bin/kolo-bench -o allreduce -b 8 -e 64M -f 4
//
// Method (shared with tools/bench/mpi_allreduce_bench.c and
// bench/gloo_allreduce.py, so that their figures line up): for each size,
// WARMUP untimed iterations, a barrier, then ITERS back-to-back iterations
// timed together; a rank's time is total / ITERS and the reported time is the
// maximum over ranks. --min-time S raises ITERS (rank 0 decides from the
// warm-up and broadcasts its choice) so that the timed loop lasts about S
// seconds. algbw = bytes / time (1 GB = 1e9 bytes); busbw = algbw * the
// collective's bus factor (bench_data.h, Case::busFactor). After the timed
// loop the inputs are refilled, the collective runs once more and every
// output element is checked on every rank (bench_data.h); a wrong element
// prints its index, expected and actual values and makes the exit status 1.
#include <kolo/communicator.h>
#include <kolo/error.h>
#include <kolo/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "bench_data.h"
#include "bench_options.h"
#include "collectives/registry.h"
#include "common/settings.h"

namespace kolo::bench {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<void, FreeDeleter>;

Buffer allocate(size_t bytes) {
  // Page-aligned; at least one page so that a 0-byte case has a valid pointer.
  const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) {
    throw Error(ErrorCode::kInternal,
                "cannot allocate " + std::to_string(rounded) + " bytes");
  }
  return Buffer(p);
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Rejects an unknown -a before any rank starts (the library would too, but
// only after the rendezvous).
void checkAlgorithmName(const std::string& name) {
  if (name.empty()) return;
  std::string known;
  for (const auto& algo : collectives::allreduceAlgorithms()) {
    if (algo.name == name) return;
    known += (known.empty() ? "" : ", ") + std::string(algo.name);
  }
  throw UsageError("-a '" + name + "': unknown allreduce algorithm (expected one of " +
                   known + ")");
}

// "any (ignored)", "`MPI`, `GLOO` (ignored); others: error", or
// "none: error when set".
std::string horovodValuesText(const std::string& accepted) {
  if (accepted == "*") return "any (ignored)";
  if (accepted.empty()) return "none: error when set";
  std::string out;
  std::istringstream list(accepted);
  for (std::string v; std::getline(list, v, ',');)
    out += (out.empty() ? "`" : ", `") + v + "`";
  return out + " (ignored); others: error";
}

// The tables of docs/env.md: the settings with their Horovod aliases, then
// the Horovod variables no setting stands for.
void printSettings() {
  std::cout << "| variable | Horovod alias | default | meaning |\n"
               "| --- | --- | --- | --- |\n";
  for (const auto& s : Settings::describe()) {
    std::string alias = s.alias.empty() ? "(none)" : "`" + s.alias + "`";
    if (!s.aliasNote.empty()) alias += " (" + s.aliasNote + ")";
    std::cout << "| `" << s.env << "` | " << alias << " | "
              << (s.defaultValue.empty() ? "(empty)" : "`" + s.defaultValue + "`")
              << " | " << s.doc << " |\n";
  }
  std::cout << "\n| Horovod variable | values | why |\n| --- | --- | --- |\n";
  for (const auto& h : Settings::describeHorovod()) {
    std::cout << "| `" << h.env << "` | " << horovodValuesText(h.accepted) << " | "
              << h.reason << " |\n";
  }
}

std::string formatDouble(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

class Bench {
 public:
  Bench(const Options& options, const Settings& settings,
        std::shared_ptr<Communicator> comm)
      : o_(options), settings_(settings), comm_(std::move(comm)) {}

  // Returns the exit status: 0, or 1 when a check failed.
  int run() {
    const int n = comm_->size();
    if (o_.root >= n) {
      throw UsageError("--root '" + std::to_string(o_.root) + "': the job has only " +
                       std::to_string(n) + " ranks");
    }
    size_t sendBytes = 0, recvBytes = 0;
    for (size_t bytes : o_.sizes) {
      Case c(o_, comm_->rank(), n, bytes);
      sendBytes = std::max(sendBytes, c.sendCount() * elementSize(o_.dtype));
      recvBytes = std::max(recvBytes, c.recvCount() * elementSize(o_.dtype));
    }
    send_ = allocate(sendBytes);
    recv_ = allocate(recvBytes);
    if (comm_->rank() == 0 && !o_.json) printHeader();
    bool allOk = true;
    for (size_t bytes : o_.sizes) allOk = measure(bytes) && allOk;
    return allOk ? 0 : 1;
  }

 private:
  void printHeader() const {
    std::printf("# kolo-bench: %s  ranks %d  dtype %s  op %s  iters %ld",
                std::string(toString(o_.collective)).c_str(), comm_->size(),
                std::string(toString(o_.dtype)).c_str(),
                std::string(toString(o_.op)).c_str(), o_.iters);
    if (o_.minTime > 0) std::printf(" (or more to run %.2f s)", o_.minTime);
    std::printf("  warmup %ld  check %s%s\n", o_.warmup, o_.check ? "on" : "off",
                o_.inPlace ? "  in place" : "");
    std::printf("# transport %s%s%s\n", settings_.transport.c_str(),
                settings_.allreduceAlgorithm.empty() ? "" : "  KOLO_ALLREDUCE_ALGO=",
                settings_.allreduceAlgorithm.c_str());
    std::printf(
        "# time: back-to-back iterations after a barrier, total / iters, max over "
        "ranks\n");
    std::printf("# %12s %12s %9s %10s %8s %12s %12s %12s %6s\n", "bytes", "count",
                "dtype", "algorithm", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                "check");
    std::fflush(stdout);
  }

  void runOnce(const Case& c) {
    void* send = send_.get();
    void* recv = recv_.get();
    switch (o_.collective) {
      case Collective::kAllreduce: {
        AllreduceOptions a;
        a.send = o_.inPlace ? recv : send;
        a.recv = recv;
        a.count = c.count();
        a.dtype = o_.dtype;
        a.op = o_.op;
        a.algorithm = o_.algorithm;
        comm_->allreduce(a);
        break;
      }
      case Collective::kBroadcast: {
        BroadcastOptions a;
        a.buffer = recv;
        a.count = c.count();
        a.dtype = o_.dtype;
        a.root = o_.root;
        comm_->broadcast(a);
        break;
      }
      case Collective::kAllgather: {
        AllgatherOptions a;
        a.send = send;
        a.recv = recv;
        a.count = c.blockCount();
        a.dtype = o_.dtype;
        comm_->allgather(a);
        break;
      }
      case Collective::kReduceScatter: {
        ReduceScatterOptions a;
        a.send = send;
        a.recv = recv;
        a.recvCount = c.blockCount();
        a.dtype = o_.dtype;
        a.op = o_.op;
        comm_->reduceScatter(a);
        break;
      }
      case Collective::kAlltoall: {
        AlltoallOptions a;
        a.send = send;
        a.recv = recv;
        a.countPerRank = c.blockCount();
        a.dtype = o_.dtype;
        comm_->alltoall(a);
        break;
      }
    }
  }

  // Rank 0's choice of iteration count, given the warm-up's time per
  // iteration, agreed by all ranks.
  long chooseIters(const Case& c, double perIter) {
    if (o_.minTime <= 0) return o_.iters;
    if (perIter <= 0) {
      const double t = now();
      runOnce(c);
      perIter = now() - t;
    }
    const double want = std::ceil(o_.minTime / std::max(perIter, 1e-9));
    int64_t iters =
        std::max<int64_t>(o_.iters, static_cast<int64_t>(std::min(want, 1e7)));
    BroadcastOptions b;
    b.buffer = &iters;
    b.count = 1;
    b.dtype = DataType::kInt64;
    b.root = 0;
    comm_->broadcast(b);
    return static_cast<long>(iters);
  }

  bool measure(size_t requestedBytes) {
    const Case c(o_, comm_->rank(), comm_->size(), requestedBytes);
    c.fill(send_.get(), recv_.get());

    comm_->barrier();
    double t0 = now();
    for (long i = 0; i < o_.warmup; ++i) runOnce(c);
    const double perIter = o_.warmup > 0 ? (now() - t0) / o_.warmup : 0;
    const long iters = chooseIters(c, perIter);

    comm_->barrier();
    t0 = now();
    for (long i = 0; i < iters; ++i) runOnce(c);
    double seconds = (now() - t0) / iters;
    AllreduceOptions maxTime;
    maxTime.send = maxTime.recv = &seconds;
    maxTime.count = 1;
    maxTime.dtype = DataType::kFloat64;
    maxTime.op = ReduceOp::kMax;
    comm_->allreduce(maxTime);

    std::string check = "-";
    bool ok = true;
    if (o_.check) {
      c.fill(send_.get(), recv_.get());
      runOnce(c);
      const auto bad = c.verify(recv_.get());
      if (bad) {
        std::ostringstream os;
        os << "kolo-bench: rank " << comm_->rank() << ": " << toString(o_.collective)
           << " of " << c.count() << " " << toString(o_.dtype) << " (" << c.bytes()
           << " bytes): wrong result at index " << bad->index << ": expected "
           << bad->expected << ", got " << bad->got << "\n";
        std::cerr << os.str() << std::flush;
      }
      int32_t good = bad ? 0 : 1;
      AllreduceOptions all;
      all.send = all.recv = &good;
      all.count = 1;
      all.dtype = DataType::kInt32;
      all.op = ReduceOp::kMin;
      comm_->allreduce(all);
      ok = good == 1;
      check = ok ? "ok" : "FAIL";
    }

    if (comm_->rank() == 0) {
      const std::string algorithm = o_.collective != Collective::kAllreduce ? "-"
                                    : !o_.algorithm.empty()
                                        ? o_.algorithm
                                        : comm_->allreduceAlgorithm(c.bytes());
      const double algbw = seconds > 0 ? c.bytes() / seconds / 1e9 : 0;
      const double busbw = algbw * c.busFactor();
      if (o_.json) {
        std::ostringstream os;
        os << "{\"tool\":\"kolo-bench\",\"op\":\"" << toString(o_.collective)
           << "\",\"bytes\":" << c.bytes() << ",\"count\":" << c.count()
           << ",\"dtype\":\"" << toString(o_.dtype) << "\",\"redop\":\""
           << toString(o_.op) << "\",\"algorithm\":\"" << algorithm
           << "\",\"transport\":\"" << settings_.transport
           << "\",\"ranks\":" << comm_->size()
           << ",\"inplace\":" << (o_.inPlace ? "true" : "false") << ",\"iters\":" << iters
           << ",\"time_us\":" << formatDouble(seconds * 1e6, 3)
           << ",\"algbw_gbps\":" << formatDouble(algbw, 4)
           << ",\"busbw_gbps\":" << formatDouble(busbw, 4) << ",\"check\":\"" << check
           << "\"}\n";
        std::cout << os.str() << std::flush;
      } else {
        std::printf("  %12zu %12zu %9s %10s %8ld %12.2f %12.3f %12.3f %6s\n", c.bytes(),
                    c.count(), std::string(toString(o_.dtype)).c_str(), algorithm.c_str(),
                    iters, seconds * 1e6, algbw, busbw, check.c_str());
        std::fflush(stdout);
      }
    }
    return ok;
  }

  const Options& o_;
  const Settings& settings_;
  std::shared_ptr<Communicator> comm_;
  Buffer send_, recv_;
};

int usageFailure(const std::string& what) {
  std::cerr << "kolo-bench: " << what << "\nrun 'kolo-bench --help' for the options\n";
  return 2;
}

int benchMain(int argc, char** argv) {
  Options options;
  Settings settings;
  try {
    options = parseOptions(argc, argv);
    if (options.help) {
      std::cout << usage();
      return 0;
    }
    if (options.listSettings) {
      printSettings();
      return 0;
    }
    checkAlgorithmName(options.algorithm);
    settings = Settings::fromEnvironment();
  } catch (const UsageError& e) {
    return usageFailure(e.what());
  } catch (const Error& e) {  // a malformed KOLO_* variable
    return usageFailure(e.what());
  }

  int rank = -1;
  try {
    auto comm = Communicator::fromEnvironment();
    rank = comm->rank();
    Bench bench(options, settings, comm);
    return bench.run();
  } catch (const UsageError& e) {
    return usageFailure(e.what());
  } catch (const Error& e) {
    std::ostringstream os;
    os << "kolo-bench: ";
    if (rank >= 0) os << "rank " << rank << ": ";
    os << toString(e.code()) << ": " << e.what() << "\n";
    std::cerr << os.str() << std::flush;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kolo-bench: rank " << rank << ": " << e.what() << "\n" << std::flush;
    return 1;
  }
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) {
  return kolo::bench::benchMain(argc, argv);
}

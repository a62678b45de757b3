// kolo-fusion-bench: training steps through the runtime (issue 4's fusion
// benchmark; bench/fusion.sh runs it next to MPI and Gloo baselines).
//
//   build/bin/kolorun -np 2 build/bin/kolo-fusion-bench --workload resnet50
//   KOLO_FUSION_THRESHOLD=0 build/bin/kolorun -np 2 build/bin/kolo-fusion-bench
//   build/bin/kolorun -np 2 build/bin/kolo-fusion-bench --mode direct
//   build/bin/kolo-fusion-bench --print-tensors resnet50
//
// Mode "runtime": one step submits an average allreduce of every tensor of
// the workload (fusion_workload.h) to a Runtime, in backward order (last
// layer first), under the same names every step, in place, and then waits
// for every handle. The runtime's settings (fusion threshold, cycle time,
// timeline) come from KOLO_* as usual; KOLO_FUSION_THRESHOLD=0 runs each
// tensor as its own collective. --compute-ms stands for a model's forward
// and backward pass: every rank sleeps that long before submitting a
// step; --slow RANK:MS makes one rank sleep MS more (a straggler on
// purpose, to see the runtime's straggler line: docs/runtime.md).
//
// Mode "direct": the runtime's overhead for one large tensor and the
// reference for the fused workload, measured in alternation, round by
// round, so that drifting machine load hits all three alike:
//   direct-64M   Communicator::allreduce of one 64 MiB tensor (average);
//   runtime-64M  the same tensor submitted to a Runtime and waited for;
//   direct-total one Communicator::allreduce of resnet50's total bytes;
//   copy-total   (information) what a fusion buffer adds to direct-total:
//                resnet50's tensors copied into one buffer and back out,
//                with no collective (checked: the tensors come back).
//   direct-small the floor of an unfused step of workload (b): one
//                Communicator::allreduce per tensor of `small`, no runtime;
//   direct-small-total the floor of a fused step of (b): one allreduce of
//                all of `small`'s bytes. Their ratio bounds the fused /
//                unfused ratio any runtime can show on (b) here: both of
//                its steps pay the runtime's own work on top of these.
//   direct-small-segmented the collective a fused step of (b) runs: one
//                segmented allreduce (AllreduceOptions::segments) reading
//                and writing the 1,000 tensors in place.
// Each round creates a Runtime for runtime-64M and shuts it down before
// the direct calls (the communicator is the runtime's while it lives).
//
// Method: WARMUP untimed steps, then WARMUP more timed to pick the steps per
// window (rank 0's) so that a window lasts about --window-time seconds
// (broadcast to all); then
// --windows timed windows, each starting after a barrier; a window's time is
// the maximum over ranks; steps/s = steps / window time; the figure
// reported is the median over the windows (all windows are printed too).
// The barrier, broadcast and maximum go through the runtime while one
// lives. After the timed windows every input is refilled with
// rank-dependent values, one more step runs and every element of every
// tensor is compared with the average of the ranks' values; a wrong element
// is printed (tensor, index, expected, got) and the exit status is 1.
// Exit status 2: a bad flag.
#include <kolo/communicator.h>
#include <kolo/error.h>
#include <kolo/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/settings.h"
#include "fusion_workload.h"
#include "runtime/runtime.h"

namespace kolo::bench {
namespace {

constexpr size_t kBigBytes = size_t{64} << 20;  // direct mode's tensor

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  Workload workload = Workload::kResnet50;
  std::string mode = "runtime";  // runtime | direct
  int windows = 5;
  double windowTime = 0.5;
  long steps = 0;  // steps per window; 0: from --window-time
  long warmup = 3;
  size_t bigBytes = kBigBytes;  // --big-bytes (direct mode)
  bool json = false;
  bool waitLastFirst = false;  // --wait last-first
  double computeMs = 0;        // --compute-ms: every rank, before each step
  int slowRank = -1;           // --slow RANK:MS: this rank sleeps slowMs more
  double slowMs = 0;
  bool help = false;
  std::optional<Workload> printTensors;
};

const char kUsage[] =
    "usage: kolorun -np N kolo-fusion-bench [options]\n"
    "  --workload resnet50|small  tensors of a step (resnet50: 161 tensors, 25.6 M\n"
    "                             floats; small: 1000 x 4 KiB)\n"
    "  --mode runtime|direct      runtime: steps through the Runtime (fusion per\n"
    "                             KOLO_FUSION_THRESHOLD); direct: 64 MiB direct vs\n"
    "                             through the Runtime, and one allreduce of\n"
    "                             resnet50's total bytes\n"
    "  --windows N                timed windows (5); the median is reported\n"
    "  --window-time S            seconds per window (0.5)\n"
    "  --steps N                  steps per window instead of --window-time\n"
    "  --big-bytes N              direct mode: the single tensor's bytes, a multiple\n"
    "                             of 4 (67108864); cases are named direct-64M and\n"
    "                             runtime-64M for the default, else direct-N\n"
    "  --warmup N                 untimed steps first (3)\n"
    "  --wait in-order|last-first runtime mode: wait for the handles in submission\n"
    "                             order (in-order, the default), or the last one\n"
    "                             first (one wake-up per step instead of one per\n"
    "                             tensor)\n"
    "  --compute-ms MS            runtime mode: every rank sleeps MS ms before each\n"
    "                             step's submissions (the model's compute; 0)\n"
    "  --slow RANK:MS             runtime mode: rank RANK sleeps MS ms more (a\n"
    "                             straggler on purpose)\n"
    "  --json                     one JSON object per measurement\n"
    "  --print-tensors W          list workload W in submission order (count,\n"
    "                             name, shape), no job needed\n";

long parseLong(const std::string& flag, const std::string& text, long lo) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo) {
    throw UsageError(flag + " '" + text +
                     "': expected an integer >= " + std::to_string(lo));
  }
  return v;
}

// Milliseconds in [0, 3600000); `whole` is the flag's value for the message.
double parseMs(const std::string& flag, const std::string& text,
               const std::string& whole) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= 0 && v < 3.6e6)) {
    throw UsageError(flag + " '" + whole + "': expected milliseconds in [0, 3600000)");
  }
  return v;
}

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      continue;
    }
    if (flag == "--json") {
      o.json = true;
      continue;
    }
    if (i + 1 >= argc) throw UsageError(flag + ": needs a value (or unknown flag)");
    const std::string value = argv[++i];
    try {
      if (flag == "--workload") {
        o.workload = parseWorkload(value);
      } else if (flag == "--print-tensors") {
        o.printTensors = parseWorkload(value);
      } else if (flag == "--mode") {
        if (value != "runtime" && value != "direct") {
          throw UsageError(flag + " '" + value + "': expected runtime or direct");
        }
        o.mode = value;
      } else if (flag == "--windows") {
        o.windows = static_cast<int>(parseLong(flag, value, 1));
      } else if (flag == "--window-time") {
        char* end = nullptr;
        o.windowTime = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !(o.windowTime > 0 && o.windowTime < 3600)) {
          throw UsageError(flag + " '" + value + "': expected seconds in (0, 3600)");
        }
      } else if (flag == "--wait") {
        if (value != "in-order" && value != "last-first") {
          throw UsageError(flag + " '" + value + "': expected in-order or last-first");
        }
        o.waitLastFirst = value == "last-first";
      } else if (flag == "--compute-ms") {
        o.computeMs = parseMs(flag, value, value);
      } else if (flag == "--slow") {
        const size_t colon = value.find(':');
        if (colon == std::string::npos) {
          throw UsageError(flag + " '" + value + "': expected RANK:MS");
        }
        o.slowRank = static_cast<int>(parseLong(flag, value.substr(0, colon), 0));
        o.slowMs = parseMs(flag, value.substr(colon + 1), value);
      } else if (flag == "--steps") {
        o.steps = parseLong(flag, value, 1);
      } else if (flag == "--big-bytes") {
        o.bigBytes = static_cast<size_t>(parseLong(flag, value, 4));
        if (o.bigBytes % 4 != 0)
          throw UsageError(flag + " '" + value + "': not a multiple of 4");
      } else if (flag == "--warmup") {
        o.warmup = parseLong(flag, value, 0);
      } else {
        throw UsageError(flag + ": unknown flag");
      }
    } catch (const std::invalid_argument& e) {
      throw UsageError(flag + " " + e.what());
    }
  }
  return o;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Rank r's value at element j of tensor t: small integers, exact in float.
float inputValue(int rank, size_t tensor, size_t j) {
  return static_cast<float>((static_cast<size_t>(rank) * 3 + tensor + j) % 11);
}

void fill(float* p, size_t count, int rank, size_t tensor) {
  for (size_t j = 0; j < count; ++j) p[j] = inputValue(rank, tensor, j);
}

// The first element of `p` that is not the average over `ranks` ranks of
// inputValue, as a message; empty when all are right.
std::string verify(const float* p, size_t count, int ranks, size_t tensor,
                   const std::string& name) {
  for (size_t j = 0; j < count; ++j) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) sum += inputValue(r, tensor, j);
    const double expected = sum / ranks;
    if (std::fabs(p[j] - expected) > 1e-5 * std::max(1.0, std::fabs(expected))) {
      std::ostringstream os;
      os << "'" << name << "' (" << count << " floats): wrong average at index " << j
         << ": expected " << expected << ", got " << p[j];
      return os.str();
    }
  }
  return "";
}

// A float32 buffer that does not move (the runtime keeps pointers into it).
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// The small agreements a measurement needs (barrier, rank 0's choice,
// maximum time, all-ok), through the Runtime while one is set, else
// directly on the communicator.
class Sync {
 public:
  explicit Sync(Communicator& comm) : comm_(comm) {}
  void use(runtime::Runtime* rt) { rt_ = rt; }

  void barrier() {
    if (rt_ == nullptr) return comm_.barrier();
    runtime::OpRequest r;
    r.spec.name = "bench.barrier";
    r.spec.kind = runtime::OpKind::kBarrier;
    rt_->enqueue(std::move(r))->wait();
  }
  double max(double v) {
    reduce(&v, DataType::kFloat64, ReduceOp::kMax, "bench.max");
    return v;
  }
  bool allOk(bool ok) {
    int32_t v = ok ? 1 : 0;
    reduce(&v, DataType::kInt32, ReduceOp::kMin, "bench.ok");
    return v == 1;
  }
  int64_t fromRank0(int64_t v) {
    if (rt_ == nullptr) {
      BroadcastOptions b;
      b.buffer = &v;
      b.count = 1;
      b.dtype = DataType::kInt64;
      comm_.broadcast(b);
      return v;
    }
    runtime::OpRequest r;
    r.spec.name = "bench.broadcast";
    r.spec.kind = runtime::OpKind::kBroadcast;
    r.spec.dtype = DataType::kInt64;
    r.spec.shape = {1};
    r.input = r.output = &v;
    rt_->enqueue(std::move(r))->wait();
    return v;
  }

 private:
  void reduce(void* value, DataType dtype, ReduceOp op, const char* name) {
    if (rt_ == nullptr) {
      AllreduceOptions a;
      a.send = a.recv = value;
      a.count = 1;
      a.dtype = dtype;
      a.op = op;
      comm_.allreduce(a);
      return;
    }
    runtime::OpRequest r;
    r.spec.name = name;
    r.spec.dtype = dtype;
    r.spec.op = op;
    r.spec.shape = {1};
    r.input = r.output = value;
    rt_->enqueue(std::move(r))->wait();
  }

  Communicator& comm_;
  runtime::Runtime* rt_ = nullptr;
};

// One measured case: its windows' steps/s.
struct Result {
  std::string name;  // "runtime", "direct-64M", ...
  size_t tensors = 0;
  size_t bytes = 0;
  long steps = 0;  // per window
  std::vector<double> perSecond;
  std::vector<double> submitMs;  // per step, per window (runtime cases)
  std::string check = "-";
};

class FusionBench {
 public:
  FusionBench(const Options& o, const Settings& s, std::shared_ptr<Communicator> comm)
      : o_(o),
        settings_(s),
        comm_(std::move(comm)),
        rank_(comm_->rank()),
        size_(comm_->size()),
        sync_(*comm_) {}

  int run() {
    if (o_.mode == "runtime") return runRuntime();
    return runDirect();
  }

 private:
  runtime::RuntimeOptions runtimeOptions() const {
    return runtime::RuntimeOptions::fromSettings(settings_);
  }

  // Warm-up, then rank 0's steps per window.
  long stepsPerWindow(const std::function<void()>& step) {
    for (long i = 0; i < o_.warmup; ++i) step();
    if (o_.steps > 0) return o_.steps;
    // Timed after the warm-up: the first steps negotiate every name anew
    // and would make the windows far shorter than asked.
    const long calibrate = std::max<long>(1, o_.warmup);
    const double t0 = now();
    for (long i = 0; i < calibrate; ++i) step();
    const double perStep = (now() - t0) / static_cast<double>(calibrate);
    const double want = std::ceil(o_.windowTime / std::max(perStep, 1e-9));
    return static_cast<long>(
        sync_.fromRank0(std::max<int64_t>(1, static_cast<int64_t>(std::min(want, 1e7)))));
  }

  // One timed window; returns steps/s (max time over ranks).
  double window(long steps, const std::function<void()>& step) {
    sync_.barrier();
    const double t0 = now();
    for (long i = 0; i < steps; ++i) step();
    const double seconds = sync_.max(now() - t0);
    return seconds > 0 ? steps / seconds : 0;
  }

  // ---- mode runtime --------------------------------------------------------

  int runRuntime() {
    const auto specs = workloadTensors(o_.workload);
    // Backward order: the last layer's gradient is ready first.
    std::vector<Tensor> tensors;
    for (auto it = specs.rbegin(); it != specs.rend(); ++it) {
      tensors.push_back({it->name, it->shape, std::vector<float>(it->elements())});
    }
    std::vector<runtime::OpRequest> requests;
    size_t bytes = 0;
    for (auto& t : tensors) {
      runtime::OpRequest r;
      r.spec.name = t.name;
      r.spec.kind = runtime::OpKind::kAllreduce;
      r.spec.dtype = DataType::kFloat32;
      r.spec.op = ReduceOp::kAverage;
      r.spec.shape = t.shape;
      r.input = r.output = t.data.data();
      requests.push_back(std::move(r));
      bytes += t.data.size() * sizeof(float);
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      fill(tensors[i].data.data(), tensors[i].data.size(), rank_, i);
    }

    const runtime::RuntimeOptions ro = runtimeOptions();
    runtime::Runtime rt(comm_, ro);
    sync_.use(&rt);
    std::vector<runtime::HandlePtr> handles(requests.size());
    double submitSeconds = 0;
    const double sleepMs = o_.computeMs + (rank_ == o_.slowRank ? o_.slowMs : 0.0);
    auto step = [&] {
      if (sleepMs > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleepMs));
      }
      const double t0 = now();
      for (size_t i = 0; i < requests.size(); ++i) handles[i] = rt.enqueue(requests[i]);
      submitSeconds += now() - t0;
      if (o_.waitLastFirst) {
        for (auto it = handles.rbegin(); it != handles.rend(); ++it) (*it)->wait();
      } else {
        for (auto& h : handles) h->wait();
      }
    };

    Result res;
    res.name = "runtime";
    res.tensors = tensors.size();
    res.bytes = bytes;
    res.steps = stepsPerWindow(step);
    for (int w = 0; w < o_.windows; ++w) {
      submitSeconds = 0;
      res.perSecond.push_back(window(res.steps, step));
      res.submitMs.push_back(submitSeconds * 1e3 / res.steps);
    }

    // Check: fresh inputs, one step, every element.
    for (size_t i = 0; i < tensors.size(); ++i) {
      fill(tensors[i].data.data(), tensors[i].data.size(), rank_, i);
    }
    step();
    std::string bad;
    for (size_t i = 0; i < tensors.size() && bad.empty(); ++i) {
      bad = verify(tensors[i].data.data(), tensors[i].data.size(), size_, i,
                   tensors[i].name);
    }
    reportBad(bad);
    const bool ok = sync_.allOk(bad.empty());
    res.check = ok ? "ok" : "FAIL";
    sync_.use(nullptr);
    rt.shutdown();
    print(res, ro);
    return ok ? 0 : 1;
  }

  // ---- mode direct ---------------------------------------------------------

  int runDirect() {
    size_t total = 0;
    for (const auto& t : resnet50Parameters()) total += static_cast<size_t>(t.elements());
    std::vector<float> big(o_.bigBytes / sizeof(float)), whole(total);
    const runtime::RuntimeOptions ro = runtimeOptions();

    auto direct = [&](std::vector<float>& buf) {
      AllreduceOptions a;
      a.send = a.recv = buf.data();
      a.count = buf.size();
      a.dtype = DataType::kFloat32;
      a.op = ReduceOp::kAverage;
      comm_->allreduce(a);
    };
    std::unique_ptr<runtime::Runtime> rt;
    auto startRuntime = [&] {
      rt = std::make_unique<runtime::Runtime>(comm_, ro);
      sync_.use(rt.get());
    };
    auto stopRuntime = [&] {
      sync_.use(nullptr);
      rt->shutdown();
      rt.reset();
    };
    auto throughRuntime = [&] {
      runtime::OpRequest r;
      r.spec.name = "big";
      r.spec.op = ReduceOp::kAverage;
      r.spec.shape = {static_cast<int64_t>(big.size())};
      r.input = r.output = big.data();
      rt->enqueue(std::move(r))->wait();
    };

    auto result = [](const char* name, size_t bytes) {
      Result r;
      r.name = name;
      r.tensors = 1;
      r.bytes = bytes;
      return r;
    };
    const std::string label =
        o_.bigBytes == kBigBytes ? "64M" : std::to_string(o_.bigBytes);
    Result d64 = result(("direct-" + label).c_str(), o_.bigBytes);
    Result r64 = result(("runtime-" + label).c_str(), o_.bigBytes);
    Result dTotal = result("direct-total", total * sizeof(float));
    Result copy = result("copy-total", total * sizeof(float));
    std::vector<std::vector<float>> parts;
    for (const auto& t : resnet50Parameters()) parts.emplace_back(t.elements());
    copy.tensors = parts.size();
    auto stepCopy = [&] {
      size_t at = 0;
      for (const auto& p : parts) {
        std::memcpy(whole.data() + at, p.data(), p.size() * sizeof(float));
        at += p.size();
      }
      at = 0;
      for (auto& p : parts) {
        std::memcpy(p.data(), whole.data() + at, p.size() * sizeof(float));
        at += p.size();
      }
    };
    auto stepDirect64 = [&] { direct(big); };
    auto stepTotal = [&] { direct(whole); };
    size_t smallTotal = 0;
    std::vector<std::vector<float>> smalls;
    for (const auto& t : smallTensors()) {
      smalls.emplace_back(t.elements());
      smallTotal += static_cast<size_t>(t.elements());
    }
    std::vector<float> smallWhole(smallTotal);
    Result dSmall = result("direct-small", smallTotal * sizeof(float));
    dSmall.tensors = smalls.size();
    Result dSmallTotal = result("direct-small-total", smallTotal * sizeof(float));
    auto stepSmall = [&] {
      for (auto& t : smalls) direct(t);
    };
    auto stepSmallTotal = [&] { direct(smallWhole); };
    Result dSmallSeg = result("direct-small-segmented", smallTotal * sizeof(float));
    dSmallSeg.tensors = smalls.size();
    std::vector<AllreduceSegment> smallSegments;
    for (auto& t : smalls) smallSegments.push_back({t.data(), t.data(), t.size()});
    auto stepSmallSeg = [&] {
      AllreduceOptions a;
      a.count = smallTotal;
      a.dtype = DataType::kFloat32;
      a.op = ReduceOp::kAverage;
      a.segments = smallSegments.data();
      a.segmentCount = smallSegments.size();
      comm_->allreduce(a);
    };
    d64.steps = stepsPerWindow(stepDirect64);
    dTotal.steps = stepsPerWindow(stepTotal);
    copy.steps = stepsPerWindow(stepCopy);
    dSmall.steps = stepsPerWindow(stepSmall);
    dSmallTotal.steps = stepsPerWindow(stepSmallTotal);
    dSmallSeg.steps = stepsPerWindow(stepSmallSeg);
    startRuntime();
    r64.steps = stepsPerWindow(throughRuntime);
    stopRuntime();
    for (int w = 0; w < o_.windows; ++w) {
      d64.perSecond.push_back(window(d64.steps, stepDirect64));
      dTotal.perSecond.push_back(window(dTotal.steps, stepTotal));
      copy.perSecond.push_back(window(copy.steps, stepCopy));
      dSmall.perSecond.push_back(window(dSmall.steps, stepSmall));
      dSmallTotal.perSecond.push_back(window(dSmallTotal.steps, stepSmallTotal));
      dSmallSeg.perSecond.push_back(window(dSmallSeg.steps, stepSmallSeg));
      startRuntime();
      r64.perSecond.push_back(window(r64.steps, throughRuntime));
      stopRuntime();
    }

    // Checks, one per case.
    bool ok = true;
    auto check = [&](Result& res, std::vector<float>& buf, const std::function<void()>& f,
                     size_t tensor) {
      fill(buf.data(), buf.size(), rank_, tensor);
      f();
      const std::string bad = verify(buf.data(), buf.size(), size_, tensor, res.name);
      reportBad(bad);
      const bool good = sync_.allOk(bad.empty());
      res.check = good ? "ok" : "FAIL";
      ok = ok && good;
    };
    check(d64, big, stepDirect64, 1);
    check(dTotal, whole, stepTotal, 2);
    check(dSmallTotal, smallWhole, stepSmallTotal, 4);
    // (b)'s tensors, each filled with its own index's values.
    auto checkSmalls = [&](Result& res, const std::function<void()>& f) {
      for (size_t i = 0; i < smalls.size(); ++i)
        fill(smalls[i].data(), smalls[i].size(), rank_, i);
      f();
      std::string bad;
      for (size_t i = 0; i < smalls.size() && bad.empty(); ++i) {
        bad = verify(smalls[i].data(), smalls[i].size(), size_, i, res.name);
      }
      reportBad(bad);
      const bool good = sync_.allOk(bad.empty());
      res.check = good ? "ok" : "FAIL";
      ok = ok && good;
    };
    checkSmalls(dSmall, stepSmall);
    checkSmalls(dSmallSeg, stepSmallSeg);
    {
      for (size_t i = 0; i < parts.size(); ++i)
        fill(parts[i].data(), parts[i].size(), rank_, i);
      std::fill(whole.begin(), whole.end(), -1.0f);
      stepCopy();
      std::string bad;
      for (size_t i = 0; i < parts.size() && bad.empty(); ++i) {
        for (size_t j = 0; j < parts[i].size() && bad.empty(); ++j) {
          if (parts[i][j] != inputValue(rank_, i, j)) {
            bad = "copy-total: tensor " + std::to_string(i) + " index " +
                  std::to_string(j) + " did not come back";
          }
        }
      }
      reportBad(bad);
      const bool good = sync_.allOk(bad.empty());
      copy.check = good ? "ok" : "FAIL";
      ok = ok && good;
    }
    startRuntime();
    check(r64, big, throughRuntime, 3);
    stopRuntime();
    print(d64, ro);
    print(r64, ro);
    print(dTotal, ro);
    print(copy, ro);
    print(dSmall, ro);
    print(dSmallTotal, ro);
    print(dSmallSeg, ro);
    return ok ? 0 : 1;
  }

  // ---- output --------------------------------------------------------------

  void reportBad(const std::string& bad) const {
    if (bad.empty()) return;
    std::ostringstream os;
    os << "kolo-fusion-bench: rank " << rank_ << ": " << bad << "\n";
    std::cerr << os.str() << std::flush;
  }

  void print(const Result& r, const runtime::RuntimeOptions& ro) const {
    if (rank_ != 0) return;
    const double med = median(r.perSecond);
    const bool isRuntime = r.name.rfind("runtime", 0) == 0;
    std::ostringstream os;
    char buf[64];
    auto num = [&](double v, int digits) {
      std::snprintf(buf, sizeof buf, "%.*f", digits, v);
      return std::string(buf);
    };
    if (o_.json) {
      os << "{\"tool\":\"kolo-fusion-bench\",\"mode\":\"" << o_.mode
         << "\",\"workload\":\""
         << (o_.mode == "direct" ? "-" : std::string(toString(o_.workload)))
         << "\",\"case\":\"" << r.name << "\",\"ranks\":" << size_ << ",\"transport\":\""
         << settings_.transport
         << "\",\"fusion_threshold\":" << (isRuntime ? ro.fusionThresholdBytes : -1)
         << ",\"cycle_ms\":" << (isRuntime ? num(ro.cycleTimeMs, 3) : "-1")
         << ",\"tensors\":" << r.tensors << ",\"bytes\":" << r.bytes
         << ",\"steps\":" << r.steps << ",\"windows\":[";
      for (size_t i = 0; i < r.perSecond.size(); ++i) {
        os << (i ? "," : "") << num(r.perSecond[i], 3);
      }
      os << "],\"steps_per_s\":" << num(med, 3)
         << ",\"step_ms\":" << num(med > 0 ? 1e3 / med : 0, 4);
      if (!r.submitMs.empty()) os << ",\"submit_ms\":" << num(median(r.submitMs), 4);
      os << ",\"check\":\"" << r.check << "\"}\n";
    } else {
      os << "# kolo-fusion-bench " << o_.mode << " " << r.name;
      if (o_.mode == "runtime") os << " workload " << toString(o_.workload);
      os << ": " << size_ << " ranks, " << r.tensors << " tensors, " << r.bytes
         << " bytes";
      if (isRuntime) {
        os << ", fusion threshold " << ro.fusionThresholdBytes << " B, cycle "
           << ro.cycleTimeMs << " ms";
      }
      os << "\n#   windows of " << r.steps << " steps (steps/s):";
      for (double v : r.perSecond) os << " " << num(v, 2);
      os << "\n  " << r.name << "  steps/s " << num(med, 2) << "  step "
         << num(med > 0 ? 1e3 / med : 0, 3) << " ms";
      if (!r.submitMs.empty()) os << "  submit " << num(median(r.submitMs), 3) << " ms";
      os << "  check " << r.check << "\n";
    }
    std::cout << os.str() << std::flush;
  }

  const Options& o_;
  const Settings& settings_;
  std::shared_ptr<Communicator> comm_;
  const int rank_;
  const int size_;
  Sync sync_;
};

int printTensors(Workload w) {
  const auto specs = workloadTensors(w);
  int64_t total = 0;
  for (const auto& t : specs) total += t.elements();
  std::cout << "# " << toString(w) << ": " << specs.size() << " tensors, " << total
            << " float32 values, in submission (backward) order: count name shape\n";
  for (auto it = specs.rbegin(); it != specs.rend(); ++it) {
    std::cout << it->elements() << " " << it->name << " [";
    for (size_t i = 0; i < it->shape.size(); ++i) {
      std::cout << (i ? ", " : "") << it->shape[i];
    }
    std::cout << "]\n";
  }
  return 0;
}

int usageFailure(const std::string& what) {
  std::cerr << "kolo-fusion-bench: " << what
            << "\nrun 'kolo-fusion-bench --help' for the options\n";
  return 2;
}

int benchMain(int argc, char** argv) {
  Options options;
  Settings settings;
  try {
    options = parseOptions(argc, argv);
    if (options.help) {
      std::cout << kUsage;
      return 0;
    }
    if (options.printTensors) return printTensors(*options.printTensors);
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
    FusionBench bench(options, settings, comm);
    return bench.run();
  } catch (const Error& e) {
    std::ostringstream os;
    os << "kolo-fusion-bench: ";
    if (rank >= 0) os << "rank " << rank << ": ";
    os << toString(e.code()) << ": " << e.what() << "\n";
    std::cerr << os.str() << std::flush;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kolo-fusion-bench: rank " << rank << ": " << e.what() << "\n"
              << std::flush;
    return 1;
  }
}

}  // namespace
}  // namespace kolo::bench

int main(int argc, char** argv) {
  return kolo::bench::benchMain(argc, argv);
}

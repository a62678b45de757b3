// The eager schedule's replay (eager_schedule.h): a fluid simulation of
// the transfers through the hosts' links.
//
// Between events every flow moves at a constant rate, set by max-min
// fairness (progressive filling: the link direction whose remaining
// capacity per unfrozen flow is the smallest fixes its flows at that
// share, which is taken off the other direction they cross; repeat). An
// event is a flow's last byte: the receiver's message is in, the sender's
// send done; each rank then runs on through every step whose send and
// receive are both complete, posting the next step's send as it enters it.
// A transfer inside a host takes its bytes times intraSecondsPerByte (the
// transport's copy on the cores the ranks share), off the links.
#include "predict/eager_schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace kolo::predict {
namespace {

struct Timer {  // a transfer inside a host, done at `at`
  double at = 0;
  int src = 0, dst = 0;
};

struct Flow {
  int src = 0, dst = 0;
  int up = 0, down = 0;  // link indices: host h's up = h, down = H + h
  double left = 0;
  double rate = 0;
};

class Replay {
 public:
  Replay(const EagerProgram& program, int steps, const std::vector<int>& hostOf,
         double bytesPerSecond, double intraSecondsPerByte)
      : program_(program),
        hostOf_(hostOf),
        capacity_(bytesPerSecond),
        intra_(intraSecondsPerByte),
        hosts_(hostOf.empty() ? 1 : *std::max_element(hostOf.begin(), hostOf.end()) + 1),
        pc_(program.size(), 0),
        sending_(program.size(), false),
        end_(static_cast<size_t>(steps), 0.0) {}

  std::vector<double> run() {
    for (size_t r = 0; r < program_.size(); ++r) enter(static_cast<int>(r));
    drain();
    while (!flows_.empty() || !timers_.empty()) {
      share();
      double dt = std::numeric_limits<double>::infinity();
      for (const Flow& f : flows_) dt = std::min(dt, f.left / f.rate);
      for (const Timer& t : timers_) dt = std::min(dt, t.at - now_);
      dt = std::max(0.0, dt);
      now_ += dt;
      std::vector<Flow> done;
      for (Flow& f : flows_) f.left -= f.rate * dt;
      auto finished = [](const Flow& f) { return f.left <= 1e-6; };  // bytes
      for (const Flow& f : flows_) {
        if (finished(f)) done.push_back(f);
      }
      flows_.erase(std::remove_if(flows_.begin(), flows_.end(), finished), flows_.end());
      for (const Flow& f : done) arrive(f.src, f.dst);
      std::vector<Timer> due;
      for (const Timer& t : timers_) {
        if (t.at <= now_) due.push_back(t);
      }
      std::erase_if(timers_, [&](const Timer& t) { return t.at <= now_; });
      for (const Timer& t : due) arrive(t.src, t.dst);
      drain();
    }
    return end_;
  }

 private:
  // Rank r enters its current step: its send goes out.
  void enter(int r) {
    if (pc_[r] >= program_[r].size()) return;
    const EagerOp& op = program_[r][pc_[r]];
    if (op.sendTo < 0) {
      ready_.push_back(r);
      return;
    }
    sending_[r] = true;
    if (op.sendBytes <= 0) {
      arrive(r, op.sendTo);
      return;
    }
    if (hostOf_[r] == hostOf_[op.sendTo]) {  // the transport's copy, off the link
      timers_.push_back({now_ + op.sendBytes * intra_, r, op.sendTo});
      return;
    }
    flows_.push_back(
        {r, op.sendTo, hostOf_[r], hosts_ + hostOf_[op.sendTo], op.sendBytes, 0});
  }

  void arrive(int src, int dst) {
    ++arrived_[{src, dst}];
    sending_[src] = false;
    ready_.push_back(src);
    ready_.push_back(dst);
  }

  // Every rank that may finish steps now does, and enters its next.
  void drain() {
    while (!ready_.empty()) {
      const int r = ready_.back();
      ready_.pop_back();
      while (pc_[r] < program_[r].size() && !sending_[r]) {
        const EagerOp& op = program_[r][pc_[r]];
        if (op.recvFrom >= 0) {
          int& used = received_[{op.recvFrom, r}];
          if (arrived_[{op.recvFrom, r}] <= used) break;
          ++used;
        }
        end_[op.step] = std::max(end_[op.step], now_);
        ++pc_[r];
        if (pc_[r] < program_[r].size() && program_[r][pc_[r]].sendTo >= 0) {
          enter(r);
        }
      }
    }
  }

  // Max-min fair rates (progressive filling).
  void share() {
    std::vector<double> left(static_cast<size_t>(2 * hosts_), capacity_);
    std::vector<bool> fixed(flows_.size(), false);
    size_t open = flows_.size();
    while (open > 0) {
      std::vector<int> count(left.size(), 0);
      for (size_t i = 0; i < flows_.size(); ++i) {
        if (fixed[i]) continue;
        ++count[flows_[i].up];
        ++count[flows_[i].down];
      }
      int bottleneck = -1;
      double best = std::numeric_limits<double>::infinity();
      for (size_t l = 0; l < left.size(); ++l) {
        if (count[l] > 0 && left[l] / count[l] < best) {
          best = left[l] / count[l];
          bottleneck = static_cast<int>(l);
        }
      }
      for (size_t i = 0; i < flows_.size(); ++i) {
        Flow& f = flows_[i];
        if (fixed[i] || (f.up != bottleneck && f.down != bottleneck)) continue;
        f.rate = std::max(best, capacity_ * 1e-9);
        left[f.up] = std::max(0.0, left[f.up] - best);
        left[f.down] = std::max(0.0, left[f.down] - best);
        fixed[i] = true;
        --open;
      }
    }
  }

  const EagerProgram& program_;
  const std::vector<int>& hostOf_;
  double capacity_;
  double intra_;
  int hosts_;
  std::vector<size_t> pc_;
  std::vector<bool> sending_;
  std::vector<double> end_;
  std::vector<Flow> flows_;
  std::vector<Timer> timers_;
  std::vector<int> ready_;
  std::map<std::pair<int, int>, int> arrived_, received_;
  double now_ = 0;
};

}  // namespace

std::vector<double> eagerStepExtra(const EagerProgram& program, int steps,
                                   const std::vector<int>& hostOf, double bytesPerSecond,
                                   double intraSecondsPerByte) {
  const std::vector<double> ends =
      Replay(program, steps, hostOf, bytesPerSecond, intraSecondsPerByte).run();
  // Each step's own time: its busiest link direction, or its longest copy
  // inside a host (the step-by-step walk counts both already).
  const int hosts =
      hostOf.empty() ? 1 : *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  std::vector<std::vector<double>> load(
      static_cast<size_t>(steps), std::vector<double>(static_cast<size_t>(2 * hosts), 0));
  std::vector<double> copy(static_cast<size_t>(steps),
                           0);  // the longest copy inside a host
  for (size_t r = 0; r < program.size(); ++r) {
    for (const EagerOp& op : program[r]) {
      if (op.sendTo < 0) continue;
      if (hostOf[r] == hostOf[op.sendTo]) {
        copy[op.step] = std::max(copy[op.step], op.sendBytes * intraSecondsPerByte);
        continue;
      }
      load[op.step][hostOf[r]] += op.sendBytes;
      load[op.step][hosts + hostOf[op.sendTo]] += op.sendBytes;
    }
  }
  std::vector<double> extra(static_cast<size_t>(steps), 0);
  double before = 0;
  for (int s = 0; s < steps; ++s) {
    const double own = std::max(
        copy[s], *std::max_element(load[s].begin(), load[s].end()) / bytesPerSecond);
    const double end = std::max(before, ends[s]);
    extra[s] = std::max(0.0, end - before - own);
    before = end;
  }
  return extra;
}

}  // namespace kolo::predict

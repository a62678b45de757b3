// What the subcommands of kolo-predict share: the argument reader, the
// usage error and the subcommand signature.
//
// A subcommand is `int run<Name>(Args& args, std::ostream& out)`: it reads
// its flags from `args` (Args::finish() rejects anything left over), writes
// its result to `out` and returns the exit status. Bad flags throw
// UsageError naming the flag and the value (exit 2); other failures throw
// std::exception with a message naming what failed (exit 1).
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "predict/constants.h"

namespace kolo::predict::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  Args(std::string command, std::vector<std::string> argv)
      : command_(std::move(command)),
        argv_(std::move(argv)),
        used_(argv_.size(), false) {}

  const std::string& command() const { return command_; }
  // The value of `--flag V` or `--flag=V` (the last one when repeated);
  // nullopt when absent; UsageError when the flag has no value.
  std::optional<std::string> value(std::string_view flag);
  // Every value of a repeatable flag, in order.
  std::vector<std::string> values(std::string_view flag);
  // Whether the bare flag `--name` is present.
  bool flag(std::string_view name);
  // The value of a flag that must be given.
  std::string required(std::string_view flag);
  // Throws UsageError naming the first argument no reader took.
  void finish() const;

 private:
  std::string command_;
  std::vector<std::string> argv_;
  std::vector<bool> used_;
};

// A whole number flag in [lo, hi]; UsageError naming the flag and value.
long parseWhole(std::string_view flag, std::string_view text, long lo, long hi);

// --link-burst SIZE and --spin TIME (the links' tc tbf burst, the job's
// KOLO_SPIN_US) into `linkBurst` and `spinSeconds` when given; UsageError
// naming the flag on a bad value.
void readLinkTiming(Args& args, double& linkBurst, double& spinSeconds);

// The constants a subcommand works with: --constants F, else the file
// KOLO_PREDICT_CONSTANTS names, else the built-in ones.
Constants constantsFor(Args& args);

// The subcommands (one file each).
int runAllreduce(Args& args, std::ostream& out);  // allreduce_command.cc
int runCalibrate(Args& args, std::ostream& out);  // calibrate_command.cc
int runTrain(Args& args, std::ostream& out);      // train_command.cc

}  // namespace kolo::predict::cli

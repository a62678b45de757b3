// kolo-predict: the scale model on the command line (docs/scale.md).
//
//   kolo-predict calibrate [--transport shm|tcp|mpi] [-H hosts] [--out F] [--from CSV]
//   kolo-predict allreduce --ranks N --ranks-per-host k --link 25gbit --latency 2us
//                          --bytes 64M [--algorithm A] [--constants F] [--json]
//   kolo-predict train ...
//
// Each subcommand lives in its own file (predict_cli.h); a new one is one
// line in kSubcommands below.
#include <iostream>
#include <string>
#include <vector>

#include "predict_cli.h"

namespace {

using kolo::predict::cli::Args;

struct Subcommand {
  const char* name;
  int (*run)(Args&, std::ostream&);
  const char* summary;
};

const Subcommand kSubcommands[] = {
    {"calibrate", kolo::predict::cli::runCalibrate,
     "run short kolo-bench sweeps (or read --from CSV) and fit the constants to a "
     "JSON file"},
    {"allreduce", kolo::predict::cli::runAllreduce,
     "predicted allreduce time per algorithm, and the one kolo's selection picks"},
    {"train", kolo::predict::cli::runTrain,
     "training step time, scaling efficiency, overlap with backward and a suggested "
     "fusion threshold (allreduce, sync-ps, downpour); --plot to 4096 ranks"},
};

void usage(std::ostream& os) {
  os << "usage: kolo-predict COMMAND [options]   (kolo-predict COMMAND --help)\n\n"
        "Predicts kolo's collective and training times from measured constants "
        "(docs/scale.md).\n\n";
  for (const auto& s : kSubcommands)
    os << "  " << s.name << "\n      " << s.summary << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  for (const auto& s : kSubcommands) {
    if (command != s.name) continue;
    Args args(command, std::vector<std::string>(argv + 2, argv + argc));
    try {
      return s.run(args, std::cout);
    } catch (const kolo::predict::cli::UsageError& e) {
      std::cerr << "kolo-predict " << command << ": " << e.what()
                << "\nrun 'kolo-predict " << command << " --help' for the options\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << "kolo-predict " << command << ": " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "kolo-predict: unknown command '" << command << "'\n";
  usage(std::cerr);
  return 2;
}

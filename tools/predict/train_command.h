// `kolo-predict train`: the training step, its scaling efficiency, the
// overlap of communication with backward, a suggested fusion threshold, and
// the efficiency curve (--plot). docs/scale.md, "kolo-predict train".
#pragma once

namespace kolo::predict::cli {

// argv[0] is the subcommand's name ("train"); the flags follow. Prints the
// answer on stdout (--json: one JSON object). Returns 0, or 2 with a
// message on stderr naming the bad flag or value.
int runTrain(int argc, char** argv);

}  // namespace kolo::predict::cli

// `kolorun --mpi`: the same job, launched by the machine's mpirun.
//
// mpirunCommand() translates kolorun's options to Open MPI's mpirun flags:
//   -np N                      -np N
//   -H h:s,... / --hostfile F  -H h:s,... / --hostfile F
//   no host list               --oversubscribe (kolorun runs any N here)
//   --oversubscribe            --oversubscribe
//   --ssh-command CMD, -p, -i  --mca plm_rsh_agent 'CMD -p PORT -i FILE'
//   --network-interface IF     --mca btl_tcp_if_include IF
//                              --mca oob_tcp_if_include IF, -x KOLO_IFACE=IF
//   --output-dir DIR           --output-filename DIR
//   --timeout S                --timeout ceil(S)
//   -x NAME[=VALUE]            -x NAME[=VALUE]
//   tuning flags               -x KOLO_NAME=VALUE (they are exports)
//   (every KOLO_*, HOROVOD_*)  -x NAME
//   --mpi-args ARGS            ARGS, last before the command
//   --bind-to X                --bind-to X --map-by slot (default none: kolo
//                              ranks run their own threads)
//   --binding-args ARGS        ARGS instead of those two
// plus
// --tag-output (mpirun's "[job,rank]<stdout>:" prefix stands in for
// kolorun's "[rank]"); as root, --allow-run-as-root. The ranks then find
// their layout in OMPI_COMM_WORLD_* and use the MPI engine where kolo was
// built with MPI (docs/launching.md).
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace kolo::kolorun {

// `environment`: NAME=VALUE entries (kolorun's), searched for those that
// isForwarded() picks.
// `asRoot`: add --allow-run-as-root.
std::vector<std::string> mpirunCommand(const LaunchOptions& options,
                                       const std::vector<std::string>& environment,
                                       bool asRoot);

// Replaces kolorun with mpirun (execvp). Returns only on failure, with
// kolorun's exit code (127: mpirun not found) after printing why.
int execMpirun(const std::vector<std::string>& argv, bool verbose);

}  // namespace kolo::kolorun

#!/bin/bash
# A stand-in for ssh as OpenMPI's launch agent: runs the remote command line
# on this machine, whatever host it names. With it,
#   mpirun --mca plm_rsh_agent tests/mpi/local_rsh.sh -H nodea:2,nodeb:2 ...
# starts one OpenMPI daemon per named host, all here, so MPI sees as many
# nodes as hosts (MPI_Comm_split_type splits by daemon) on one machine.
# Called as ssh is: local_rsh.sh [-options...] HOST COMMAND-LINE...
set -euo pipefail
while [[ $# -gt 0 && "$1" == -* ]]; do
  shift
done
if [[ $# -lt 2 ]]; then
  echo "usage: $0 [-options] HOST COMMAND..." >&2
  exit 2
fi
shift  # the host
exec bash -c "$*"

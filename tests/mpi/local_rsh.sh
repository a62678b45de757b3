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
host=$1
shift
# Each pretend host's daemon keeps its session directory under a base of
# its own: OpenMPI's daemons on one machine otherwise create the job's
# directory (<tmp>/ompi.<hostname>.<uid>/jf.<job>) at the same moment, and
# the loser of that race fails with "mkdir ... File exists" (orte_init
# failed, exit 213; seen in about 1 run in 10 of a 2-host job).
base="${TMPDIR:-/tmp}/kolo-local-rsh.$(id -u).${host//[^A-Za-z0-9_.-]/_}"
mkdir -p "$base"
export OMPI_MCA_orte_tmpdir_base="$base"
exec bash -c "$*"

#!/usr/bin/env bash
# The allreduce grid (ring and hier, several dtypes, ops and sizes up to 64M)
# on 3 hosts x 2 ranks, launched by OpenMPI's mpirun from the root namespace
# with its ssh agent (plm_rsh_agent) replaced by netns_ssh, which enters the
# hosts' network namespaces.
# - kolo built with MPI (ranks run under the MPI engine): the whole grid with
#   KOLO_TRANSPORT=auto (shm inside a host, mpi between hosts; the store
#   address found by rank 0 and broadcast by MPI), part of it with
#   KOLO_TRANSPORT=tcp and with KOLO_TRANSPORT=mpi (one transport to every
#   peer).
# - kolo built without MPI: the whole grid with auto (shm inside a host, tcp
#   between hosts, meeting through a TCP store hosted by rank 0 named by
#   KOLO_RENDEZVOUS), part of it with KOLO_TRANSPORT=tcp.
# Every rank must report the expected transport in its start-up log line.
#
#   tests/multihost/mpirun_allreduce_test.sh BUILD_DIR
#
# Exit status: 0 pass, 1 fail, 77 skipped (not root, no ip netns, no mpirun).
set -euo pipefail

# shellcheck source=tests/multihost/test_lib.sh
source "$(dirname "$0")/test_lib.sh" "${1:-}"

if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP: mpirun (OpenMPI) is not installed" >&2
  exit 77
fi

netns_up 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT="$NETNS_WORK/out"
mkdir -p "$OUT"

# mh_mpirun NAME ENV... -- BENCH-ARGS...: runs kolo-bench on 6 ranks,
# output in $OUT/NAME.log.
mh_mpirun() {
  local name="$1" rc=0
  shift
  local envs=()
  while [ "$1" != "--" ]; do
    envs+=("$1")
    shift
  done
  shift
  local log="$OUT/$name.log"
  local xs=()
  local e
  for e in "${envs[@]}"; do xs+=(-x "$e"); done
  # plm_rsh_no_tree_spawn: mpirun starts every orted itself (through the
  # agent), not through other hosts. The interface includes keep OpenMPI's
  # own traffic on the hosts' subnet. mpirun sets no PATH for the orted it
  # starts: the agent passes this environment through, as ssh with a login
  # shell would give the real one.
  timeout 300 mpirun -np 6 -H "$(netns_hosts 2)" \
    --mca plm_rsh_agent "$NETNS_SSH" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp \
    --mca btl_tcp_if_include "$NETNS_SUBNET.0/24" \
    --mca oob_tcp_if_include "$NETNS_SUBNET.0/24" \
    "${xs[@]}" "$BENCH" -n 2 -w 1 "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    mh_fail "$name: mpirun exited $rc"
    tail -20 "$log" | sed 's/^/    /' >&2
  fi
}

port_base=$((20000 + ($$ % 2000) * 10))
run=0
# run_grid MODE EXPECTED LINES...: runs the grid lines LINES (indexes into
# MH_GRID) for both algorithms with KOLO_TRANSPORT=MODE; every rank must
# report transport EXPECTED. Without the MPI engine kolo meets through a TCP
# store hosted by rank 0 (KOLO_RENDEZVOUS, host 1); under the engine rank 0
# finds its own address and MPI broadcasts it.
run_grid() {
  local mode="$1" expected="$2" algo line args name log
  shift 2
  for algo in "${MH_ALGOS[@]}"; do
    for line in "$@"; do
      args="${MH_GRID[line]}"
      run=$((run + 1))
      name="mpirun-$mode-$algo-$run"
      mh_log "$name: KOLO_TRANSPORT=$mode kolo-bench -a $algo $args"
      local envs=(KOLO_TRANSPORT="$mode" KOLO_LOG_LEVEL=info KOLO_TIMEOUT=60)
      if [ "$ENGINE" = 0 ]; then
        envs+=(KOLO_RENDEZVOUS="tcp://${NETNS_IPS[1]}:$((port_base + run))")
      fi
      # shellcheck disable=SC2086
      mh_mpirun "$name" "${envs[@]}" -- -a "$algo" $args
      log="$OUT/$name.log"
      mh_check_bench "$name" "$log" "$algo"
      mh_check_layout "$name" "$log" 3 2
      mh_check_transport "$name" "$log" "$expected"
    done
  done
}

ALL_LINES=()
for i in "${!MH_GRID[@]}"; do ALL_LINES+=("$i"); done
if mh_has_mpi_engine; then
  ENGINE=1
  mh_log "MPI engine: auto is shm inside a host and mpi between hosts"
  run_grid auto "shm\\+mpi, engine mpi" "${ALL_LINES[@]}"
  run_grid tcp "tcp, engine mpi" 0 2
  run_grid mpi "mpi, engine mpi" 0 1 4
else
  ENGINE=0
  mh_log "no MPI engine in this build: auto is shm inside a host and tcp between"
  run_grid auto "shm\\+tcp" "${ALL_LINES[@]}"
  run_grid tcp "tcp" 0 2
fi
mh_assert_no_pids "after the grid"
mh_finish

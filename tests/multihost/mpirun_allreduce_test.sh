#!/usr/bin/env bash
# The allreduce grid (ring and hier, several dtypes, ops and sizes up to 64M)
# on 3 hosts x 2 ranks, launched by OpenMPI's mpirun from the root namespace
# with its ssh agent (plm_rsh_agent) replaced by netns_ssh, which enters the
# hosts' network namespaces. kolo meets through a TCP store hosted by rank 0
# (KOLO_RENDEZVOUS) and uses shm inside a host and tcp between hosts. When
# this build's KOLO_TRANSPORT accepts mpi, the grid runs a second time with
# KOLO_TRANSPORT=mpi (MPI carrying the traffic between hosts).
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
run_grid() {
  local transport="$1" i=0 algo args name log
  for algo in "${MH_ALGOS[@]}"; do
    for args in "${MH_GRID[@]}"; do
      i=$((i + 1))
      name="mpirun-$transport-$algo-$i"
      mh_log "$name: kolo-bench -a $algo $args"
      local envs=(KOLO_TRANSPORT="$transport" KOLO_LOG_LEVEL=info KOLO_TIMEOUT=60)
      if [ "$transport" != mpi ]; then
        # Rank 0 (on host 1) hosts the store; a fresh port per run.
        envs+=(KOLO_RENDEZVOUS="tcp://${NETNS_IPS[1]}:$((port_base + i))")
      fi
      # shellcheck disable=SC2086
      mh_mpirun "$name" "${envs[@]}" -- -a "$algo" $args
      log="$OUT/$name.log"
      mh_check_bench "$name" "$log" "$algo"
      mh_check_layout "$name" "$log" 3 2
      if [ "$transport" = mpi ] && ! grep -q "transport .*mpi" "$log"; then
        mh_fail "$name: KOLO_TRANSPORT=mpi but the ranks did not report an mpi transport"
      fi
    done
  done
}

run_grid auto
if mh_transport_accepts_mpi; then
  run_grid mpi
else
  mh_log "KOLO_TRANSPORT does not accept mpi in this build: mpi engine not run"
fi
mh_assert_no_pids "after the grid"
mh_finish

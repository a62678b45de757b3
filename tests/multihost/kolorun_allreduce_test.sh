#!/usr/bin/env bash
# The allreduce grid (ring and hier, several dtypes, ops and sizes up to 64M)
# on 3 hosts x 2 ranks, launched by kolorun -H from the root namespace (the
# "login node") with --ssh-command netns_ssh entering each host's network
# namespace. Ranks use shm inside a host and tcp between hosts; a few runs
# also force tcp inside a host (KOLO_TRANSPORT=tcp), one reads the hosts
# from --hostfile with --network-interface eth0, and one leaves the
# algorithm to the selection table. Every rank's output is also checked in
# --output-dir.
#
#   tests/multihost/kolorun_allreduce_test.sh BUILD_DIR
#
# Exit status: 0 pass, 1 fail, 77 skipped (not root or no ip netns).
set -euo pipefail

# shellcheck source=tests/multihost/test_lib.sh
source "$(dirname "$0")/test_lib.sh" "${1:-}"
mh_require_kolorun_hosts

netns_up 3
OUT="$NETNS_WORK/out"
mkdir -p "$OUT"
HOSTS="$(netns_hosts 2)"
PLACE=(-H "$HOSTS") # how mh_kolorun places the ranks

# mh_kolorun NAME ENV... -- BENCH-ARGS...: runs kolo-bench on 6 ranks; the
# streamed output goes to $OUT/NAME.log, each rank's to $OUT/NAME/.
mh_kolorun() {
  local name="$1" rc=0
  shift
  local envs=()
  while [ "$1" != "--" ]; do
    envs+=("$1")
    shift
  done
  shift
  env "${envs[@]}" timeout 300 "$KOLORUN" -np 6 "${PLACE[@]}" \
    --ssh-command "$NETNS_SSH" --timeout 240 --output-dir "$OUT/$name" \
    "$BENCH" -n 2 -w 1 "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    mh_fail "$name: kolorun exited $rc"
    tail -20 "$OUT/$name.log" | sed 's/^/    /' >&2
  fi
}

# Rank r of 6 must run in host r/2 + 1: its own output says so (the host
# name netns_ssh gives each namespace), and kolorun wrote it to the output
# directory.
check_placement() {
  local name="$1" r f
  for r in 0 1 2 3 4 5; do
    f="$OUT/$name/rank.$r.stderr"
    if [ ! -f "$f" ]; then
      mh_fail "$name: no $f"
      continue
    fi
    if ! grep -q "rank $r/6 on host .*, host $((r / 2))/3)" "$f"; then
      mh_fail "$name: rank $r did not log its place as host $((r / 2)) of 3:"
      grep "on host" "$f" >&2 || true
    fi
  done
}

i=0
for algo in "${MH_ALGOS[@]}"; do
  for args in "${MH_GRID[@]}"; do
    i=$((i + 1))
    name="kolorun-$algo-$i"
    mh_log "$name: kolo-bench -a $algo $args"
    # shellcheck disable=SC2086
    mh_kolorun "$name" KOLO_LOG_LEVEL=info -- -a "$algo" $args
    mh_check_bench "$name" "$OUT/$name.log" "$algo"
    mh_check_layout "$name" "$OUT/$name.log" 3 2
    mh_check_transport "$name" "$OUT/$name.log" "shm\\+tcp"
  done
done
check_placement kolorun-ring-1

for algo in "${MH_ALGOS[@]}"; do
  name="kolorun-tcp-$algo"
  mh_log "$name: KOLO_TRANSPORT=tcp kolo-bench -a $algo"
  mh_kolorun "$name" KOLO_TRANSPORT=tcp KOLO_LOG_LEVEL=info -- -a "$algo" --sizes 8,1000004,64M
  mh_check_bench "$name" "$OUT/$name.log" "$algo"
  mh_check_layout "$name" "$OUT/$name.log" 3 2
  mh_check_transport "$name" "$OUT/$name.log" tcp
done

# The same hosts from a hostfile, and the ranks' traffic pinned to eth0
# (each host's link) with --network-interface, which kolorun passes on as
# KOLO_IFACE. (The login node's own eth0 is on another network: kolorun's
# store address still comes from its route towards each host.)
printf '%s slots=2\n' "${NETNS_IPS[@]}" >"$OUT/hostfile"
PLACE=(--hostfile "$OUT/hostfile" --network-interface eth0)
name="kolorun-hostfile"
mh_log "$name: --hostfile, --network-interface eth0"
mh_kolorun "$name" KOLO_LOG_LEVEL=info -- -a ring --sizes 8,1000004,16M
mh_check_bench "$name" "$OUT/$name.log" ring
mh_check_layout "$name" "$OUT/$name.log" 3 2
mh_check_transport "$name" "$OUT/$name.log" "shm\\+tcp"
PLACE=(-H "$HOSTS")

name="kolorun-table"
mh_log "$name: the selection table picks"
mh_kolorun "$name" KOLO_LOG_LEVEL=info -- --sizes 8,64K,16M
mh_check_bench "$name" "$OUT/$name.log" ""

mh_assert_no_pids "after the grid"
mh_finish

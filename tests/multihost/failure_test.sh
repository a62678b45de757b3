#!/usr/bin/env bash
# Failures across hosts (network namespaces), 3 hosts x 2 ranks launched by
# kolorun -H with --ssh-command netns_ssh from the root namespace:
#
#   killed-rank       rank 3 (host 2) is killed with SIGKILL from inside its
#                     namespace during a long allreduce: kolorun exits
#                     non-zero within the timeout, naming rank 3 and its host,
#                     and nothing is left running in any namespace.
#   unreachable-host  -H names an address that no namespace has: kolorun
#                     fails fast with an error naming that host, starts
#                     nothing.
#   link-down         host 2's link is cut (ip link set VETH down) during a
#                     long allreduce, KOLO_TIMEOUT=5: every rank fails with
#                     an error naming a peer rank within KOLO_TIMEOUT (plus
#                     slack), as its own output in --output-dir shows, and
#                     kolorun exits non-zero. The ranks ignore SIGTERM here,
#                     so that kolorun stopping the survivors of the first
#                     failure does not hide the errors of the others.
#
#   tests/multihost/failure_test.sh BUILD_DIR CASE
#
# Exit status: 0 pass, 1 fail, 2 unknown case, 77 skipped (not root or no
# ip netns).
set -euo pipefail

# shellcheck source=tests/multihost/test_lib.sh
source "$(dirname "$0")/test_lib.sh" "${1:-}"
CASE="${2:-}"
case "$CASE" in
  killed-rank | unreachable-host | link-down) ;;
  *)
    echo "usage: failure_test.sh BUILD_DIR killed-rank|unreachable-host|link-down" >&2
    exit 2
    ;;
esac
mh_require_kolorun_hosts

netns_up 3
OUT="$NETNS_WORK/out"
mkdir -p "$OUT"
HOSTS="$(netns_hosts 2)"
JOB_PID=""

# start_long_job [--ignore-term] ENV...: starts kolorun in the background on
# a ring allreduce of 64 MiB that would run for many minutes, output in
# $OUT/job.log and $OUT/ranks/; waits until every rank is inside the timed
# loop (rank 0 printed the table header after the warm-up iteration).
# --ignore-term: the ranks ignore SIGTERM (an ignored signal stays ignored
# across exec), so that when the first rank fails, kolorun's SIGTERM to the
# others does not cut short their own failure; its SIGKILL 3 s later still
# ends whatever is left.
start_long_job() {
  local wrap=()
  if [ "$1" = --ignore-term ]; then
    # shellcheck disable=SC2016
    wrap=(sh -c 'trap "" TERM; exec "$0" "$@"')
    shift
  fi
  env "$@" timeout 300 "$KOLORUN" -np 6 -H "$HOSTS" --ssh-command "$NETNS_SSH" \
    --timeout 240 --output-dir "$OUT/ranks" \
    "${wrap[@]}" "$BENCH" -a ring --sizes 64M -n 100000 -w 1 --no-check >"$OUT/job.log" 2>&1 &
  JOB_PID=$!
  local k
  for ((k = 0; k < 600; k++)); do
    if grep -q "bytes.*count.*algorithm" "$OUT/job.log" 2>/dev/null &&
      [ "$(bench_pids | wc -l)" -eq 6 ]; then
      sleep 1 # well inside the first timed iterations
      return 0
    fi
    if ! kill -0 "$JOB_PID" 2>/dev/null; then
      mh_fail "the job ended before it started measuring:"
      sed 's/^/    /' "$OUT/job.log" >&2
      mh_finish
    fi
    sleep 0.1
  done
  mh_fail "the job did not start measuring within 60 s"
  sed 's/^/    /' "$OUT/job.log" >&2
  mh_finish
}

# bench_pids: "PID RANK HOST" of every kolo-bench running in a host.
bench_pids() {
  local i p r
  for ((i = 1; i <= NETNS_COUNT; i++)); do
    for p in $(ip netns pids "${NETNS_NAMES[i]}" 2>/dev/null); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = kolo-bench ] || continue
      r="$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^KOLO_RANK=//p')"
      echo "$p $r $i"
    done
  done
}

# wait_job BOUND: waits at most BOUND seconds for kolorun to end; sets
# JOB_RC (or fails and kills it) and JOB_SECONDS.
wait_job() {
  local bound="$1" start=$SECONDS
  JOB_RC=""
  while [ $((SECONDS - start)) -lt "$bound" ]; do
    if ! kill -0 "$JOB_PID" 2>/dev/null; then
      JOB_RC=0
      wait "$JOB_PID" || JOB_RC=$?
      JOB_SECONDS=$((SECONDS - start))
      return 0
    fi
    sleep 0.1
  done
  JOB_SECONDS=$((SECONDS - start))
  mh_fail "kolorun still running $bound s after the failure"
  kill -TERM "$JOB_PID" 2>/dev/null || true
  wait "$JOB_PID" 2>/dev/null || true
  JOB_RC=timeout
}

case_killed_rank() {
  start_long_job KOLO_TIMEOUT=30
  local victim
  victim="$(bench_pids | awk '$2 == 3 { print $1 }')"
  if [ -z "$victim" ] || [ "$(bench_pids | awk '$2 == 3 { print $3 }')" != 2 ]; then
    mh_fail "rank 3 is not running in host 2: $(bench_pids | tr '\n' ';')"
    return
  fi
  mh_log "killing rank 3 (pid $victim) inside ${NETNS_NAMES[2]}"
  netns_exec 2 kill -9 "$victim"
  # kolorun stops the others within 5 s of the exit it sees.
  wait_job 20
  mh_log "kolorun exited $JOB_RC after ${JOB_SECONDS} s"
  sed 's/^/    /' "$OUT/job.log" | grep -v '^ *\[[0-9]\] *[0-9]' | tail -15
  if [ "$JOB_RC" = 0 ] || [ "$JOB_RC" = timeout ]; then
    mh_fail "kolorun exit status $JOB_RC, expected non-zero"
  fi
  if ! grep -E "kolorun: .*rank 3\b" "$OUT/job.log" | grep -F "${NETNS_IPS[2]}" >/dev/null; then
    mh_fail "kolorun did not name rank 3 on host ${NETNS_IPS[2]}"
  fi
  mh_assert_no_pids "after kolorun exited"
}

case_unreachable_host() {
  local bad="$NETNS_SUBNET.99" rc=0 start=$SECONDS
  timeout 60 "$KOLORUN" -np 4 -H "${NETNS_IPS[1]}:2,$bad:2" --ssh-command "$NETNS_SSH" \
    "$BENCH" --sizes 8 >"$OUT/job.log" 2>&1 || rc=$?
  mh_log "kolorun exited $rc after $((SECONDS - start)) s"
  sed 's/^/    /' "$OUT/job.log"
  if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
    mh_fail "kolorun exit status $rc, expected a failure of its own"
  fi
  if ! grep -q "kolorun.*$bad" "$OUT/job.log"; then
    mh_fail "kolorun's error does not name the host $bad"
  fi
  if [ $((SECONDS - start)) -gt 30 ]; then
    mh_fail "kolorun took $((SECONDS - start)) s to report an unreachable host"
  fi
  if grep -q "kolo-bench" "$OUT/job.log"; then
    mh_fail "ranks were started although a host was unreachable"
  fi
  mh_assert_no_pids "after kolorun exited"
}

case_link_down() {
  local timeout_s=5
  start_long_job --ignore-term KOLO_TIMEOUT="$timeout_s"
  mh_log "cutting host 2's link (${NETNS_VETHS[2]} down)"
  ip link set "${NETNS_VETHS[2]}" down
  # Each rank notices within KOLO_TIMEOUT; kolorun then stops what is left
  # within 5 s. Slack for a loaded machine on top.
  wait_job $((timeout_s + 25))
  mh_log "kolorun exited $JOB_RC after ${JOB_SECONDS} s"
  sed 's/^/    /' "$OUT/job.log" | tail -15
  if [ "$JOB_RC" = 0 ] || [ "$JOB_RC" = timeout ]; then
    mh_fail "kolorun exit status $JOB_RC, expected non-zero"
  fi
  local r f line
  for r in 0 1 2 3 4 5; do
    f="$OUT/ranks/rank.$r.stderr"
    line="$(grep -E "rank $r: .*rank [0-9]" "$f" 2>/dev/null |
      grep -vE "^kolo\[[0-9]+\] INFO" | head -1 || true)"
    if [ -z "$line" ] ||
      ! echo "$line" | sed "s/rank $r\b//g" | grep -E "rank [0-9]" >/dev/null; then
      mh_fail "rank $r printed no error naming a peer rank:"
      sed 's/^/    /' "$f" >&2 2>/dev/null || echo "    (no $f)" >&2
    else
      echo "    rank $r: $line"
    fi
  done
  mh_assert_no_pids "after kolorun exited"
}

"case_${CASE//-/_}"
mh_finish

#!/usr/bin/env bash
# Chaos run of elastic training (issue 18; not part of `make test`):
# RUNS elastic jobs on 3 network-namespace hosts with 2 ranks each
# (tests/multihost/netns.sh), each hit at random times by a SIGKILL of a
# worker, a SIGSTOP of a worker, or its host's link taken down for a few
# seconds (`ip link set VETH down`), then checked:
#   - it finished (exit 0) with the survivors' parameters identical and the
#     accuracy at least an undisturbed run's less 0.05, or stopped with an error naming the cause
#     ("elastic: ..." from kolorun) within the time bound: never a hang;
#   - nothing of the job is left running in the hosts;
#   - no /dev/shm segment of kolo is left behind;
#   - every checkpoint file written loads (never a torn one).
#
#   tests/chaos/elastic_chaos.sh [--build-dir build] [--runs 20] [--seed N]
#                                [--out FILE]
# Needs root. Prints one line per run and the counts; --out writes them too.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR=build
RUNS=20
SEED=$RANDOM
OUT_FILE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --out) OUT_FILE="$2"; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR] [--runs N] [--seed N] [--out FILE]" >&2; exit 2 ;;
  esac
done
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
BIN="$BUILD_DIR/bin"
PY=/usr/bin/python3
RANDOM=$SEED
BOUND=240           # seconds a run may take before it counts as a hang
ELASTIC_TIMEOUT=30  # kolorun --elastic-timeout: the bound on waiting for --min-np
export KOLO_TIMEOUT=5 KOLO_CONNECT_TIMEOUT=20

# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
netns_require
netns_up 3
WORK="$(mktemp -d /tmp/kolo-chaos.XXXXXX)"
echo "elastic chaos: $RUNS runs, 3 hosts x 2 ranks, seed $SEED, logs in $WORK"

# worker_pids: the training processes in the hosts.
worker_pids() {
  local p
  for p in $(netns_pids); do
    # The python processes only (not the remote wrappers around them).
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^$PY .*elastic_train.py"; then
      echo "$p"
    fi
  done
}

# chaos EVENTS: 1 to 3 events at random times while the job runs, each
# written to the file EVENTS.
chaos() {
  local log="$1" n=$((1 + RANDOM % 3)) k pids victim host what
  for ((k = 0; k < n; k++)); do
    sleep "$((2 + RANDOM % 6)).$((RANDOM % 10))"
    mapfile -t pids < <(worker_pids)
    [ "${#pids[@]}" -gt 0 ] || return
    victim=${pids[RANDOM % ${#pids[@]}]}
    case $((RANDOM % 3)) in
      0) what="SIGKILL pid $victim"; kill -KILL "$victim" 2>/dev/null ;;
      1) what="SIGSTOP pid $victim"; kill -STOP "$victim" 2>/dev/null ;;
      2) host=$((1 + RANDOM % 3))
         local down="$((2 + RANDOM % 7))"
         what="link of host $host down for ${down} s"
         ip link set "${NETNS_VETHS[host]}" down
         sleep "$down"
         ip link set "${NETNS_VETHS[host]}" up ;;
    esac
    echo "chaos: $what at $(date +%T.%N | cut -c1-12)" >>"$log"
  done
}

# The accuracy band: an undisturbed run's accuracy, less 0.05.
PYTHONPATH="$BUILD_DIR/python" timeout -k 5 "$BOUND" "$BIN/kolorun" --min-np 2 -np 6 \
  -H "$(netns_hosts 2)" --ssh-command "$NETNS_SSH" -x PYTHONPATH -x KOLO_TIMEOUT \
  -x KOLO_CONNECT_TIMEOUT "$PY" "$ROOT/tests/python/elastic_train.py" --world 6 \
  --victim -1 --epochs 4 --samples 1536 --step-sleep 0.1 >"$WORK/baseline.log" 2>&1 || {
    echo "the undisturbed run failed:"; sed 's/^/  /' "$WORK/baseline.log"; exit 1; }
baseline=$(sed -n 's/.*accuracy \([0-9.]*\).*/\1/p' "$WORK/baseline.log" | head -1)
BAND=$(awk -v a="$baseline" 'BEGIN { printf "%.4f", a - 0.05 }')
echo "undisturbed run: accuracy $baseline; band: at least $BAND"

declare -A COUNT=()
summary=""
for ((run = 1; run <= RUNS; run++)); do
  log="$WORK/run$run.log"
  events_file="$WORK/run$run.events"
  : >"$events_file"
  ckpt="$WORK/ckpt$run"
  mkdir -p "$ckpt"
  shm_before=$(ls /dev/shm 2>/dev/null | grep -c kolo || true)
  start=$(date +%s)
  PYTHONPATH="$BUILD_DIR/python" timeout -k 5 "$BOUND" "$BIN/kolorun" --min-np 2 -np 6 \
    --elastic-timeout "$ELASTIC_TIMEOUT" -H "$(netns_hosts 2)" --ssh-command "$NETNS_SSH" -x PYTHONPATH -x KOLO_TIMEOUT \
    -x KOLO_CONNECT_TIMEOUT "$PY" "$ROOT/tests/python/elastic_train.py" --world 6 \
    --victim -1 --epochs 4 --samples 1536 --step-sleep 0.1 --ckpt "$ckpt/epoch{epoch}.pt" >"$log" 2>&1 &
  job=$!
  chaos "$events_file" &
  chaos_pid=$!
  wait "$job"
  code=$?
  kill "$chaos_pid" 2>/dev/null
  wait "$chaos_pid" 2>/dev/null
  # Whatever was stopped is continued so that nothing stays frozen.
  for p in $(worker_pids); do kill -CONT "$p" 2>/dev/null; done
  for ((i = 1; i <= NETNS_COUNT; i++)); do ip link set "${NETNS_VETHS[i]}" up 2>/dev/null; done
  secs=$(($(date +%s) - start))
  events=$(grep -c '^chaos:' "$events_file" || true)
  sleep 1
  left=$(worker_pids | wc -l)
  shm_after=$(ls /dev/shm 2>/dev/null | grep -c kolo || true)
  torn=0
  for f in "$ckpt"/*.pt; do
    [ -e "$f" ] || continue
    "$PY" -c "import sys, torch; d = torch.load(sys.argv[1]); assert d['format'] == 'kolo-checkpoint'" \
      "$f" 2>/dev/null || torn=$((torn + 1))
  done
  if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
    outcome="hang"
  elif [ "$code" -eq 0 ]; then
    done_lines=$(grep -E '^\[[0-9]+\] worker [0-9]+ done: ' "$log")
    n=$(echo "$done_lines" | grep -c done)
    distinct=$(echo "$done_lines" | sed 's/.*params //' | sort -u | wc -l)
    acc=$(echo "$done_lines" | sed -n 's/.*accuracy \([0-9.]*\).*/\1/p' | head -1)
    if [ "$n" -ge 2 ] && [ "$distinct" -eq 1 ] &&
      awk -v a="$acc" -v b="$BAND" 'BEGIN { exit !(a >= b) }'; then
      outcome="finished ($n workers, accuracy $acc)"
      COUNT[finished]=$((${COUNT[finished]:-0} + 1))
    else
      outcome="WRONG RESULT ($n workers, $distinct parameter sets, accuracy ${acc:-none})"
      COUNT[wrong]=$((${COUNT[wrong]:-0} + 1))
    fi
  else
    cause=$(grep -m1 -E '^kolorun: elastic: .*(ending the job|fewer than|reset-limit)' "$log" |
      sed 's/^kolorun: //')
    if [ -n "$cause" ]; then
      outcome="stopped with a clear error: $cause"
      COUNT[stopped]=$((${COUNT[stopped]:-0} + 1))
    else
      outcome="FAILED WITHOUT A CLEAR CAUSE (exit $code)"
      COUNT[unclear]=$((${COUNT[unclear]:-0} + 1))
    fi
  fi
  [ "$outcome" = hang ] && COUNT[hang]=$((${COUNT[hang]:-0} + 1))
  [ "$left" -gt 0 ] && COUNT[left_running]=$((${COUNT[left_running]:-0} + 1))
  [ "$shm_after" -gt "$shm_before" ] && COUNT[shm_left]=$((${COUNT[shm_left]:-0} + 1))
  [ "$torn" -gt 0 ] && COUNT[torn]=$((${COUNT[torn]:-0} + 1))
  line="run $run: $events event(s) [$(sed 's/^chaos: //' "$events_file" | paste -sd ';' -)], ${secs} s, $outcome; left running $left, shm +$((shm_after - shm_before)), torn checkpoints $torn"
  echo "$line"
  summary+="$line"$'\n'
  for p in $(netns_pids); do kill -KILL "$p" 2>/dev/null; done
done
counts="finished ${COUNT[finished]:-0}, stopped with a clear error ${COUNT[stopped]:-0}, wrong result ${COUNT[wrong]:-0}, failed without a clear cause ${COUNT[unclear]:-0}, hangs ${COUNT[hang]:-0}, runs leaving processes ${COUNT[left_running]:-0}, runs leaving /dev/shm segments ${COUNT[shm_left]:-0}, runs with a torn checkpoint ${COUNT[torn]:-0}"
echo "counts: $counts"
if [ -n "$OUT_FILE" ]; then
  { echo "seed $SEED, $RUNS runs; undisturbed accuracy $baseline, band >= $BAND"
    printf '%s' "$summary"; echo "counts: $counts"; } >"$OUT_FILE"
fi
bad=$((${COUNT[wrong]:-0} + ${COUNT[unclear]:-0} + ${COUNT[hang]:-0} + ${COUNT[left_running]:-0} + ${COUNT[shm_left]:-0} + ${COUNT[torn]:-0}))
[ "$bad" -eq 0 ]

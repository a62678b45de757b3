#!/usr/bin/env bash
# Elastic recovery time (issue 18): from the SIGKILL of a rank to the
# survivors' first completed training step after it, on 2 network-namespace
# hosts with 2 ranks each (tests/multihost/netns.sh), default settings.
#
#   bench/elastic_recovery.sh [--build-dir build] [--rounds 5] [--width 256]
#
# Each round runs tests/python/elastic_train.py under
#   kolorun --min-np 2 -np 4 -H <h1>:2,<h2>:2 --ssh-command netns_ssh
# where worker 1 (host 1, beside worker 0; workers 2 and 3 on host 2) kills
# itself at step 5 of the first world and prints the time; each survivor
# prints the time of its first step after the reset. Recovery = the last
# survivor's time - the kill's time (one machine: one clock). Needs root.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR=build
ROUNDS=5
WIDTH=256
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --width) WIDTH="$2"; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR] [--rounds N] [--width UNITS]" >&2; exit 2 ;;
  esac
done
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
BIN="$BUILD_DIR/bin"
PY=/usr/bin/python3
# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
netns_require
netns_up 2
OUT="$(mktemp -d /tmp/kolo-elastic-recovery.XXXXXX)"
echo "elastic recovery: 2 hosts x 2 ranks, worker 1 SIGKILLed at step 5; logs in $OUT"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-12s %-10s\n' round recovery_s survivors
times=()
for ((r = 1; r <= ROUNDS; r++)); do
  log="$OUT/round$r.log"
  PYTHONPATH="$BUILD_DIR/python" timeout 300 "$BIN/kolorun" --min-np 2 -np 4 \
    -H "$(netns_hosts 2)" --ssh-command "$NETNS_SSH" -x PYTHONPATH \
    "$PY" "$ROOT/tests/python/elastic_train.py" --world 4 --victim 1 --at 5 \
    --epochs 1 --width "$WIDTH" >"$log" 2>&1 || {
      echo "round $r failed; its output:"; sed 's/^/  /' "$log"; exit 1; }
  kill_t=$(sed -n 's/.*worker 1 kills itself at \([0-9.]*\).*/\1/p' "$log")
  mapfile -t after < <(sed -n 's/.*worker [0-9]* first step after the reset at \([0-9.]*\).*/\1/p' "$log")
  if [ -z "$kill_t" ] || [ "${#after[@]}" -ne 3 ]; then
    echo "round $r: missing times; its output:"; sed 's/^/  /' "$log"; exit 1
  fi
  last=$(printf '%s\n' "${after[@]}" | sort -n | tail -1)
  t=$(awk -v a="$last" -v b="$kill_t" 'BEGIN { printf "%.3f", a - b }')
  times+=("$t")
  printf '%-6s %-12s %-10s\n' "$r" "$t" "${#after[@]}"
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
echo "median recovery: $median s (goal: under 3 s)"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

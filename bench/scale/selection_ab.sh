#!/usr/bin/env bash
# kolo's allreduce selection, A against B, in one run: two builds' default
# choice (kolo-bench without -a: the selection of that build) on a sweep of
# sizes, the builds alternating round by round, on shared memory (one host,
# 2 and 4 ranks) and on 3 network-namespace hosts (links shaped to LINK,
# 1 and 2 ranks each; tests/multihost/netns.sh). Meant for the model-driven
# selection (A: this tree's build) against the hand-set thresholds it
# replaced (B: a build of the commit before, e.g. a worktree of 67e8a7d).
#
#   bench/scale/selection_ab.sh --a-build build --b-build DIR [--out DIR]
#       [--rounds 6] [--sizes 4K,...,64M] [--link 1gbit] [--min-time 0.2]
#       [--settings shm2,shm4,net3x1,net3x2] [--a-env NAME=VALUE ...]
#
# --a-env: a variable for build A's ranks only (repeatable), e.g.
# KOLO_LINK_RATE=1gbit, which tells the model-driven selection the link rate.
#
# A build directory needs bin/kolorun, bin/kolo-bench and lib/libkolo.so*
# (LD_LIBRARY_PATH points at its lib/, so a copied build works too).
# Writes DIR/ab.csv (round,build,setting,bytes,algorithm,seconds: seconds as
# kolo-bench times one call; algorithm is the one the build chose) and
# DIR/ab.md from bench/scale/ab_report.py (per setting and size: each
# build's choice, the median over rounds of A's time / B's time of the same
# round). Needs root for the netns settings.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
A_BUILD=""
B_BUILD=""
A_ENV=()
OUT=""
ROUNDS=6
SIZES=4K,16K,64K,256K,1M,4M,16M,64M
LINK=1gbit
MIN_TIME=0.2
SETTINGS=shm2,shm4,net3x1,net3x2
die_usage() { echo "selection_ab.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --a-build) A_BUILD="$2" ;;
    --b-build) B_BUILD="$2" ;;
    --a-env) A_ENV+=("$2") ;;
    --out) OUT="$2" ;;
    --rounds) ROUNDS="$2" ;;
    --sizes) SIZES="$2" ;;
    --link) LINK="$2" ;;
    --min-time) MIN_TIME="$2" ;;
    --settings) SETTINGS="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
if [ -z "$A_BUILD" ] || [ -z "$B_BUILD" ]; then die_usage "--a-build and --b-build are required"; fi
for d in "$A_BUILD" "$B_BUILD"; do
  if [ ! -x "$d/bin/kolo-bench" ] || [ ! -x "$d/bin/kolorun" ]; then
    die_usage "$d: no bin/kolo-bench or bin/kolorun"
  fi
done
A_BUILD="$(cd "$A_BUILD" && pwd)"
B_BUILD="$(cd "$B_BUILD" && pwd)"
OUT="${OUT:-$(mktemp -d /tmp/kolo-selection-ab.XXXXXX)}"
mkdir -p "$OUT/logs"
CSV="$OUT/ab.csv"
echo "round,build,setting,bytes,algorithm,seconds" >"$CSV"
{
  echo "A: $A_BUILD ($(cat "$A_BUILD/COMMIT" 2>/dev/null || git -C "$A_BUILD/.." rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "B: $B_BUILD ($(cat "$B_BUILD/COMMIT" 2>/dev/null || git -C "$B_BUILD/.." rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "start $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/meta.txt"
export OMP_NUM_THREADS=1
if [[ ",$SETTINGS," == *",net"* ]]; then
  # shellcheck source=tests/multihost/netns.sh
  source "$ROOT/tests/multihost/netns.sh"
  netns_require
  netns_up 3 "$LINK"
fi

# one ROUND BUILD-TAG BUILD-DIR SETTING
one() {
  local round="$1" tag="$2" dir="$3" setting="$4" log rc=0 hl="" per i
  log="$OUT/logs/${setting}_${tag}_r$round.log"
  local extra=()
  [ "$tag" = A ] && extra=("${A_ENV[@]}")
  local bench=(env "LD_LIBRARY_PATH=$dir/lib" "${extra[@]}" "$dir/bin/kolo-bench" --json --no-check -n 1 -w 1
    --min-time "$MIN_TIME" --sizes "$SIZES")
  case "$setting" in
    shm*) LD_LIBRARY_PATH="$dir/lib" timeout 300 "$dir/bin/kolorun" -np "${setting#shm}" "${bench[@]}" >"$log" 2>&1 || rc=$? ;;
    net3x*)
      per="${setting#net3x}"
      for ((i = 1; i <= 3; i++)); do hl+="${hl:+,}${NETNS_IPS[i]}:$per"; done
      LD_LIBRARY_PATH="$dir/lib" timeout 300 "$dir/bin/kolorun" -np $((3 * per)) -H "$hl" \
        --ssh-command "$NETNS_SSH" "${bench[@]}" >"$log" 2>&1 || rc=$? ;;
    *) die_usage "--settings: unknown setting '$setting' (shmN or net3xN)" ;;
  esac
  [ "$rc" = 0 ] || { echo "selection_ab: $setting $tag round $round failed ($rc)" >&2; tail -3 "$log" >&2; return 1; }
  sed -E 's/^\[[^]]*\] ?//' "$log" | grep '^{"tool":"kolo-bench"' | /usr/bin/python3 -c '
import json, sys
r, b, s = sys.argv[1:4]
for line in sys.stdin:
    d = json.loads(line)
    print("%s,%s,%s,%d,%s,%.9g" % (r, b, s, d["bytes"], d["algorithm"], d["time_us"] * 1e-6))
' "$round" "$tag" "$setting" >>"$CSV"
}

for ((round = 1; round <= ROUNDS; round++)); do
  for setting in ${SETTINGS//,/ }; do
    # Alternate which build goes first, so neither always runs warmer.
    if ((round % 2)); then order="A B"; else order="B A"; fi
    for tag in $order; do
      dir="$A_BUILD"; [ "$tag" = B ] && dir="$B_BUILD"
      one "$round" "$tag" "$dir" "$setting"
    done
    echo "selection_ab: round $round/$ROUNDS $setting done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
  done
done
echo "end $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"
[ "$(type -t netns_down)" = function ] && netns_down
/usr/bin/python3 "$ROOT/bench/scale/ab_report.py" "$CSV" | tee "$OUT/ab.md"

#!/usr/bin/env bash
# How the latency term grows with the number of ranks: tiny float32 sum
# allreduces (8 B .. 4 KiB) on 2 .. 64 ranks of this one machine over tcp
# loopback (KOLO_TRANSPORT=tcp; oversubscribed: more ranks than cores),
# per algorithm (ring, rhd, tree), each through kolo-bench -a ALGO.
#
#   bench/scale/latency_growth.sh [--build-dir build] [--out DIR]
#       [--ranks 2,4,8,16,32,64] [--algos ring,rhd,tree]
#       [--sizes 8,64,512,4K] [--min-time 0.3] [--repeats 3] [--cap 180]
#
# Appends to DIR/latency.csv (the measurement CSV of bench/scale/
# measurements.py: transport tcp, hosts 1, ranks_per_host N, link_bps 0;
# seconds = median of REPEATS measurements) and one line per launch to
# DIR/latency_runs.tsv (wall seconds, exit status, load averages). The
# slope fit against log2(p) and p is bench/scale/latency_fit.py's.
# Exit status: 0 when every launch gave results, 1 otherwise, 2 on a bad
# option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
OUT=""
RANKS=2,4,8,16,32,64
ALGOS=ring,rhd,tree
SIZES=8,64,512,4K
MIN_TIME=0.3
REPEATS=3
CAP=180
die_usage() { echo "latency_growth.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --out) OUT="$2" ;;
    --ranks) RANKS="$2" ;;
    --algos) ALGOS="$2" ;;
    --sizes) SIZES="$2" ;;
    --min-time) MIN_TIME="$2" ;;
    --repeats) REPEATS="$2" ;;
    --cap) CAP="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$REPEATS" =~ ^[1-9]$ ]] || die_usage "--repeats '$REPEATS': expected 1..9"
BIN="$(cd "$BUILD_DIR" && pwd)/bin"
[ -x "$BIN/kolo-bench" ] || die_usage "no $BIN/kolo-bench (build first)"
OUT="${OUT:-$(mktemp -d /tmp/kolo-latency.XXXXXX)}"
mkdir -p "$OUT/logs"
CSV="$OUT/latency.csv"
RUNS="$OUT/latency_runs.tsv"
[ -s "$RUNS" ] || printf 'time\tranks\talgorithm\twall_s\tstatus\tload_before\tload_after\n' >"$RUNS"
export OMP_NUM_THREADS=1 KOLO_TRANSPORT=tcp
# Each size REPEATS times in a row.
list=""
for s in ${SIZES//,/ }; do
  for ((k = 0; k < REPEATS; k++)); do list+="${list:+,}$s"; done
done
STATUS=0
for n in ${RANKS//,/ }; do
  for algo in ${ALGOS//,/ }; do
    log="$OUT/logs/np${n}_$algo.log"
    before="$(cut -d' ' -f1 /proc/loadavg)"
    t0=$(date +%s.%N)
    rc=0
    timeout "$CAP" "$BIN/kolorun" -np "$n" "$BIN/kolo-bench" --json --no-check -a "$algo" \
      -n 3 -w 2 --min-time "$MIN_TIME" --sizes "$list" >"$log" 2>&1 || rc=$?
    wall="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
    after="$(cut -d' ' -f1 /proc/loadavg)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%T)" "$n" "$algo" "$wall" "$rc" \
      "$before" "$after" >>"$RUNS"
    python3 "$ROOT/bench/scale/measurements.py" append "$CSV" "$log" tcp 1 "$n" none "$algo" \
      >"$log.rows" 2>&1 || rc=${rc/#0/1}
    [ "$rc" = 0 ] || { STATUS=1; echo "latency_growth: np $n $algo FAILED ($rc):" >&2; tail -3 "$log" >&2; }
    echo "latency_growth: np $n $algo: $wall s, load $before -> $after; $(tr -s ' ' <"$log.rows" | tr '\n' ';')" >&2
  done
done
exit "$STATUS"

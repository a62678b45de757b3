#!/usr/bin/env bash
# Allreduce times for the scale model's calibration and validation: the grid
# of bench/scale/grid.txt (link rate x hosts x ranks per host x algorithm x
# size), each host a network namespace of this machine whose one link is
# shaped with tc tbf to the line's rate each way (tests/multihost/netns.sh),
# ranks launched by kolorun -H over netns_ssh; lines with link "none" run on
# this host alone (kolorun -np, shared memory between the ranks).
#
#   bench/scale/netns_allreduce.sh [--build-dir build] [--grid FILE]
#       [--out DIR] [--links 1gbit,100mbit,...] [--min-time 0.3]
#       [--cap 240] [--repeats 3]
#
# Per grid line and algorithm, one launch of kolo-bench -a ALGO --json
# (float32 sum, out of place, --no-check: the correctness of every algorithm
# is ctest's job) with -w 1 -n 1 --min-time MIN_TIME, so each size runs at
# least one call and about MIN_TIME seconds. Every size is listed REPEATS
# times in --sizes (fewer where one call on the shaped link takes long: 2
# above 0.25 s, 1 above 1 s, estimated as 2 x bytes / rate) and the CSV gets
# the median. A launch past CAP seconds is killed and its line reported as
# missing. Writes, under DIR:
#   measurements.csv  the contract file (bench/scale/measurements.py)
#   runs.tsv          one line per launch: time, link, hosts, per-host,
#                     algorithm, wall seconds, exit status, load averages
#                     before and after
#   logs/             every launch's output
# Progress goes to stderr, one line per launch. Needs root for the network
# namespaces (lines with link none run without).
#
# Exit status: 0 when every launch gave results; 1 when one failed or timed
# out (the others are still measured); 2 on a bad option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
GRID="$ROOT/bench/scale/grid.txt"
OUT=""
LINKS=""
MIN_TIME=0.3
CAP=240
REPEATS=3

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die_usage() { echo "netns_allreduce.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) usage; exit 0 ;; esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --grid) GRID="$2" ;;
    --out) OUT="$2" ;;
    --links) LINKS="$2" ;;
    --min-time) MIN_TIME="$2" ;;
    --cap) CAP="$2" ;;
    --repeats) REPEATS="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[ -r "$GRID" ] || die_usage "--grid '$GRID': cannot read it"
[[ "$REPEATS" =~ ^[1-9]$ ]] || die_usage "--repeats '$REPEATS': expected 1..9"
[[ "$CAP" =~ ^[1-9][0-9]*$ ]] || die_usage "--cap '$CAP': expected seconds"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
BIN="$BUILD_DIR/bin"
for tool in kolorun kolo-bench; do
  [ -x "$BIN/$tool" ] || die_usage "no $BIN/$tool (build first)"
done
OUT="${OUT:-$(mktemp -d /tmp/kolo-scale.XXXXXX)}"
mkdir -p "$OUT/logs"
CSV="$OUT/measurements.csv"
RUNS="$OUT/runs.tsv"
[ -s "$RUNS" ] || printf 'time\tlink\thosts\tper_host\talgorithm\twall_s\tstatus\tload_before\tload_after\n' >"$RUNS"
MEAS="$ROOT/bench/scale/measurements.py"
export OMP_NUM_THREADS=1

# The grid's lines, comments dropped, filtered by --links.
mapfile -t LINES < <(grep -v '^[[:space:]]*\(#\|$\)' "$GRID" | awk -v want="$LINKS" '
  BEGIN { n = split(want, w, ","); for (i = 1; i <= n; i++) keep[w[i]] = 1 }
  want == "" || ($1 in keep)')
[ "${#LINES[@]}" -gt 0 ] || die_usage "no grid line left (--links '$LINKS')"
TOTAL=0
for line in "${LINES[@]}"; do
  read -r _ _ per algos _ <<<"$line"
  for a in ${algos//,/ }; do
    [ "$a" = hier ] && [ "$per" = 1 ] && continue
    TOTAL=$((TOTAL + 1))
  done
done

load1() { cut -d' ' -f1 /proc/loadavg; }
rate_of() { python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import measurements as m; print(m.rate_bps(sys.argv[2]))' "$ROOT/bench/scale" "$1"; }

# sizes_for SIZES RATE_BPS: the --sizes list, each size repeated.
sizes_for() {
  python3 - "$1" "$2" "$REPEATS" <<'PY'
import re, sys
sizes, rate, reps = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
out = []
for s in sizes:
    m = re.match(r"^(\d+)([KMG]?)$", s)
    n = int(m.group(1)) * units[m.group(2)]
    est = 2.0 * n * 8 / rate if rate else 0.0
    k = 1 if est > 1.0 else 2 if est > 0.25 else reps
    out += [s] * min(k, reps)
print(",".join(out))
PY
}

# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
CUR_LINK=""
CUR_HOSTS=0
STATUS=0
N=0
START=$(date +%s)
for line in "${LINES[@]}"; do
  read -r link hosts per algos sizes <<<"$line"
  bps="$(rate_of "$link")"
  if [ "$link" != none ] && { [ "$link" != "$CUR_LINK" ] || [ "$hosts" -gt "$CUR_HOSTS" ]; }; then
    # New shaping: fresh hosts (6 at once, so the following lines of this
    # link reuse them).
    netns_down
    [ "$(id -u)" = 0 ] || { echo "netns_allreduce.sh: $link lines need root" >&2; exit 1; }
    want=$((hosts > 6 ? hosts : 6))
    netns_up "$want" "$link"
    CUR_LINK="$link"
    CUR_HOSTS="$want"
  fi
  list="$(sizes_for "$sizes" "$bps")"
  for algo in ${algos//,/ }; do
    [ "$algo" = hier ] && [ "$per" = 1 ] && continue
    N=$((N + 1))
    np=$((hosts * per))
    tag="${link}_h${hosts}_p${per}_${algo}"
    log="$OUT/logs/$tag.log"
    args=(--json --no-check -a "$algo" -n 1 -w 1 --min-time "$MIN_TIME" --sizes "$list")
    before="$(load1)"
    t0=$(date +%s.%N)
    rc=0
    # The CSV's transport is the run's KOLO_TRANSPORT: auto (shared memory
    # inside a host, tcp between hosts).
    transport=auto
    if [ "$link" = none ]; then
      timeout "$CAP" "$BIN/kolorun" -np "$np" "$BIN/kolo-bench" "${args[@]}" >"$log" 2>&1 || rc=$?
    else
      hl=""
      for ((i = 1; i <= hosts; i++)); do hl+="${hl:+,}${NETNS_IPS[i]}:$per"; done
      timeout "$CAP" "$BIN/kolorun" -np "$np" -H "$hl" --ssh-command "$NETNS_SSH" \
        "$BIN/kolo-bench" "${args[@]}" >"$log" 2>&1 || rc=$?
    fi
    wall="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
    after="$(load1)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%T)" "$link" "$hosts" "$per" \
      "$algo" "$wall" "$rc" "$before" "$after" >>"$RUNS"
    # Rows of whatever sizes finished, also when the launch was cut short.
    python3 "$MEAS" append "$CSV" "$log" "$transport" "$hosts" "$per" "$link" "$algo" \
      >"$log.rows" 2>&1 || true
    if [ "$rc" != 0 ]; then
      STATUS=1
      echo "[$N/$TOTAL] $tag: FAILED (exit $rc after $wall s); last lines:" >&2
      tail -3 "$log" | sed 's/^/    /' >&2
    fi
    elapsed=$(($(date +%s) - START))
    echo "[$N/$TOTAL] $(date -u +%T) $link ${hosts}x$per $algo: $wall s, load $before -> $after," \
      "$(grep -c . "$log.rows" 2>/dev/null || echo 0) sizes; ${elapsed} s so far" >&2
  done
done
netns_down
echo "netns_allreduce.sh: $(($(grep -c . "$CSV") - 1)) rows in $CSV" >&2
exit "$STATUS"

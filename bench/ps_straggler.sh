#!/usr/bin/env bash
# Straggler benchmark of the parameter servers (issue 16): 4 workers train a
# model of ResNet-50's size (25.6 M floats) whose compute per step is a
# sleep (bench/ps_straggler.py); with --straggler one worker sleeps twice
# as long. Three modes, each without and with the straggler, in interleaved
# rounds (round r runs all six configurations before round r+1):
#
#   allreduce  kolorun -np 4             kolo.torch.DistributedOptimizer
#   sync       kolorun --servers 1 -np 5 kolo.torch.ps, mode="sync"
#   downpour   kolorun --servers 1 -np 5 kolo.torch.ps, mode="downpour"
#
# Prints a markdown table of samples/s (median over the rounds) with and
# without the straggler and their ratio, and checks the goal: downpour
# keeps at least 85% of its own throughput without the straggler, while the
# synchronous modes fall towards what the straggler allows (a synchronous
# step waits for the slowest worker: compute 2T instead of T).
#
#   bench/ps_straggler.sh [--build-dir build] [--rounds 3] [--compute-ms 1000]
#                         [--steps 5] [--out DIR]
#
# Exit status: 0 when every run worked (the goal is reported, not enforced);
# 1 when a run failed; 2 on a bad option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
ROUNDS=3
COMPUTE_MS=1000
STEPS=5
OUT_DIR=""
WORKERS=4
PYTHON=/usr/bin/python3

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die_usage() {
  echo "ps_straggler.sh: $*" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) usage; exit 0 ;; esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --rounds) ROUNDS="$2" ;;
    --compute-ms) COMPUTE_MS="$2" ;;
    --steps) STEPS="$2" ;;
    --out) OUT_DIR="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die_usage "--rounds '$ROUNDS': expected a positive integer"
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die_usage "--steps '$STEPS': expected a positive integer"
[[ "$COMPUTE_MS" =~ ^[0-9]+$ ]] || die_usage "--compute-ms '$COMPUTE_MS': expected milliseconds"
KOLORUN="$BUILD_DIR/bin/kolorun"
[ -x "$KOLORUN" ] || die_usage "no $KOLORUN (build first, or --build-dir)"
[ -n "$OUT_DIR" ] || OUT_DIR="$(mktemp -d /tmp/kolo-ps-straggler.XXXXXX)"
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/results.jsonl"
: >"$RESULTS"
export PYTHONPATH="$BUILD_DIR/python" KOLO_TIMEOUT="${KOLO_TIMEOUT:-300}"

# run MODE STRAGGLER(0|1) ROUND: one run; its JSON line appended to RESULTS.
run() {
  local mode="$1" slow="$2" round="$3" np=$WORKERS servers=()
  if [ "$mode" != allreduce ]; then
    np=$((WORKERS + 1))
    servers=(--servers 1)
  fi
  local args=(--mode "$mode" --compute-ms "$COMPUTE_MS" --steps "$STEPS")
  [ "$slow" = 1 ] && args+=(--straggler)
  local log="$OUT_DIR/$mode.$slow.$round.log"
  echo "# round $round: $mode, straggler $slow (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  if ! timeout 900 "$KOLORUN" "${servers[@]}" -np "$np" "$PYTHON" \
    "$ROOT/bench/ps_straggler.py" "${args[@]}" >"$log" 2>&1; then
    echo "ps_straggler.sh: the run failed ($mode, straggler $slow); its output:" >&2
    sed 's/^/  /' "$log" >&2
    return 1
  fi
  sed -E 's/^\[[^]]*\] ?//' "$log" | grep '^{"bench": "ps_straggler"' |
    sed "s/}\$/, \"round\": $round, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}/" >>"$RESULTS"
}

STATUS=0
for ((r = 1; r <= ROUNDS; r++)); do
  for mode in allreduce sync downpour; do
    for slow in 0 1; do
      run "$mode" "$slow" "$r" || STATUS=1
    done
  done
done

"$PYTHON" - "$RESULTS" "$COMPUTE_MS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
compute = float(sys.argv[2])
def median(mode, slow):
    v = [r["samples_per_s"] for r in rows if r["mode"] == mode and r["straggler"] == slow]
    return (statistics.median(v), v) if v else (None, v)
print("\n4 workers, 1 server (ps modes), %.1f M floats, compute %.0f ms per step "
      "(the straggler %.0f ms), median of %d round(s)\n"
      % (rows[0]["floats"] / 1e6 if rows else 0, compute, 2 * compute,
         max([r["round"] for r in rows] or [0])))
print("| mode | samples/s, no straggler | samples/s, 1 straggler | kept | rounds (no / with) |")
print("| --- | ---: | ---: | ---: | --- |")
kept = {}
for mode in ("allreduce", "sync", "downpour"):
    a, av = median(mode, False)
    b, bv = median(mode, True)
    k = b / a if a and b else None
    kept[mode] = k
    print("| %s | %s | %s | %s | %s / %s |" % (
        mode, "%.1f" % a if a else "failed", "%.1f" % b if b else "failed",
        "%.1f%%" % (100 * k) if k else "", ", ".join("%.1f" % x for x in av),
        ", ".join("%.1f" % x for x in bv)))
if kept.get("downpour"):
    print("\ndownpour keeps %.1f%% of its throughput with the straggler: goal >= 85%% %s"
          % (100 * kept["downpour"], "met" if kept["downpour"] >= 0.85 else "MISSED"))
for mode in ("allreduce", "sync"):
    if kept.get(mode):
        print("%s keeps %.1f%% (a synchronous step waits for the straggler)"
              % (mode, 100 * kept[mode]))
EOF
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "raw output: $OUT_DIR" >&2
exit "$STATUS"

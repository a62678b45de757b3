#!/usr/bin/env bash
# Two builds of kolo compared on the runtime's small-message steps across
# hosts (docs/performance.md, "Agreed operations"): kolo-fusion-bench's
# workload (b) `small` (1,000 average allreduces of 4 KiB per step) through
# the runtime, unfused (KOLO_FUSION_THRESHOLD=0: one collective per tensor)
# and fused (64 MiB), one rank on each of 2 network-namespace hosts
# (tests/multihost/netns.sh; needs root), tcp over a veth link. The builds
# run alternately, round by round, so that the machine's drifting load
# falls on both alike.
#
#   bench/agreement_ab.sh --a BUILD_DIR_A --b BUILD_DIR_B [--rounds 3]
#                         [--windows 5] [--window-time 0.5] [--rate R] [--out DIR]
#
# Prints every run's steps/s (the median of its windows), then per case and
# build the median over the rounds and B's change against A. Exit status:
# 0 when every run worked and its result was right, 1 otherwise, 2 on a bad
# option; 77 without root or network namespaces.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
A=""
B=""
ROUNDS=3
WINDOWS=5
WINDOW_TIME=0.5
RATE=""
OUT_DIR=""

die_usage() {
  echo "agreement_ab.sh: $*" >&2
  sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --a) A="$2" ;;
    --b) B="$2" ;;
    --rounds) ROUNDS="$2" ;;
    --windows) WINDOWS="$2" ;;
    --window-time) WINDOW_TIME="$2" ;;
    --rate) RATE="$2" ;;
    --out) OUT_DIR="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die_usage "--rounds '$ROUNDS': expected a positive integer"
for build in "$A" "$B"; do
  [ -n "$build" ] || die_usage "--a and --b are both needed"
  for tool in kolorun kolo-fusion-bench; do
    [ -x "$build/bin/$tool" ] || die_usage "no $build/bin/$tool (build it first)"
  done
done
A="$(cd "$A" && pwd)"
B="$(cd "$B" && pwd)"
[ -n "$OUT_DIR" ] || OUT_DIR="$(mktemp -d /tmp/kolo-agreement.XXXXXX)"
mkdir -p "$OUT_DIR"

# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
netns_require
netns_up 2 "$RATE"
HOSTS="$(netns_hosts 1)"

echo "# 2 ranks on 2 namespace hosts (links ${RATE:-unshaped}); $ROUNDS rounds A/B alternated"
echo "# A: $A"
echo "# B: $B"
echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); raw output: $OUT_DIR"
failed=0
for round in $(seq 1 "$ROUNDS"); do
  for case in unfused fused; do
    threshold=0
    [ "$case" = fused ] && threshold=67108864
    # A first in odd rounds, B first in even ones.
    order=(A B)
    [ $((round % 2)) -eq 0 ] && order=(B A)
    for which in "${order[@]}"; do
      build="$A"
      [ "$which" = B ] && build="$B"
      out="$OUT_DIR/$which.$case.run$round.jsonl"
      if KOLO_FUSION_THRESHOLD=$threshold timeout 600 "$build/bin/kolorun" -np 2 \
        -H "$HOSTS" --ssh-command "$NETNS_SSH" "$build/bin/kolo-fusion-bench" \
        --workload small --json --windows "$WINDOWS" --window-time "$WINDOW_TIME" \
        > "$out" 2> "${out%.jsonl}.stderr"; then
        sps="$(sed -n 's/.*"steps_per_s":\([0-9.]*\).*/\1/p' "$out" | head -1)"
        grep -q '"check":"ok"' "$out" || { sps="$sps WRONG RESULT"; failed=1; }
      else
        sps="FAILED"
        failed=1
        tail -5 "${out%.jsonl}.stderr" | sed 's/^/#   /'
      fi
      printf '# round %d %-8s %s  %s steps/s\n' "$round" "$case" "$which" "$sps"
    done
  done
done

/usr/bin/python3 - "$OUT_DIR" <<'EOF'
import glob, json, os, statistics, sys

runs = {}
def round_of(path):
    return int(os.path.basename(path).split(".")[2][3:])

for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.run*.jsonl")), key=round_of):
    which, case = os.path.basename(path).split(".")[:2]
    for line in open(path):
        if "{" in line:
            rec = json.loads(line[line.index("{"):])
            runs.setdefault((case, which), []).append(rec["steps_per_s"])
print("| case | A steps/s (rounds 1..N) | B steps/s (rounds 1..N) | B vs A (medians) |")
print("|---|---|---|---|")
for case in ("unfused", "fused"):
    a, b = runs.get((case, "A"), []), runs.get((case, "B"), [])
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    fmt = lambda v: ", ".join(f"{x:.1f}" for x in v)
    print(f"| small {case} | {ma:.1f} ({fmt(a)}) | {mb:.1f} ({fmt(b)}) | {100 * (mb / ma - 1):+.1f}% |")
EOF
exit "$failed"

#!/usr/bin/env bash
# The synthetic training step for the scale model's validation: ResNet-18
# (bench/synthetic.py: random data, kolo.torch's DistributedOptimizer, SGD)
# on 2 and 4 network-namespace hosts, 1 rank each, host links shaped to
# LINK (tests/multihost/netns.sh), and the step's compute time measured
# without kolo (synthetic.py --no-kolo) on 1 rank:
#   alone        one rank by itself on the machine
#   shared       H such ranks at once (H = the host count): this machine
#                has 2 cores, so 4 ranks share them as the training job's
#                4 ranks do; this is the compute time the model is given.
#
#   bench/scale/train_step.sh [--build-dir build] [--out DIR] [--hosts 2,4]
#       [--links 1gbit] [--model resnet18] [--image-size 64] [--batch 32]
#       [--iters 3] [--batches-per-iter 2] [--warmup 2] [--rounds 1]
#
# Step time = batch / (images/s per rank) of synthetic.py's summary (the
# mean over --iters timed iterations of --batches-per-iter steps each).
# Appends one line per (hosts, link, round) to DIR/train.csv:
#   model,hosts,ranks_per_host,link_bps,params,fusion_mb,step_compute_s,
#   step_compute_alone_s,step_seconds,load1
# (fusion_mb: kolo's KOLO_FUSION_THRESHOLD, 64 MiB by default, as used).
# Every run's output is in DIR/logs. Needs root; /usr/bin/python3 with torch
# and torchvision (Debian's python3-torchvision).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
OUT=""
HOSTS=2,4
LINKS=1gbit
MODEL=resnet18
IMAGE=64
BATCH=32
ITERS=3
PER_ITER=2
WARMUP=2
ROUNDS=1
PY=/usr/bin/python3
die_usage() { echo "train_step.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --out) OUT="$2" ;;
    --hosts) HOSTS="$2" ;;
    --links) LINKS="$2" ;;
    --model) MODEL="$2" ;;
    --image-size) IMAGE="$2" ;;
    --batch) BATCH="$2" ;;
    --iters) ITERS="$2" ;;
    --batches-per-iter) PER_ITER="$2" ;;
    --warmup) WARMUP="$2" ;;
    --rounds) ROUNDS="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
BIN="$BUILD_DIR/bin"
[ -x "$BIN/kolorun" ] || die_usage "no $BIN/kolorun (build first)"
OUT="${OUT:-$(mktemp -d /tmp/kolo-train-step.XXXXXX)}"
mkdir -p "$OUT/logs"
CSV="$OUT/train.csv"
[ -s "$CSV" ] || echo "model,hosts,ranks_per_host,link_bps,params,fusion_mb,step_compute_s,step_compute_alone_s,step_seconds,load1" >"$CSV"
FUSION_BYTES="${KOLO_FUSION_THRESHOLD:-67108864}"
FUSION_MB="$(awk -v b="$FUSION_BYTES" 'BEGIN { printf "%g", b / 1048576 }')"
SYN=(env "PYTHONPATH=$BUILD_DIR/python" OMP_NUM_THREADS=1 "$PY" "$ROOT/bench/synthetic.py"
  --model "$MODEL" --image-size "$IMAGE" --batch-size "$BATCH" --num-warmup-batches "$WARMUP"
  --num-batches-per-iter "$PER_ITER" --num-iters "$ITERS")

rate_of() { sed -n 's/.*Img\/sec per rank: \([0-9.]*\).*/\1/p' "$1" | tail -1; }
step_of() { awk -v b="$BATCH" -v r="$1" 'BEGIN { printf "%.6f", b / r }'; }
# run LOG CMD...: one run; its images/s per rank on stdout.
run() {
  local log="$1" r
  shift
  timeout 900 "$@" >"$log" 2>&1 || { echo "train_step.sh: failed: $*" >&2; tail -5 "$log" >&2; exit 1; }
  r="$(rate_of "$log")"
  [ -n "$r" ] || { echo "train_step.sh: no rate in $log" >&2; exit 1; }
  echo "$r"
}
# compute_shared H TAG: step seconds of H --no-kolo ranks run at once (mean).
compute_shared() {
  local h="$1" tag="$2" i pids=() s=0 r
  for ((i = 1; i <= h; i++)); do
    (run "$OUT/logs/compute_${tag}_h${h}_$i.log" "$BIN/kolorun" -np 1 "${SYN[@]}" --no-kolo \
      >"$OUT/logs/compute_${tag}_h${h}_$i.rate") &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for ((i = 1; i <= h; i++)); do
    r="$(cat "$OUT/logs/compute_${tag}_h${h}_$i.rate")"
    s="$(awk -v s="$s" -v r="$r" -v b="$BATCH" 'BEGIN { printf "%.6f", s + b / r }')"
  done
  awk -v s="$s" -v h="$h" 'BEGIN { printf "%.6f", s / h }'
}

# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
netns_require
maxh=0
for h in ${HOSTS//,/ }; do [ "$h" -gt "$maxh" ] && maxh=$h; done
for ((round = 1; round <= ROUNDS; round++)); do
  alone="$(step_of "$(run "$OUT/logs/compute_alone_r$round.log" "$BIN/kolorun" -np 1 "${SYN[@]}" --no-kolo)")"
  params="$(sed -n 's/.*(\([0-9.]*\)M parameters).*/\1/p' "$OUT/logs/compute_alone_r$round.log" | head -1)"
  params="$(awk -v p="$params" 'BEGIN { printf "%.0f", p * 1e6 }')"
  echo "train_step: round $round: $MODEL step compute alone $alone s ($params parameters)" >&2
  for link in ${LINKS//,/ }; do
    netns_down
    netns_up "$maxh" "$link"
    bps="$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import measurements as m; print(m.rate_bps(sys.argv[2]))' "$ROOT/bench/scale" "$link")"
    for h in ${HOSTS//,/ }; do
      shared="$(compute_shared "$h" "r$round")"
      hl=""
      for ((i = 1; i <= h; i++)); do hl+="${hl:+,}${NETNS_IPS[i]}:1"; done
      load="$(cut -d' ' -f1 /proc/loadavg)"
      r="$(run "$OUT/logs/train_${link}_h${h}_r$round.log" "$BIN/kolorun" -np "$h" -H "$hl" \
        --ssh-command "$NETNS_SSH" "${SYN[@]}")"
      step="$(step_of "$r")"
      echo "$MODEL,$h,1,$bps,$params,$FUSION_MB,$shared,$alone,$step,$load" >>"$CSV"
      echo "train_step: round $round: $link, $h hosts x 1: step $step s (compute: $shared s with $h ranks sharing the cores, $alone s alone), load $load" >&2
    done
  done
done
netns_down
echo "train_step: $CSV" >&2

#!/usr/bin/env bash
# Pipeline x data parallelism (kolo.torch.pipeline.Mesh, 2 stages x 2
# replicas) against plain data parallelism (kolo.torch.DistributedOptimizer)
# on the same 4 ranks: 2 hosts x 2 ranks, each host a network namespace of
# this machine whose link is shaped to RATE (default 1 Gbit/s) each way with
# tc tbf (tests/multihost/netns.sh). One kolorun job runs every variant of
# every model, alternating, for ROUNDS rounds (bench/pipeline_vs_dp.py: a
# wide MLP, large parameters and small activations, and a convolutional net
# on 128x128 images, few parameters and large activations); then
# bench/pipeline_vs_dp_report.py prints the samples/s medians, the ratios to
# data parallelism, the bytes per step on a host link, and the link times
# and crossover that kolo-predict and docs/pipeline.md's formula predict
# (OUT/report.md, OUT/results.json, OUT/speed.png; the job's log OUT/job.log).
# Needs root (network namespaces); the namespaces are deleted on any exit.
#
#   bench/pipeline_vs_dp.sh [--build-dir build] [--rate 1gbit] [--out DIR]
#                           [-- ARGS for pipeline_vs_dp.py, e.g. --rounds 6]
#
# Exit status: 0 when the job and the report worked; 1 otherwise; 2 on a bad
# option; 77 when network namespaces cannot be made.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
RATE=1gbit
OUT_DIR=""
WORKER_ARGS=()

die_usage() {
  echo "pipeline_vs_dp.sh: $*" >&2
  echo "usage: bench/pipeline_vs_dp.sh [--build-dir DIR] [--rate RATE] [--out DIR] [-- WORKER-ARGS]" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; WORKER_ARGS=("$@"); break ;;
  esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --rate) RATE="$2" ;;
    --out) OUT_DIR="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[ -d "$BUILD_DIR" ] || die_usage "--build-dir '$BUILD_DIR': no such directory"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
for tool in kolorun kolo-predict; do
  [ -x "$BUILD_DIR/bin/$tool" ] || die_usage "no $BUILD_DIR/bin/$tool (build it first)"
done
[ -d "$BUILD_DIR/python/kolo/torch/pipeline" ] ||
  die_usage "no $BUILD_DIR/python/kolo/torch/pipeline (build kolo_python_package)"

# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
netns_require
# netns_up installs 'trap netns_down EXIT' (and INT/TERM exits that run it).
netns_up 2 "$RATE"
OUT_DIR="${OUT_DIR:-$(mktemp -d /tmp/kolo-pipeline-vs-dp.XXXXXX)}"
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/job.log"

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "hosts: $(netns_hosts 2), link $RATE each way (tc tbf)"
  echo "uptime before: $(uptime)"
} | tee "$OUT_DIR/meta.txt"

# The link rate goes to kolo's allreduce selection too (docs/scale.md), so
# data parallelism gets the algorithm the model picks for this link.
export KOLO_LINK_RATE="$RATE"
# The job runs in the background and the shell waits for it, so that INT
# and TERM end the wait at once: the EXIT trap then stops the job (timeout
# passes the signal on to kolorun) and deletes the namespaces.
status=0
timeout 1800 "$BUILD_DIR/bin/kolorun" -np 4 -H "$(netns_hosts 2)" \
  --ssh-command "$NETNS_SSH" -x PYTHONPATH="$BUILD_DIR/python" -x KOLO_LINK_RATE \
  /usr/bin/python3 "$ROOT/bench/pipeline_vs_dp.py" "${WORKER_ARGS[@]}" >"$LOG" 2>&1 &
JOB_PID=$!
trap 'kill -TERM "$JOB_PID" 2>/dev/null || true; netns_down' EXIT
wait "$JOB_PID" || status=$?
echo "uptime after: $(uptime)" | tee -a "$OUT_DIR/meta.txt"
if [ "$status" != 0 ]; then
  echo "pipeline_vs_dp.sh: the job failed (exit $status); its output:" >&2
  tail -40 "$LOG" >&2
  exit 1
fi
/usr/bin/python3 "$ROOT/bench/pipeline_vs_dp_report.py" --log "$LOG" --rate "$RATE" \
  --predict "$BUILD_DIR/bin/kolo-predict" --json "$OUT_DIR/results.json" \
  --plot "$OUT_DIR/speed.png" |
  tee "$OUT_DIR/report.md"
echo "output: $OUT_DIR"

#!/usr/bin/env bash
# When does each host link carry an allreduce's bytes? Runs kolo-bench -a
# ALGO on HOSTS netns hosts of one rank (links shaped to LINK with tc tbf,
# tests/multihost/netns.sh) while link_series.py samples every host link's
# byte counters every 2 ms, then prints the rates per 20 ms bin.
#
#   bench/scale/link_series.sh [--hosts 3] [--algo tree] [--size 16M]
#       [--link 1gbit] [--iters 4] [--out FILE] [--build-dir build]
#
# Needs root (network namespaces). Meant to be run under
# flock /work/wt/bench.lock on a shared machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$ROOT/build/bin"
HOSTS=3 ALGO=tree SIZE=16M LINK=1gbit ITERS=4 OUT=""
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
  [ $# -ge 2 ] || { echo "link_series.sh: $1: needs a value" >&2; exit 2; }
  case "$1" in
    --hosts) HOSTS="$2" ;; --algo) ALGO="$2" ;; --size) SIZE="$2" ;; --link) LINK="$2" ;;
    --iters) ITERS="$2" ;; --out) OUT="$2" ;; --build-dir) BIN="$(cd "$2" && pwd)/bin" ;;
    *) echo "link_series.sh: $1: unknown option" >&2; exit 2 ;;
  esac
  shift 2
done
[ "$(id -u)" = 0 ] || { echo "link_series.sh: needs root (network namespaces)" >&2; exit 1; }
OUT="${OUT:-$(mktemp /tmp/link_series.XXXXXX)}"
# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
trap netns_down EXIT
netns_up "$HOSTS" "$LINK"
hl="" veths=""
for ((i = 1; i <= HOSTS; i++)); do
  hl+="${hl:+,}${NETNS_IPS[i]}:1"
  veths+="${veths:+,}${NETNS_VETHS[i]}"
done
python3 "$ROOT/bench/scale/link_series.py" "$veths" 6 "$OUT" &
sampler=$!
OMP_NUM_THREADS=1 "$BIN/kolorun" -np "$HOSTS" -H "$hl" --ssh-command "$NETNS_SSH" \
  "$BIN/kolo-bench" --json --no-check -a "$ALGO" -n "$ITERS" -w 1 --sizes "$SIZE" |
  grep -o '"time_us":[0-9.]*' | sed "s/^/$ALGO ${HOSTS}x1 $SIZE $LINK: /; s/\"time_us\"://; s/\$/ us/"
wait "$sampler"
python3 "$ROOT/bench/scale/link_series.py" --rates "$OUT"
echo "link_series.sh: samples in $OUT" >&2

#!/usr/bin/env bash
# Allreduce across hosts on shaped links: 3 hosts x 2 ranks, each host a
# network namespace of this machine whose one link to the bridge is shaped
# to RATE (default 1 Gbit/s) each way with tc tbf (tests/multihost/netns.sh).
# For the flat ring and the hierarchical allreduce (kolo-bench -a ring /
# -a hier, float32 sum, 64 MiB by default) it reports the bus bandwidth as
# kolo-bench prints it, that figure as a fraction of the link rate, and the
# bytes that crossed each host link per allreduce (tx + rx of every host
# link's veth, counted over the whole run and divided by the number of
# allreduce calls: warm-up + timed + the checking call). Prints a markdown
# table; its "link use" is one direction's bytes per call (half the mean
# tx + rx) over the time of a call, as a fraction of the rate. Needs root (network namespaces) and is launched by kolorun -H with
# netns_ssh (or by mpirun with --launcher mpirun).
#
#   bench/multihost.sh [--build-dir build] [--rate 1gbit] [--size 64M]
#                      [--iters 5] [--warmup 1] [--repeats 1]
#                      [--burst 256kb] [--limit 1mb] [--launcher kolorun]
#                      [--out DIR]
#
# The ring passes the bus bandwidth's own bytes over every host link each
# way: busbw = 2(n-1)/n x size / time is exactly the rate of one direction of
# a host link, so the ring's busbw / link rate is the fraction of the link
# it uses. TCP/IP and Ethernet headers take about 4.4% of a 1500-byte frame
# (tbf counts whole frames), so 95.6% is the ceiling for payload.
#
# Exit status: 0 when every run worked and every result was checked right;
# 1 otherwise; 2 on a bad option; 77 when network namespaces cannot be made.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
RATE=1gbit
SIZE=64M
ITERS=5
WARMUP=1
REPEATS=1
LAUNCHER=kolorun
OUT_DIR=""
HOSTS=3
PER_HOST=2

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

die_usage() {
  echo "multihost.sh: $*" >&2
  echo "run 'bench/multihost.sh --help' for the options" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
  esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --rate) RATE="$2" ;;
    --size) SIZE="$2" ;;
    --iters) ITERS="$2" ;;
    --warmup) WARMUP="$2" ;;
    --repeats) REPEATS="$2" ;;
    --burst) export NETNS_TBF_BURST="$2" ;;
    --limit) export NETNS_TBF_LIMIT="$2" ;;
    --launcher) LAUNCHER="$2" ;;
    --out) OUT_DIR="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$ITERS" =~ ^[1-9][0-9]*$ ]] || die_usage "--iters '$ITERS': expected a positive integer"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die_usage "--warmup '$WARMUP': expected an integer"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die_usage "--repeats '$REPEATS': expected a positive integer"
[[ "$LAUNCHER" == kolorun || "$LAUNCHER" == mpirun ]] ||
  die_usage "--launcher '$LAUNCHER': expected kolorun or mpirun"
# tc rates: bit, kbit, mbit, gbit (decimal, per second).
RATE_BYTES="$(echo "$RATE" | awk '
  match(tolower($0), /^[0-9.]+/) {
    v = substr($0, 1, RLENGTH); u = tolower(substr($0, RLENGTH + 1))
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9
    if (u in m) { printf "%.0f\n", v * m[u] / 8; exit }
  }')"
[ -n "$RATE_BYTES" ] || die_usage "--rate '$RATE': expected e.g. 1gbit, 500mbit"

[ -d "$BUILD_DIR" ] || die_usage "--build-dir '$BUILD_DIR': no such directory"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
BIN="$BUILD_DIR/bin"
for tool in kolorun kolo-bench; do
  [ -x "$BIN/$tool" ] || die_usage "--build-dir '$BUILD_DIR': no $BIN/$tool (build it first)"
done
if [ "$LAUNCHER" = kolorun ] && ! "$BIN/kolorun" --help 2>&1 | grep -- '-H' >/dev/null; then
  die_usage "$BIN/kolorun has no -H; use --launcher mpirun"
fi

# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
netns_require
netns_up "$HOSTS" "$RATE"
if [ -z "$OUT_DIR" ]; then
  OUT_DIR="$(mktemp -d /tmp/kolo-multihost.XXXXXX)"
fi
mkdir -p "$OUT_DIR"
NP=$((HOSTS * PER_HOST))
CALLS=$((WARMUP + ITERS + 1))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# run_bench ALGO LOG: one kolo-bench run of NP ranks over the hosts.
run_bench() {
  local algo="$1" log="$2"
  local args=(--json --sizes "$SIZE" -a "$algo" -n "$ITERS" -w "$WARMUP")
  if [ "$LAUNCHER" = kolorun ]; then
    timeout 600 "$BIN/kolorun" -np "$NP" -H "$(netns_hosts "$PER_HOST")" \
      --ssh-command "$NETNS_SSH" "$BIN/kolo-bench" "${args[@]}" >"$log" 2>&1
  else
    KOLO_RENDEZVOUS="tcp://${NETNS_IPS[1]}:$((20000 + RANDOM % 20000))" \
      timeout 600 mpirun -np "$NP" -H "$(netns_hosts "$PER_HOST")" \
      --mca plm_rsh_agent "$NETNS_SSH" --mca plm_rsh_no_tree_spawn 1 \
      --mca btl self,vader,tcp --mca btl_tcp_if_include "$NETNS_SUBNET.0/24" \
      --mca oob_tcp_if_include "$NETNS_SUBNET.0/24" -x KOLO_RENDEZVOUS \
      "$BIN/kolo-bench" "${args[@]}" >"$log" 2>&1
  fi
}

# Per algorithm: the best busbw over the repeats and the bytes of that run.
declare -A BUSBW TIME_US LINK_MEAN LINK_MAX LINK_ALL
STATUS=0
for algo in ring hier; do
  BUSBW[$algo]=""
  for ((rep = 1; rep <= REPEATS; rep++)); do
    log="$OUT_DIR/$algo.$rep.log"
    before="$(netns_link_bytes)"
    if ! run_bench "$algo" "$log"; then
      echo "multihost.sh: the $algo run failed; its output:" >&2
      sed 's/^/  /' "$log" >&2
      STATUS=1
      continue
    fi
    after="$(netns_link_bytes)"
    # kolorun prefixes each line with "[rank] ".
    json="$(sed -E 's/^\[[^]]*\] ?//' "$log" | grep '^{"tool":"kolo-bench"' | tail -1 || true)"
    check="$(echo "$json" | sed -n 's/.*"check":"\([^"]*\)".*/\1/p')"
    busbw="$(echo "$json" | sed -n 's/.*"busbw_gbps":\([0-9.e+-]*\).*/\1/p')"
    time_us="$(echo "$json" | sed -n 's/.*"time_us":\([0-9.e+-]*\).*/\1/p')"
    if [ "$check" != ok ] || [ -z "$busbw" ]; then
      echo "multihost.sh: the $algo run gave no checked result: $json" >&2
      STATUS=1
      continue
    fi
    # Per host link: (tx + rx after - before) / calls.
    per_link="$(paste <(echo "$before") <(echo "$after") |
      awk -v c="$CALLS" '{ printf "%.0f\n", ($7 + $8 - $3 - $4) / c }')"
    echo "# $algo run $rep: busbw $busbw GB/s; bytes per call per host link: $(tr '\n' ' ' <<<"$per_link")" >&2
    if [ -z "${BUSBW[$algo]}" ] || awk -v a="$busbw" -v b="${BUSBW[$algo]}" 'BEGIN { exit !(a > b) }'; then
      BUSBW[$algo]="$busbw"
      TIME_US[$algo]="$time_us"
      LINK_MEAN[$algo]="$(echo "$per_link" | awk '{ s += $1 } END { printf "%.0f", s / NR }')"
      LINK_MAX[$algo]="$(echo "$per_link" | sort -n | tail -1)"
      LINK_ALL[$algo]="$(echo "$per_link" | awk '{ s += $1 } END { printf "%.0f", s }')"
    fi
  done
done

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

echo
echo "3 hosts x 2 ranks, host links shaped to $RATE each way (tbf burst" \
  "${NETNS_TBF_BURST:-256kb}, limit ${NETNS_TBF_LIMIT:-1mb}), $SIZE float32 sum" \
  "allreduce, $ITERS timed + $WARMUP warm-up calls, best of $REPEATS, launcher $LAUNCHER"
echo
echo "| algorithm | time (ms) | busbw (GB/s) | busbw / link rate | MiB per host link per call (tx+rx, mean) | max link | all links | link use |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for algo in ring hier; do
  if [ -z "${BUSBW[$algo]}" ]; then
    echo "| $algo | failed | | | | | | |"
    continue
  fi
  frac="$(awk -v b="${BUSBW[$algo]}" -v r="$RATE_BYTES" 'BEGIN { printf "%.1f%%", 100 * b * 1e9 / r }')"
  # Link use: one direction's share of the mean bytes per call over the
  # call's time, against the rate.
  use="$(awk -v b="${LINK_MEAN[$algo]}" -v t="${TIME_US[$algo]}" -v r="$RATE_BYTES" \
    'BEGIN { printf "%.1f%%", 100 * (b / 2) / (t / 1e6) / r }')"
  ms="$(awk -v t="${TIME_US[$algo]}" 'BEGIN { printf "%.0f", t / 1000 }')"
  echo "| $algo | $ms | ${BUSBW[$algo]} | $frac | $(mib "${LINK_MEAN[$algo]}") | $(mib "${LINK_MAX[$algo]}") | $(mib "${LINK_ALL[$algo]}") | $use |"
done
echo
if [ -n "${BUSBW[ring]:-}" ]; then
  awk -v b="${BUSBW[ring]}" -v r="$RATE_BYTES" 'BEGIN {
    f = 100 * b * 1e9 / r
    printf "ring at %.1f%% of the link rate: goal >= 85%% %s\n", f, (f >= 85 ? "met" : "MISSED") }'
fi
if [ -n "${LINK_ALL[ring]:-}" ] && [ -n "${LINK_ALL[hier]:-}" ]; then
  awk -v r="${LINK_ALL[ring]}" -v h="${LINK_ALL[hier]}" 'BEGIN {
    printf "hier moves %.2fx the ring'"'"'s bytes across hosts (%s)\n", h / r,
      (h < r ? "less" : "NOT less") }'
fi
echo "raw output: $OUT_DIR" >&2
exit "$STATUS"

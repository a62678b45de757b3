#!/usr/bin/env bash
# Sharding benchmark of the parameter servers (issue 16) on network-
# namespace hosts: 4 worker hosts and up to 4 server hosts, one rank each,
# every host link shaped to RATE (default 1 Gbit/s) each way with tc tbf
# (tests/multihost/netns.sh; the namespaces, veths and bridge are made here
# and removed on exit; traffic only on their addresses). 4 workers push a
# gradient of 25.6 M floats (ResNet-50's size) and pull the parameters back
# (bench/ps_shards.py: kolo.torch.ps, sync mode, SGD on the servers) with
# S = 1, 2 and 4 server hosts (kolorun --servers S -np S+4 -H, the servers
# on hosts 1..S), and the single-master baseline written the way MPI-Learn
# works (bench/ps_mpilearn.py: one Python master with mpi4py, the workers
# send gradients, it applies SGD and sends the weights back, one worker at a
# time) over the same hosts with mpirun (master on host 1).
#
# The link-rate bound of a step: the push moves B = 4 x 25.6 M bytes out of
# every worker's link and 4B/S into every server's, the pull the same back,
# one after the other, so a step takes at least 2 x max(B, 4B/S) / RATE
# (1 server: 6.5 s at 1 Gbit/s; 2: 3.3 s; 4: 1.6 s). Reported: the median
# step time, bound / time (goal >= 85% for every S) and the aggregate
# throughput (bytes pushed and pulled by all workers per second). The
# MPI-Learn master serves one worker at a time: its bound is that of S = 1.
#
#   bench/ps_shards.sh [--build-dir build] [--rate 1gbit] [--steps 3]
#                      [--servers "1 2 4"] [--floats 25557032] [--out DIR]
#
# Needs root (network namespaces). Exit status: 0 when every run worked;
# 1 otherwise; 2 on a bad option; 77 when namespaces cannot be made.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
RATE=1gbit
STEPS=3
SERVER_COUNTS="1 2 4"
OUT_DIR=""
WORKERS=4
FLOATS=25557032
PYTHON=/usr/bin/python3

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die_usage() {
  echo "ps_shards.sh: $*" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) usage; exit 0 ;; esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --rate) RATE="$2" ;;
    --steps) STEPS="$2" ;;
    --servers) SERVER_COUNTS="$2" ;;
    --floats) FLOATS="$2" ;;
    --out) OUT_DIR="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die_usage "--steps '$STEPS': expected a positive integer"
[[ "$FLOATS" =~ ^[1-9][0-9]{2,}$ ]] || die_usage "--floats '$FLOATS': expected at least 100"
MAX_SERVERS=0
for s in $SERVER_COUNTS; do
  [[ "$s" =~ ^[1-9]$ ]] || die_usage "--servers '$SERVER_COUNTS': expected counts 1-9"
  [ "$s" -gt "$MAX_SERVERS" ] && MAX_SERVERS=$s
done
RATE_BYTES="$(echo "$RATE" | awk '
  match(tolower($0), /^[0-9.]+/) {
    v = substr($0, 1, RLENGTH); u = tolower(substr($0, RLENGTH + 1))
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9
    if (u in m) { printf "%.0f\n", v * m[u] / 8; exit }
  }')"
[ -n "$RATE_BYTES" ] || die_usage "--rate '$RATE': expected e.g. 1gbit, 500mbit"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
KOLORUN="$BUILD_DIR/bin/kolorun"
[ -x "$KOLORUN" ] || die_usage "no $KOLORUN (build first, or --build-dir)"
"$PYTHON" -c "import mpi4py" 2>/dev/null ||
  echo "ps_shards.sh: no mpi4py (apt-get install python3-mpi4py): no MPI-Learn baseline" >&2

# shellcheck source=tests/multihost/netns.sh
source "$ROOT/tests/multihost/netns.sh"
netns_require
# Hosts 1..MAX_SERVERS: servers; the next 4: workers.
netns_up $((MAX_SERVERS + WORKERS)) "$RATE"
[ -n "$OUT_DIR" ] || OUT_DIR="$(mktemp -d /tmp/kolo-ps-shards.XXXXXX)"
mkdir -p "$OUT_DIR"
RESULTS="$OUT_DIR/results.jsonl"
: >"$RESULTS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# hosts_for S: S server hosts, then the worker hosts, one slot each.
hosts_for() {
  local s="$1" i out=""
  for ((i = 1; i <= s; i++)); do out+="${out:+,}${NETNS_IPS[i]}:1"; done
  for ((i = MAX_SERVERS + 1; i <= MAX_SERVERS + WORKERS; i++)); do
    out+="${out:+,}${NETNS_IPS[i]}:1"
  done
  echo "$out"
}

# keep LOG TAG: the JSON line of a run, with the load average, into RESULTS.
keep() {
  sed -E 's/^\[[^]]*\] ?//' "$1" | grep "^{\"bench\": \"$2\"" |
    sed "s/}\$/, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}/" >>"$RESULTS"
}

STATUS=0
for s in $SERVER_COUNTS; do
  log="$OUT_DIR/kolo.$s.log"
  echo "# $s server(s) (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  if timeout 900 "$KOLORUN" --servers "$s" -np $((s + WORKERS)) -H "$(hosts_for "$s")" \
    --ssh-command "$NETNS_SSH" -x PYTHONPATH="$BUILD_DIR/python" -x KOLO_TIMEOUT=300 \
    "$PYTHON" "$ROOT/bench/ps_shards.py" --floats "$FLOATS" --steps "$STEPS" >"$log" 2>&1; then
    keep "$log" ps_shards
  else
    echo "ps_shards.sh: the run with $s server(s) failed; its output:" >&2
    sed 's/^/  /' "$log" >&2
    STATUS=1
  fi
done
if "$PYTHON" -c "import mpi4py" 2>/dev/null; then
  log="$OUT_DIR/mpilearn.log"
  echo "# MPI-Learn-style master (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  if timeout 900 mpirun -np $((1 + WORKERS)) -H "$(hosts_for 1)" \
    --mca plm_rsh_agent "$NETNS_SSH" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$NETNS_SUBNET.0/24" \
    --mca oob_tcp_if_include "$NETNS_SUBNET.0/24" \
    "$PYTHON" "$ROOT/bench/ps_mpilearn.py" --floats "$FLOATS" --steps "$STEPS" >"$log" 2>&1; then
    keep "$log" ps_mpilearn
  else
    echo "ps_shards.sh: the MPI-Learn-style run failed; its output:" >&2
    sed 's/^/  /' "$log" >&2
    STATUS=1
  fi
fi

"$PYTHON" - "$RESULTS" "$RATE_BYTES" "$RATE" "$STEPS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rate, rate_name, steps = float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
print("\n4 worker hosts, S server hosts, 1 rank per host, every host link %s each way; "
      "%.1f M floats pushed and pulled per worker and step; median of %d step(s)\n"
      % (rate_name, rows[0]["floats"] / 1e6 if rows else 0, steps))
print("| servers | step (s) | link-rate bound (s) | bound / step | aggregate push+pull "
      "(MB/s) | steps (s) | load average |")
print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
goal = []
for r in rows:
    workers = r["workers"]
    b = 4.0 * r["floats"]
    s = r.get("servers", 1)
    bound = 2 * max(b, workers * b / s) / rate
    t = statistics.median(r["step_seconds"])
    frac = bound / t
    name = ("%d (kolo)" % s) if r["bench"] == "ps_shards" else "1 (MPI-Learn-style mpi4py master)"
    if r["bench"] == "ps_shards":
        goal.append((s, frac))
    print("| %s | %.2f | %.2f | %.1f%% | %.0f | %s | %s |" % (
        name, t, bound, 100 * frac, 2 * workers * b / t / 1e6,
        ", ".join("%.2f" % x for x in r["step_seconds"]), r["loadavg"]))
print()
for s, frac in goal:
    print("S = %d: %.1f%% of the link-rate bound: goal >= 85%% %s"
          % (s, 100 * frac, "met" if frac >= 0.85 else "MISSED"))
EOF
echo "raw output: $OUT_DIR" >&2
exit "$STATUS"

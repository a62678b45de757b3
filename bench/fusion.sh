#!/usr/bin/env bash
# Tensor fusion benchmark of the runtime (issue 4): training steps of two
# workloads, 2 ranks on this machine, kolo fused and unfused next to one
# MPI_Allreduce per tensor and one torch.distributed (gloo) all_reduce per
# tensor, in one run; then the runtime's overhead for one 64 MiB tensor.
# Prints a markdown table of steps/s and the issue's goals, and draws a PNG
# when python3-matplotlib is installed.
#
#   bench/fusion.sh [--build-dir build] [--repeats 3] [--windows 5]
#                   [--window-time 0.5] [--stat best|median] [--out DIR] [--nice N]
#                   [--strict] [--from DIR] [--hosts H [--rate R]]
#
# Workloads (tools/bench/fusion_workload.h), each step submitting every
# tensor's average allreduce in backward order, then waiting for all:
#   (a) resnet50  ResNet-50's 161 parameter tensors, 25,557,032 floats
#   (b) small     1,000 tensors of 4 KiB
# Peers:
#   kolo-fused    kolorun -np 2 kolo-fusion-bench (KOLO_FUSION_THRESHOLD 64 MiB)
#   kolo-unfused  the same with KOLO_FUSION_THRESHOLD=0 (each tensor alone)
#   mpi           mpirun -np 2 mpi-fusion-bench (blocking MPI_Allreduce per tensor)
#   gloo          bench/gloo_fusion.py (dist.all_reduce per tensor)
#   direct        kolo-fusion-bench --mode direct: Communicator::allreduce of
#                 64 MiB vs the same through the Runtime, and one allreduce of
#                 (a)'s total bytes (the reference of the 15% goal), and (b) by
#                 tensor, as one allreduce, and as one segmented allreduce
# Each tool reports the median steps/s of its timed windows; each peer runs
# --repeats times, the runs interleaved, and the best run (highest steps/s:
# the one least disturbed on a shared machine) or the median run is kept.
# --from DIR prints the tables again from an earlier run's raw output.
# --hosts H spreads the ranks over H hosts that are network namespaces of
# this machine (tests/multihost/netns.sh; needs root), NP/H ranks each, the
# ranks of different hosts talking TCP over veth links (shaped to --rate
# each way with tc tbf when given): kolo through kolorun -H, MPI through
# mpirun -H (TCP BTL), gloo one process per rank in its host's namespace.
#
# Exit status: 0 when every run worked and every result was right (goals
# missed are reported; with --strict they exit 3); 1 when a run failed or a
# result was wrong; 2 on a bad option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
NP=2
REPEATS=3
WINDOWS=5
WINDOW_TIME=0.5
OUT_DIR=""
NICE=0
STRICT=0
STAT=best
FROM=""
PYTHON=/usr/bin/python3
RUN_TIMEOUT=600
HOSTS=1
RATE=""

usage() {
  sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  cat <<EOF
Options:
  --build-dir DIR    where bin/kolorun, bin/kolo-fusion-bench, bin/mpi-fusion-bench are
  --np N             ranks ($NP; the goals are stated for 2)
  --repeats R        runs per peer ($REPEATS)
  --windows N        timed windows per run ($WINDOWS)
  --window-time S    seconds per window ($WINDOW_TIME)
  --stat S           best (highest steps/s of the runs) or median ($STAT)
  --out DIR          keep the raw JSON, logs and fusion.png there (default: a temp dir)
  --from DIR         no runs: the tables (and plot) from DIR's raw output
  --nice N           run every peer under 'nice -n N'
  --strict           exit 3 when a goal is missed
  --hosts H          ranks on H network-namespace hosts (1: this host, no namespaces)
  --rate R           with --hosts: tc rate of every host link, e.g. 10gbit (unshaped)
EOF
}

die_usage() {
  echo "fusion.sh: $*" >&2
  echo "run 'bench/fusion.sh --help' for the options" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --strict) STRICT=1; shift; continue ;;
  esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --np) NP="$2" ;;
    --repeats) REPEATS="$2" ;;
    --windows) WINDOWS="$2" ;;
    --window-time) WINDOW_TIME="$2" ;;
    --stat) STAT="$2" ;;
    --from) FROM="$2" ;;
    --out) OUT_DIR="$2" ;;
    --nice) NICE="$2" ;;
    --hosts) HOSTS="$2" ;;
    --rate) RATE="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$NP" =~ ^[1-9][0-9]*$ ]] || die_usage "--np '$NP': expected a positive integer"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die_usage "--repeats '$REPEATS': expected a positive integer"
[[ "$WINDOWS" =~ ^[1-9][0-9]*$ ]] || die_usage "--windows '$WINDOWS': expected a positive integer"
[[ "$WINDOW_TIME" =~ ^[0-9]*\.?[0-9]+$ ]] || die_usage "--window-time '$WINDOW_TIME': expected seconds"
[[ "$NICE" =~ ^-?[0-9]+$ ]] || die_usage "--nice '$NICE': expected an integer"
[[ "$STAT" == best || "$STAT" == median ]] || die_usage "--stat '$STAT': expected best or median"
[[ "$HOSTS" =~ ^[1-9][0-9]*$ ]] || die_usage "--hosts '$HOSTS': expected a positive integer"
[ $((NP % HOSTS)) -eq 0 ] || die_usage "--hosts $HOSTS: does not divide --np $NP"
[ -z "$RATE" ] || [ "$HOSTS" -gt 1 ] || die_usage "--rate: only with --hosts 2 or more"

failed=0
PEERS=()
if [ -n "$FROM" ]; then
  [ -d "$FROM" ] || die_usage "--from '$FROM': no such directory"
  OUT_DIR="$(cd "$FROM" && pwd)"
else
  BUILD_DIR="$(cd "$BUILD_DIR" 2> /dev/null && pwd)" || die_usage "--build-dir: no such directory"
  BIN="$BUILD_DIR/bin"
  for tool in kolorun kolo-fusion-bench; do
    [ -x "$BIN/$tool" ] || die_usage "--build-dir '$BUILD_DIR': no $BIN/$tool (build it first)"
  done
  if [ -z "$OUT_DIR" ]; then
    OUT_DIR="$(mktemp -d /tmp/kolo-fusion.XXXXXX)"
  fi
  mkdir -p "$OUT_DIR" || die_usage "--out '$OUT_DIR': cannot create it"
  OUT_DIR="$(cd "$OUT_DIR" && pwd)"

  WORKLOADS=(resnet50 small)
  for w in "${WORKLOADS[@]}"; do
    "$BIN/kolo-fusion-bench" --print-tensors "$w" > "$OUT_DIR/$w.tensors"
  done

  PEERS=(kolo-fused kolo-unfused)
  if [ -x "$BIN/mpi-fusion-bench" ] && command -v mpirun > /dev/null; then
    PEERS+=(mpi)
  else
    echo "# note: no $BIN/mpi-fusion-bench or mpirun: the MPI column stays empty" >&2
  fi
  if "$PYTHON" -c "import torch.distributed as d; assert d.is_gloo_available()" 2> /dev/null; then
    PEERS+=(gloo)
  else
    echo "# note: $PYTHON lacks torch with gloo (python3-torch): the gloo column stays empty" >&2
  fi

  RUN=(timeout "$RUN_TIMEOUT")
  [ "$NICE" -ne 0 ] && RUN=(nice -n "$NICE" timeout "$RUN_TIMEOUT")
  COMMON=(--json --windows "$WINDOWS" --window-time "$WINDOW_TIME")
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Launch words of each kind of peer: this host, or the namespaces.
  KOLORUN=("$BIN/kolorun" -np "$NP")
  MPIRUN=(mpirun -np "$NP" --oversubscribe)
  PER_HOST=$((NP / HOSTS))
  if [ "$HOSTS" -gt 1 ]; then
    # shellcheck source=tests/multihost/netns.sh
    source "$ROOT/tests/multihost/netns.sh"
    netns_require
    netns_up "$HOSTS" "$RATE"
    KOLORUN=("$BIN/kolorun" -np "$NP" -H "$(netns_hosts "$PER_HOST")"
      --ssh-command "$NETNS_SSH")
    # As tests/multihost/mpirun_allreduce_test.sh: mpirun starts every orted
    # itself through the agent, OpenMPI's traffic stays on the hosts' subnet.
    # shellcheck disable=SC2054  # the commas are inside one value
    MPIRUN=(mpirun -np "$NP" -H "$(netns_hosts "$PER_HOST")"
      --mca plm_rsh_agent "$NETNS_SSH" --mca plm_rsh_no_tree_spawn 1
      --mca btl self,vader,tcp --mca btl_tcp_if_include "$NETNS_SUBNET.0/24"
      --mca oob_tcp_if_include "$NETNS_SUBNET.0/24" -x PATH -x LD_LIBRARY_PATH)
  fi
  # gloo: spawns its ranks on this host, or one process per rank in its
  # host's namespace meeting at host 1 (rank 0).
  run_gloo() {
    if [ "$HOSTS" -eq 1 ]; then
      "${RUN[@]}" "$PYTHON" "$ROOT/bench/gloo_fusion.py" -np "$NP" "$@"
      return
    fi
    local r pids=() rc=0 port=$((29500 + $$ % 1000))
    for ((r = 0; r < NP; r++)); do
      netns_exec $((r / PER_HOST + 1)) "${RUN[@]}" "$PYTHON" "$ROOT/bench/gloo_fusion.py" \
        -np "$NP" --rank "$r" --master "${NETNS_IPS[1]}:$port" --ifname eth0 "$@" &
      pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=$?; done
    return $rc
  }

  run_peer() {  # peer, workload, output file
    local peer="$1" w="$2" out="$3"
    case "$peer" in
      kolo-fused)
        KOLO_FUSION_THRESHOLD=67108864 "${RUN[@]}" "${KOLORUN[@]}" \
          "$BIN/kolo-fusion-bench" --workload "$w" "${COMMON[@]}" ;;
      kolo-unfused)
        KOLO_FUSION_THRESHOLD=0 "${RUN[@]}" "${KOLORUN[@]}" \
          "$BIN/kolo-fusion-bench" --workload "$w" "${COMMON[@]}" ;;
      mpi)
        "${RUN[@]}" "${MPIRUN[@]}" "$BIN/mpi-fusion-bench" \
          --tensors "$OUT_DIR/$w.tensors" --workload "$w" "${COMMON[@]}" ;;
      gloo)
        run_gloo --tensors "$OUT_DIR/$w.tensors" --workload "$w" "${COMMON[@]}" ;;
      direct)
        KOLO_FUSION_THRESHOLD=67108864 "${RUN[@]}" "${KOLORUN[@]}" \
          "$BIN/kolo-fusion-bench" --mode direct "${COMMON[@]}" ;;
    esac > "$out" 2> "${out%.jsonl}.stderr"
  }

  cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  where="one host"
  [ "$HOSTS" -gt 1 ] && where="$HOSTS network-namespace hosts ($PER_HOST each, links ${RATE:-unshaped})"
  echo "$where" > "$OUT_DIR/where"
  echo "# fusion: $NP ranks on $where; workloads (a) resnet50, (b) small; peers ${PEERS[*]} + direct"
  echo "# machine: $(nproc) cores, $cpu, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# each run: $WINDOWS windows of ~$WINDOW_TIME s, median steps/s; $REPEATS runs per peer" \
    "(interleaved), median of the runs kept"
  echo "# raw output: $OUT_DIR$([ "$NICE" -ne 0 ] && echo ", peers run under nice -n $NICE")"
  for rep in $(seq 1 "$REPEATS"); do
    jobs=()
    for w in "${WORKLOADS[@]}"; do
      for peer in "${PEERS[@]}"; do jobs+=("$peer:$w"); done
    done
    jobs+=("direct:-")
    for job in "${jobs[@]}"; do
      peer="${job%%:*}" w="${job#*:}"
      out="$OUT_DIR/$peer.$w.run$rep.jsonl"
      start=$(date +%s%N)
      status=ok
      run_peer "$peer" "$w" "$out" || { status="FAILED (exit $?)"; failed=1; }
      elapsed_ms=$((($(date +%s%N) - start) / 1000000))
      printf '# run %d/%d %-12s %-8s %4d.%01d s  %s\n' "$rep" "$REPEATS" "$peer" "$w" \
        $((elapsed_ms / 1000)) $((elapsed_ms % 1000 / 100)) "$status"
      if [ "$status" != ok ]; then
        sed 's/^/#   /' "${out%.jsonl}.stderr" | tail -5
      fi
    done
  done
  echo "# load after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"

fi
rc=0
"$PYTHON" - "$OUT_DIR" "$NP" "$STRICT" "$STAT" <<'EOF' || rc=$?
import glob, json, os, statistics, sys

out_dir, np, strict, stat = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]

# runs[(peer, workload, case)] = [steps/s of each run]; by_round: the same
# by run number (the peers' runs of one number are one interleaved round)
runs, by_round, wrong, meta = {}, {}, [], {}
for path in sorted(glob.glob(os.path.join(out_dir, "*.run*.jsonl"))):
    peer, workload, run = os.path.basename(path).split(".")[:3]
    with open(path) as f:
        for line in f:
            if "{" not in line:  # kolorun prefixes rank 0's lines with "[0] "
                continue
            rec = json.loads(line[line.index("{"):])
            key = (peer, workload, rec["case"])
            runs.setdefault(key, []).append(rec["steps_per_s"])
            by_round.setdefault(key, {})[int(run[3:])] = rec["steps_per_s"]
            meta[(workload, "tensors")] = rec["tensors"]
            meta[(workload, "bytes")] = rec["bytes"]
            if peer == "direct":
                meta[(rec["case"], "bytes")] = rec["bytes"]
            if rec.get("check") != "ok":
                wrong.append(f"{peer} {workload} {rec['case']} ({os.path.basename(path)})")

def sps(peer, workload, case=None):
    case = case or {"kolo-fused": "runtime", "kolo-unfused": "runtime"}.get(peer, peer)
    v = runs.get((peer, workload, case))
    return (max(v) if stat == "best" else statistics.median(v)) if v else None

def ratio(a, b):
    return a / b if (a and b) else None

fmt = lambda v, d=1: f"{v:.{d}f}" if v is not None else "-"
try:
    with open(os.path.join(out_dir, "where")) as f:
        where = f.read().strip()
except OSError:
    where = "one host"
print(f"\n# ranks on {where}")
names = {"resnet50": "(a) resnet50", "small": "(b) small"}
cols = ["kolo-fused", "kolo-unfused", "mpi", "gloo"]
nruns = max((len(v) for v in runs.values()), default=0)
print(f"\n## steps per second ({stat} of {nruns} runs; higher is better)\n")
print("| workload | tensors | MiB | kolo fused | kolo unfused | MPI per tensor | gloo per tensor"
      " | fused / unfused | fused / MPI | fused / gloo |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
table = {}
for w in ("resnet50", "small"):
    v = {p: sps(p, w) for p in cols}
    table[w] = v
    mib = meta.get((w, "bytes"), 0) / (1 << 20)
    print(f"| {names[w]} | {meta.get((w, 'tensors'), '-')} | {mib:.1f} | "
          + " | ".join(fmt(v[p]) for p in cols) + " | "
          + " | ".join(fmt(ratio(v["kolo-fused"], v[p]), 2) + "x"
                       for p in ("kolo-unfused", "mpi", "gloo")) + " |")

# The table's ratios take each column's own best (or median) run, which may
# come from different rounds; on a machine whose speed changes between
# rounds, the ratio within each round says more.
rounds = []
for w in ("resnet50", "small"):
    f = by_round.get(("kolo-fused", w, "runtime"), {})
    u = by_round.get(("kolo-unfused", w, "runtime"), {})
    per = [f"{f[k] / u[k]:.2f}x" for k in sorted(f) if k in u and u[k]]
    if per:
        rounds.append(f"{names[w]} {', '.join(per)}")
if rounds:
    print("\nkolo fused / unfused within each round: " + "; ".join(rounds))

d64, r64, dtot, copy = (sps("direct", "-", c)
                        for c in ("direct-64M", "runtime-64M", "direct-total", "copy-total"))
ms = lambda s: 1e3 / s if s else None
print(f"\n## single collectives (ms per call, {stat} of the runs)\n")
print("copy-total: (a)'s tensors copied into one buffer and back, no collective (what a\n"
      "fusion buffer adds to direct-total)\n")
print("| case | bytes | ms |")
print("| --- | ---: | ---: |")
dsmall, dsmalltot, dsmallseg = (
    sps("direct", "-", c)
    for c in ("direct-small", "direct-small-total", "direct-small-segmented"))
for case, s in (("direct-64M", d64), ("runtime-64M", r64), ("direct-total", dtot),
                ("copy-total", copy), ("direct-small", dsmall),
                ("direct-small-total", dsmalltot), ("direct-small-segmented", dsmallseg)):
    print(f"| {case} | {meta.get((case, 'bytes'), '-')} | {fmt(ms(s), 2)} |")
bound = ratio(dsmalltot, dsmall)
if bound:
    print(f"\n(b)'s floor: {fmt(ms(dsmall), 2)} ms for its 1,000 allreduces one by one, "
          f"{fmt(ms(dsmalltot), 2)} ms for one allreduce of all its bytes: no runtime can show "
          f"fused / unfused above {bound:.2f}x on this machine")
segbound = ratio(dsmallseg, dsmall)
if segbound:
    print(f"the fused step's own collective (one segmented allreduce over the 1,000 tensors) "
          f"takes {fmt(ms(dsmallseg), 2)} ms: with it, at most {segbound:.2f}x")

goals = []
fa = table["resnet50"]["kolo-fused"]
goals.append(("(b) fused >= 3 x unfused",
              ratio(table["small"]["kolo-fused"], table["small"]["kolo-unfused"]), 3.0, True, "x"))
goals.append(("(a) fused step within 15% of one allreduce of the same bytes",
              ratio(ms(fa), ms(dtot)), 1.15, False, "x"))
goals.append(("(a) fused >= 2 x per-tensor MPI_Allreduce",
              ratio(fa, table["resnet50"]["mpi"]), 2.0, True, "x"))
goals.append(("64 MiB: runtime / direct time < 1.05",
              ratio(ms(r64), ms(d64)), 1.05, False, "x"))
print("\n## goals (issue 4)\n")
missed = 0
for name, value, target, higher, unit in goals:
    if value is None:
        print(f"- n/a  {name}: not measured")
        missed += 1
        continue
    ok = value >= target if higher else value < target if "<" in name else value <= target
    missed += 0 if ok else 1
    print(f"- {'PASS' if ok else 'MISS'}  {name}: {value:.3f}{unit} (target {target:g}{unit})")
if np != 2:
    print(f"# note: the goals are stated for 2 ranks; this run used {np}")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, w in zip(axes, ("resnet50", "small")):
        vals = [table[w][p] or 0 for p in cols]
        bars = ax.bar(cols, vals, color=["#1f77b4", "#aec7e8", "#ff7f0e", "#2ca02c"])
        ax.bar_label(bars, labels=[fmt(v) for v in vals], fontsize=8)
        ax.set_title(f"{names[w]}: {meta.get((w, 'tensors'), '?')} tensors")
        ax.set_ylabel("steps / s (higher is better)")
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"kolo runtime fusion, {np} ranks, {where} ({stat} of {nruns} runs)")
    fig.tight_layout()
    png = os.path.join(out_dir, "fusion.png")
    fig.savefig(png, dpi=100)
    print(f"\n# plot: {png}")
except ImportError:
    print("\n# plot skipped: python3-matplotlib is not installed (scripts/install-deps.sh)")

if wrong:
    print("\nWRONG RESULTS: " + "; ".join(wrong))
    sys.exit(1)
sys.exit(3 if (strict and missed) else 0)
EOF
if [ $failed -ne 0 ]; then
  echo "fusion.sh: some runs failed; their stderr is in $OUT_DIR" >&2
  exit 1
fi
exit $rc

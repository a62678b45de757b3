#!/usr/bin/env bash
# Compares kolo's allreduce with OpenMPI's MPI_Allreduce and Gloo's, in one go
# on this machine, and checks the performance goals of issue 2.
#
#   bench/compare_allreduce.sh [--build-dir build] [--np 2] [--repeats 3]
#                              [--stat best|median] [--min-time 0.25] [--strict]
#
# Peers, all float32 sum allreduce over the same sizes and rank count:
#   kolo-shm   build/bin/kolorun -np N build/bin/kolo-bench          (default transport)
#   kolo-tcp   the same with KOLO_TRANSPORT=tcp (loopback sockets)
#   openmpi    mpirun -np N build/bin/mpi-bench (tools/bench/mpi_allreduce_bench.c)
#   ompi-nopf  the same with glibc's mmap threshold raised, so that OpenMPI's
#              temporary buffer for large messages is reused instead of being
#              mmapped and page-faulted at every call (information only; the
#              goals are against plain openmpi, as the issue states them)
#   gloo       bench/gloo_allreduce.py (torch.distributed, backend gloo)
# Every tool times back-to-back iterations after a barrier (total / iters, max
# over ranks), with iterations raised so that each size runs --min-time
# seconds, and verifies the result. Each peer runs --repeats times, the runs
# interleaved; per size the best (lowest time) or the median is kept.
#
# Exit status: 0 when every run worked and every result was right (goals
# missed are reported, not fatal unless --strict: then 3); 1 when a run
# failed or a result was wrong; 2 on a bad option.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
NP=2
REPEATS=3
STAT=best
MIN_TIME=0.25
ITERS=5
WARMUP=5
STRICT=0
SIZES="8,1K,64K,1M,4M,16M,64M"
OUT_DIR=""
ONLY=""
NICE=0
PYTHON=/usr/bin/python3
RUN_TIMEOUT=600

usage() {
  sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  cat <<EOF
Options:
  --build-dir DIR  where bin/kolorun, bin/kolo-bench, bin/mpi-bench are ($BUILD_DIR)
  --np N           ranks ($NP)
  --repeats R      runs per peer ($REPEATS)
  --stat S         best (lowest time of the runs) or median ($STAT)
  --min-time S     seconds each size runs per run ($MIN_TIME)
  --sizes LIST     sizes ($SIZES); the goals need 8, 1M, 4M and 64M
  --out DIR        keep the raw JSON and logs there (default: a temp dir)
  --peers LIST     run only these, e.g. openmpi,gloo (the baselines alone)
  --nice N         run every peer under 'nice -n N' (e.g. -20 as root, to keep
                   other work on a shared machine from disturbing the figures)
  --strict         exit 3 when a goal is missed
EOF
}

die_usage() {
  echo "compare_allreduce.sh: $*" >&2
  echo "run 'bench/compare_allreduce.sh --help' for the options" >&2
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
    --stat) STAT="$2" ;;
    --min-time) MIN_TIME="$2" ;;
    --sizes) SIZES="$2" ;;
    --out) OUT_DIR="$2" ;;
    --peers) ONLY="$2" ;;
    --nice) NICE="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$NP" =~ ^[1-9][0-9]*$ ]] || die_usage "--np '$NP': expected a positive integer"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die_usage "--repeats '$REPEATS': expected a positive integer"
[[ "$STAT" == best || "$STAT" == median ]] || die_usage "--stat '$STAT': expected best or median"
[[ "$NICE" =~ ^-?[0-9]+$ ]] || die_usage "--nice '$NICE': expected an integer"
[[ "$MIN_TIME" =~ ^[0-9]*\.?[0-9]+$ ]] || die_usage "--min-time '$MIN_TIME': expected seconds"

BIN="$BUILD_DIR/bin"
for tool in kolorun kolo-bench; do
  [ -x "$BIN/$tool" ] || die_usage "--build-dir '$BUILD_DIR': no $BIN/$tool (build it first)"
done
if [ -z "$OUT_DIR" ]; then
  OUT_DIR="$(mktemp -d /tmp/kolo-compare.XXXXXX)"
fi
mkdir -p "$OUT_DIR" || die_usage "--out '$OUT_DIR': cannot create it"

PEERS=(kolo-shm kolo-tcp)
if [ -x "$BIN/mpi-bench" ] && command -v mpirun > /dev/null; then
  PEERS+=(openmpi ompi-nopf)
else
  echo "# note: no $BIN/mpi-bench or mpirun: the OpenMPI columns stay empty" >&2
fi
if "$PYTHON" -c "import torch.distributed as d; assert d.is_gloo_available()" 2> /dev/null; then
  PEERS+=(gloo)
else
  echo "# note: $PYTHON lacks torch with gloo (python3-torch): the Gloo column stays empty" >&2
fi

if [ -n "$ONLY" ]; then
  selected=()
  for peer in ${ONLY//,/ }; do
    case " ${PEERS[*]} " in
      *" $peer "*) selected+=("$peer") ;;
      *) die_usage "--peers '$ONLY': '$peer' is not one of: ${PEERS[*]}" ;;
    esac
  done
  PEERS=("${selected[@]}")
fi

# Every peer's command starts with RUN: the time limit, and nice when asked
# (the ranks inherit it).
RUN=(timeout "$RUN_TIMEOUT")
[ "$NICE" -ne 0 ] && RUN=(nice -n "$NICE" timeout "$RUN_TIMEOUT")

COMMON=(--json --sizes "$SIZES" -n "$ITERS" -w "$WARMUP" --min-time "$MIN_TIME")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun -np "$NP" --oversubscribe)
NO_PAGE_FAULTS=(-x MALLOC_MMAP_THRESHOLD_=1073741824 -x MALLOC_TRIM_THRESHOLD_=4294967296)

run_peer() {  # peer, output file
  local peer="$1" out="$2"
  case "$peer" in
    kolo-shm) "${RUN[@]}" "$BIN/kolorun" -np "$NP" "$BIN/kolo-bench" "${COMMON[@]}" ;;
    kolo-tcp)
      KOLO_TRANSPORT=tcp "${RUN[@]}" "$BIN/kolorun" -np "$NP" "$BIN/kolo-bench" "${COMMON[@]}" ;;
    openmpi) "${RUN[@]}" "${MPIRUN[@]}" "$BIN/mpi-bench" "${COMMON[@]}" ;;
    ompi-nopf) "${RUN[@]}" "${MPIRUN[@]}" "${NO_PAGE_FAULTS[@]}" "$BIN/mpi-bench" "${COMMON[@]}" ;;
    gloo) "${RUN[@]}" "$PYTHON" "$ROOT/bench/gloo_allreduce.py" -np "$NP" "${COMMON[@]}" ;;
  esac > "$out" 2> "${out%.jsonl}.stderr"
}

echo "# compare_allreduce: $NP ranks, float32 sum allreduce, sizes $SIZES"
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "# machine: $(nproc) cores, $cpu, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# each peer runs $REPEATS times (interleaved), each size at least $ITERS iterations" \
  "and ${MIN_TIME} s; kept per size: $STAT of the runs"
echo "# raw output: $OUT_DIR$([ "$NICE" -ne 0 ] && echo ", peers run under nice -n $NICE")"
failed=0
for rep in $(seq 1 "$REPEATS"); do
  for peer in "${PEERS[@]}"; do
    out="$OUT_DIR/$peer.run$rep.jsonl"
    start=$(date +%s%N)
    if run_peer "$peer" "$out"; then
      status=ok
    else
      status="FAILED (exit $?)"
      failed=1
    fi
    elapsed_ms=$((($(date +%s%N) - start) / 1000000))
    printf '# run %d/%d %-10s %4d.%01d s  %s\n' "$rep" "$REPEATS" "$peer" \
      $((elapsed_ms / 1000)) $((elapsed_ms % 1000 / 100)) "$status"
    if [ "$status" != ok ]; then
      sed 's/^/#   /' "${out%.jsonl}.stderr" | tail -5
    fi
  done
done

"$PYTHON" - "$OUT_DIR" "$STAT" "$NP" "$STRICT" "${PEERS[@]}" <<'EOF'
import glob, json, os, statistics, sys

out_dir, stat, np, strict = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
peers = sys.argv[5:]
factor = 2.0 * (np - 1) / np

def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)

# results[peer][bytes] = list of time_us over runs; checks that failed
results, wrong = {}, []
for peer in peers:
    results[peer] = {}
    for path in sorted(glob.glob(os.path.join(out_dir, f"{peer}.run*.jsonl"))):
        with open(path) as f:
            for line in f:
                if "{" not in line:
                    continue
                try:
                    rec = json.loads(line[line.index("{"):])
                except ValueError:
                    continue
                results[peer].setdefault(rec["bytes"], []).append(rec["time_us"])
                if rec.get("check") not in ("ok", "-"):
                    wrong.append(f"{peer} {rec['bytes']} bytes ({os.path.basename(path)})")

def time_of(peer, nbytes):
    runs = results.get(peer, {}).get(nbytes)
    if not runs:
        return None
    return min(runs) if stat == "best" else statistics.median(runs)

def busbw(nbytes, t):
    return nbytes / (t * 1e3) * factor if t else None  # GB/s

sizes = sorted({b for p in results.values() for b in p})
fmt_t = lambda t: f"{t:10.2f}" if t is not None else f"{'-':>10s}"
fmt_b = lambda b: f"{b:8.3f}" if b is not None else f"{'-':>8s}"

for peer in peers:
    print(f"\n## {peer}: {stat} of {len(glob.glob(os.path.join(out_dir, peer + '.run*.jsonl')))} runs")
    print(f"# {'bytes':>10s} {'time(us)':>10s} {'algbw':>8s} {'busbw':>8s}   (GB/s)  runs(us)")
    for b in sizes:
        t = time_of(peer, b)
        runs = results[peer].get(b, [])
        alg = b / (t * 1e3) if t else None
        print(f"  {b:10d} {fmt_t(t)} {fmt_b(alg)} {fmt_b(busbw(b, t))}            "
              + " ".join(f"{x:.1f}" for x in runs))

def ratio(a, b):
    return a / b if (a is not None and b) else None

fmt_r = lambda r: f"{r:7.2f}" if r is not None else f"{'-':>7s}"
print(f"\n## summary ({stat} of the runs): busbw in GB/s; ratios are kolo busbw / peer busbw"
      " (= peer time / kolo time), so > 1 means kolo is faster")
print(f"# {'size':>6s} {'shm us':>10s} {'shm bw':>8s} {'tcp bw':>8s} {'ompi bw':>8s} {'nopf bw':>8s}"
      f" {'gloo bw':>8s} | {'shm/ompi':>8s} {'shm/nopf':>8s} {'shm/gloo':>8s} {'tcp/ompi':>8s}"
      f" {'tcp/gloo':>8s}")
for b in sizes:
    t = {p: time_of(p, b) for p in ("kolo-shm", "kolo-tcp", "openmpi", "ompi-nopf", "gloo")}
    bw = {p: busbw(b, v) for p, v in t.items()}
    r = lambda a, c: ratio(t[c], t[a])
    print(f"  {human(b):>6s} {fmt_t(t['kolo-shm'])} {fmt_b(bw['kolo-shm'])} {fmt_b(bw['kolo-tcp'])}"
          f" {fmt_b(bw['openmpi'])} {fmt_b(bw['ompi-nopf'])} {fmt_b(bw['gloo'])} |"
          f"  {fmt_r(r('kolo-shm', 'openmpi'))}  {fmt_r(r('kolo-shm', 'ompi-nopf'))}"
          f"  {fmt_r(r('kolo-shm', 'gloo'))}  {fmt_r(r('kolo-tcp', 'openmpi'))}"
          f"  {fmt_r(r('kolo-tcp', 'gloo'))}")
t8 = {p: time_of(p, 8) for p in ("kolo-shm", "kolo-tcp", "openmpi", "ompi-nopf", "gloo")}
if t8["kolo-shm"] is not None:
    print("# 8 B latency (us): " + "  ".join(f"{p} {v:.2f}" for p, v in t8.items() if v is not None)
          + (f"   kolo-shm / openmpi = {t8['kolo-shm'] / t8['openmpi']:.2f}" if t8["openmpi"] else ""))

# Goals of issue 2 (2 ranks on one host). Each: name, value, target, comparison.
M = 1 << 20
goals = []
def goal(name, value, target, higher_is_better, unit):
    goals.append((name, value, target, higher_is_better, unit))

def bwratio(a, c, nbytes):
    ta, tc = time_of(a, nbytes), time_of(c, nbytes)
    return tc / ta if (ta and tc) else None

goal("64 MiB shm busbw >= 2 x OpenMPI", bwratio("kolo-shm", "openmpi", 64 * M), 2.0, True, "x")
goal("64 MiB shm busbw >= 2.5 x Gloo", bwratio("kolo-shm", "gloo", 64 * M), 2.5, True, "x")
t_k, t_o = time_of("kolo-shm", 8), time_of("openmpi", 8)
goal("8 B shm latency <= 1.2 x OpenMPI", t_k / t_o if (t_k and t_o) else None, 1.2, False, "x")
goal("1 MiB shm busbw >= OpenMPI", bwratio("kolo-shm", "openmpi", M), 1.0, True, "x")
goal("4 MiB shm busbw >= OpenMPI", bwratio("kolo-shm", "openmpi", 4 * M), 1.0, True, "x")
goal("tcp 8 B latency <= 80 us", time_of("kolo-tcp", 8), 80.0, False, " us")
goal("tcp 64 MiB busbw >= 2 x Gloo", bwratio("kolo-tcp", "gloo", 64 * M), 2.0, True, "x")

print(f"\n## goals (issue 2), from the {stat} of the runs")
missed = 0
for name, value, target, higher, unit in goals:
    if value is None:
        print(f"  n/a   {name}: not measured")
        missed += 1
        continue
    ok = value >= target if higher else value <= target
    missed += 0 if ok else 1
    how = f"{value:.2f}{unit} (target {target:g}{unit}"
    if not ok:
        off = (target / value if higher else value / target) if value else float("inf")
        how += f", missed by a factor {off:.2f}"
    print(f"  {'PASS' if ok else 'MISS'}  {name}: {how})")
if np != 2:
    print(f"# note: the goals are stated for 2 ranks; this run used {np}")
nopf = bwratio("kolo-shm", "ompi-nopf", 64 * M)
if nopf is not None:
    print(f"# info: 64 MiB shm busbw / OpenMPI without page-fault overhead = {nopf:.2f}x")
if wrong:
    print("\nWRONG RESULTS: " + "; ".join(wrong))
    sys.exit(1)
sys.exit(3 if (strict and missed) else 0)
EOF
rc=$?
if [ $failed -ne 0 ]; then
  echo "compare_allreduce.sh: some runs failed; their stderr is in $OUT_DIR" >&2
  exit 1
fi
exit $rc

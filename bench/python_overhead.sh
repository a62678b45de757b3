#!/usr/bin/env bash
# The Python layer's cost per operation (issue 15): a training step of
# 1,000 allreduces of 4 KiB through kolo.torch (bench/python_overhead.py)
# next to the same step in C++ through the runtime (kolo-fusion-bench
# --workload small, fused as bench/fusion.sh's kolo-fused), 2 ranks on this
# machine, in one run: the two alternate round by round, so that a machine
# whose speed drifts hits both alike. Prints each round's ms/step of each,
# their ratio and the Python layer's share per operation, then the medians
# over the rounds and the goal of issue 15.
#
#   bench/python_overhead.sh [--build-dir build] [--rounds 6] [--windows 5]
#                            [--window-time 0.5] [--modes torch[,lean,...]]
#                            [--out DIR] [--nice N] [--strict] [--from DIR]
#
# A step (both sides): an average allreduce of each of 1,000 float32
# tensors of 1,024 values (small0999.weight .. small0000.weight, backward
# order), in place, then a wait for each in submission order; fusion
# threshold 64 MiB (KOLO_FUSION_THRESHOLD), so the runtime fuses them.
# Peers:
#   c++            kolorun -np 2 kolo-fusion-bench --workload small
#   python-torch   kolorun -np 2 python_overhead.py --mode torch:
#                  hvd.allreduce_async_(t, name=...) + hvd.synchronize(h)
#   python-generic (--modes) as python-torch with kolo.torch's native tensor
#                  reader removed (tensors read through torch's Python
#                  attributes, as KOLO_TORCH_NATIVE_READER=0)
#   python-native  (--modes) the existing binding alone: allreduce_async,
#                  wait, release
#   python-lean    (--modes) the lean entry points alone: allreduce_submit,
#                  wait_release
#   python-sketch  (--modes) a minimal Horovod-style wrapper over the lean
#                  entry points (python_overhead.py's make_sketch)
#   python-pyimpl  (--modes) kolo.torch's Python implementation of
#                  allreduce_async_ and synchronize, which the C fast path
#                  (python/native/tensor_handles.cc) replaced in the common case
# Each tool reports the median steps/s of its timed windows (each window's
# time is the slowest rank's). Per round and peer: ms/step = 1000 / steps/s;
# ratio = python ms/step / c++ ms/step of the same round; share (us per
# operation) = (python ms/step - c++ ms/step) * 1000 us / 1000 operations.
# The Python tool also reports its submit loop and synchronize loop per
# operation, and the synchronize loop alone when every operation is already
# done ("sync done": the wrapper's and binding's own cost of a synchronize).
# Goal (issue 15): python-torch / c++ at most 3x (median over the rounds);
# the Python layer's share under 2 us per operation.
# --from DIR prints the tables again from an earlier run's raw output.
#
# Exit status: 0 when every run worked and every result was right (goals
# missed are reported; with --strict they exit 3); 1 when a run failed or a
# result was wrong; 2 on a bad option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
NP=2
ROUNDS=6
WINDOWS=5
WINDOW_TIME=0.5
MODES=torch
OUT_DIR=""
NICE=0
STRICT=0
FROM=""
PYTHON=/usr/bin/python3
RUN_TIMEOUT=600

usage() {
  sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  cat <<EOF
Options:
  --build-dir DIR    where bin/kolorun, bin/kolo-fusion-bench and python/kolo are
  --np N             ranks ($NP; the goal is stated for 2)
  --rounds R         rounds, each running every peer once ($ROUNDS)
  --windows N        timed windows per run ($WINDOWS)
  --window-time S    seconds per window ($WINDOW_TIME)
  --modes M[,M...]   Python peers: torch, generic, native, lean, sketch, pyimpl ($MODES; torch is
                     always run)
  --out DIR          keep the raw JSON and logs there (default: a temp dir)
  --from DIR         no runs: the tables from DIR's raw output
  --nice N           run every peer under 'nice -n N'
  --strict           exit 3 when a goal is missed
EOF
}

die_usage() {
  echo "python_overhead.sh: $*" >&2
  echo "run 'bench/python_overhead.sh --help' for the options" >&2
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
    --rounds) ROUNDS="$2" ;;
    --windows) WINDOWS="$2" ;;
    --window-time) WINDOW_TIME="$2" ;;
    --modes) MODES="$2" ;;
    --from) FROM="$2" ;;
    --out) OUT_DIR="$2" ;;
    --nice) NICE="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$NP" =~ ^[1-9][0-9]*$ ]] || die_usage "--np '$NP': expected a positive integer"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die_usage "--rounds '$ROUNDS': expected a positive integer"
[[ "$WINDOWS" =~ ^[1-9][0-9]*$ ]] || die_usage "--windows '$WINDOWS': expected a positive integer"
[[ "$WINDOW_TIME" =~ ^[0-9]*\.?[0-9]+$ ]] || die_usage "--window-time '$WINDOW_TIME': expected seconds"
[[ "$NICE" =~ ^-?[0-9]+$ ]] || die_usage "--nice '$NICE': expected an integer"
PEERS=(c++ python-torch)
IFS=, read -r -a mode_list <<< "$MODES"
for m in "${mode_list[@]}"; do
  case "$m" in
    torch) ;;
    generic|native|lean|sketch|pyimpl) PEERS+=("python-$m") ;;
    *) die_usage "--modes: '$m': expected torch, generic, native, lean, sketch or pyimpl" ;;
  esac
done

failed=0
if [ -n "$FROM" ]; then
  [ -d "$FROM" ] || die_usage "--from '$FROM': no such directory"
  OUT_DIR="$(cd "$FROM" && pwd)"
else
  BUILD_DIR="$(cd "$BUILD_DIR" 2> /dev/null && pwd)" || die_usage "--build-dir: no such directory"
  BIN="$BUILD_DIR/bin"
  for tool in kolorun kolo-fusion-bench; do
    [ -x "$BIN/$tool" ] || die_usage "--build-dir '$BUILD_DIR': no $BIN/$tool (build it first)"
  done
  [ -d "$BUILD_DIR/python/kolo" ] ||
    die_usage "--build-dir '$BUILD_DIR': no python/kolo (build the kolo_native target)"
  PYTHONPATH="$BUILD_DIR/python" "$PYTHON" -c "import torch, kolo.torch" 2> /dev/null ||
    die_usage "$PYTHON cannot import torch and kolo.torch from $BUILD_DIR/python"
  if [ -z "$OUT_DIR" ]; then
    OUT_DIR="$(mktemp -d /tmp/kolo-python-overhead.XXXXXX)"
  fi
  mkdir -p "$OUT_DIR" || die_usage "--out '$OUT_DIR': cannot create it"
  OUT_DIR="$(cd "$OUT_DIR" && pwd)"

  RUN=(timeout "$RUN_TIMEOUT")
  [ "$NICE" -ne 0 ] && RUN=(nice -n "$NICE" timeout "$RUN_TIMEOUT")
  COMMON=(--json --windows "$WINDOWS" --window-time "$WINDOW_TIME")
  export KOLO_FUSION_THRESHOLD=67108864

  run_peer() {  # peer, output file
    local peer="$1" out="$2"
    case "$peer" in
      c++)
        "${RUN[@]}" "$BIN/kolorun" -np "$NP" "$BIN/kolo-fusion-bench" --workload small \
          "${COMMON[@]}" ;;
      python-*)
        PYTHONPATH="$BUILD_DIR/python" "${RUN[@]}" "$BIN/kolorun" -np "$NP" "$PYTHON" \
          "$ROOT/bench/python_overhead.py" --mode "${peer#python-}" "${COMMON[@]}" ;;
    esac > "$out" 2> "${out%.jsonl}.stderr"
  }

  cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "# python overhead: $NP ranks on one host; 1,000 allreduces of 4 KiB per step;" \
    "peers ${PEERS[*]}"
  echo "# machine: $(nproc) cores, $cpu, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# each run: $WINDOWS windows of ~$WINDOW_TIME s, median steps/s; $ROUNDS rounds," \
    "peers alternating (reversed order in even rounds)"
  echo "# raw output: $OUT_DIR$([ "$NICE" -ne 0 ] && echo ", peers run under nice -n $NICE")"
  for round in $(seq 1 "$ROUNDS"); do
    order=("${PEERS[@]}")
    if [ $((round % 2)) -eq 0 ]; then
      order=()
      for ((i = ${#PEERS[@]} - 1; i >= 0; i--)); do order+=("${PEERS[i]}"); done
    fi
    for peer in "${order[@]}"; do
      out="$OUT_DIR/$peer.round$round.jsonl"
      start=$(date +%s%N)
      status=ok
      run_peer "$peer" "$out" || { status="FAILED (exit $?)"; failed=1; }
      elapsed_ms=$((($(date +%s%N) - start) / 1000000))
      printf '# round %d/%d %-14s %4d.%01d s  %s\n' "$round" "$ROUNDS" "$peer" \
        $((elapsed_ms / 1000)) $((elapsed_ms % 1000 / 100)) "$status"
      if [ "$status" != ok ]; then
        sed 's/^/#   /' "${out%.jsonl}.stderr" | tail -5
      fi
    done
  done
  echo "# load after the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

rc=0
"$PYTHON" - "$OUT_DIR" "$STRICT" <<'EOF' || rc=$?
import glob, json, os, statistics, sys

out_dir, strict = sys.argv[1], sys.argv[2] == "1"

# recs[peer][round] = the record of rank 0
recs, wrong = {}, []
for path in sorted(glob.glob(os.path.join(out_dir, "*.round*.jsonl"))):
    peer, rnd = os.path.basename(path)[:-len(".jsonl")].rsplit(".round", 1)
    with open(path) as f:
        for line in f:
            if "{" not in line:  # kolorun prefixes rank 0's lines with "[0] "
                continue
            rec = json.loads(line[line.index("{"):])
            recs.setdefault(peer, {})[int(rnd)] = rec
            if rec.get("check") != "ok":
                wrong.append(f"{peer} round {rnd}")

cpp = recs.get("c++", {})
pythons = sorted((p for p in recs if p.startswith("python-")),
                 key=lambda p: (p != "python-torch", p))
if not cpp or not pythons:
    print("python_overhead.sh: no results in " + out_dir, file=sys.stderr)
    sys.exit(1)

ms = lambda rec: 1e3 / rec["steps_per_s"] if rec and rec.get("steps_per_s") else None
fmt = lambda v, d=2: f"{v:.{d}f}" if v is not None else "-"
med = lambda vals: statistics.median(vals) if vals else None

print("\n## ms per step, round by round (lower is better)\n")
print("ratio: python ms / c++ ms of the same round; share: (python - c++) ms per step "
      "/ 1,000 operations, in us per operation\n")
header = "| round | c++ ms |"
rule = "| ---: | ---: |"
for p in pythons:
    header += f" {p} ms | ratio | share us/op |"
    rule += " ---: | ---: | ---: |"
print(header)
print(rule)
summary = {p: {"ratio": [], "share": [], "ms": []} for p in pythons}
cpp_ms = []
for rnd in sorted(cpp):
    c = ms(cpp[rnd])
    cpp_ms.append(c)
    row = f"| {rnd} | {fmt(c)} |"
    for p in pythons:
        v = ms(recs[p].get(rnd))
        if v is None or c is None:
            row += " - | - | - |"
            continue
        summary[p]["ms"].append(v)
        summary[p]["ratio"].append(v / c)
        summary[p]["share"].append(v - c)  # ms per 1,000 ops = us per op
        row += f" {fmt(v)} | {fmt(v / c)}x | {fmt(v - c)} |"
    print(row)
row = f"| median | {fmt(med(cpp_ms))} |"
for p in pythons:
    s = summary[p]
    row += f" {fmt(med(s['ms']))} | {fmt(med(s['ratio']))}x | {fmt(med(s['share']))} |"
print(row)

print("\n## where the Python step's time goes (us per operation, median over the rounds)\n")
print("submit: the loop of submissions; synchronize: the loop of synchronizes (includes "
      "waiting for the collective); sync done: that loop when every operation has "
      "already finished\n")
print("native reader: whether kolo.torch's fast path read tensors with "
      "kolo.torch._tensor_reader (torch and generic peers)\n")
print("| peer | submit | synchronize | sync done | native reader |")
print("| --- | ---: | ---: | ---: | --- |")
c_submit = med([r["submit_ms"] for r in cpp.values() if "submit_ms" in r])
print(f"| c++ (Runtime::enqueue) | {fmt(c_submit)} | - | - | - |")
for p in pythons:
    rs = list(recs[p].values())
    reader = "-"
    if p in ("python-torch", "python-generic"):
        states = {r.get("native_reader") for r in rs}
        reader = "/".join(("yes" if v else "no") if v is not None else "?"
                          for v in sorted(states, key=str))
    print(f"| {p} | {fmt(med([r['submit_us_per_op'] for r in rs]))} | "
          f"{fmt(med([r['sync_us_per_op'] for r in rs]))} | "
          f"{fmt(med([r['sync_done_us_per_op'] for r in rs]))} | {reader} |")

print("\n## goal (issue 15)\n")
torch_s = summary.get("python-torch")
missed = 0
goals = []
if torch_s:
    goals.append(("python-torch step / c++ step at most 3x", med(torch_s["ratio"]), 3.0, "x"))
    goals.append(("the Python layer's share under 2 us per operation",
                  med(torch_s["share"]), 2.0, " us"))
for name, value, target, unit in goals:
    if value is None:
        print(f"- n/a   {name}: not measured")
        missed += 1
        continue
    ok = value <= target if unit == "x" else value < target
    missed += 0 if ok else 1
    print(f"- {'PASS' if ok else 'MISS'}  {name}: {value:.2f}{unit} (median of "
          f"{len(torch_s['ratio'])} rounds; target {target:g}{unit})")
if wrong:
    print("\nWRONG RESULTS: " + "; ".join(wrong))
    sys.exit(1)
sys.exit(3 if (strict and missed) else 0)
EOF
if [ $failed -ne 0 ]; then
  echo "python_overhead.sh: some runs failed; their stderr is in $OUT_DIR" >&2
  exit 1
fi
exit $rc

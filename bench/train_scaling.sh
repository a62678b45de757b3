#!/usr/bin/env bash
# Training throughput on 1 and 2 ranks (1 torch thread each) of the
# Fashion-MNIST examples, next to PyTorch's own DistributedDataParallel
# (gloo) on the same model, and the machine's real ceiling: two independent
# 1-rank runs started at the same time, their images/s added up (on a small
# shared machine two processes together reach less than twice one alone, so
# 2x is not the ceiling). Prints a markdown table with kolo's 2-rank
# throughput against that ceiling and against DDP, and draws a PNG of
# throughput and efficiency against ranks (python3-matplotlib).
#
#   bench/train_scaling.sh [--build-dir build] [--steps 200] [--repeats 2]
#                          [--stat best|median] [--out DIR] [--nice N] [--from DIR]
#                          [--python /usr/bin/python3]
#
# --python: the interpreter of the Python example and of DDP, whose torch is
# the one compared (e.g. torch 2.x: --build-dir build-torch2 --python
# .venv-torch2/bin/python, scripts/torch2-tests.sh makes both).
#
# Programs (batch 64 per rank, Adam, 2 epochs of --steps steps each; the
# throughput is the second epoch's, over the slowest rank's time):
#   cpp  build/bin/fashion_mnist           (libtorch; left out when not built)
#   py   examples/fashion_mnist.py         (kolo.torch)
#   ddp  bench/ddp_fashion_mnist.py        (torch DDP + gloo on 127.0.0.1)
# For each: 1 rank (kolorun -np 1; DDP --nproc 1), 2 ranks (kolorun -np 2;
# DDP --nproc 2), and for cpp and py the ceiling (two kolorun -np 1 started
# together). DDP's ceiling is py's (the same Python model and data code).
# Every configuration runs --repeats times, the rounds interleaved, and the
# best run (highest images/s: the least disturbed on a shared machine) or
# the median is kept; each round's 2-rank / ceiling ratio (runs close in
# time) is printed too. --from DIR prints the table again from a run's JSON.
#
# Goals (issue 5): kolo's 2-rank throughput >= 95% of the ceiling and >=
# DDP's. Exit status: 0 when every run worked (goals missed are reported),
# 1 when a run failed, 2 on a bad option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
STEPS=200
REPEATS=2
STAT=best
OUT_DIR=""
NICE=0
FROM=""
PYTHON=/usr/bin/python3
RUN_TIMEOUT=600

usage() {
  sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --stat) STAT="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --nice) NICE="$2"; shift 2 ;;
    --from) FROM="$2"; shift 2 ;;
    --python) PYTHON="$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "train_scaling.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
case "$STAT" in best | median) ;; *) echo "train_scaling.sh: --stat best|median" >&2; exit 2 ;; esac
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"

if [[ -n "$FROM" ]]; then
  OUT_DIR="$FROM"
else
  if [[ -z "$OUT_DIR" ]]; then OUT_DIR="$(mktemp -d /tmp/train_scaling.XXXXXX)"; fi
  mkdir -p "$OUT_DIR"
  KOLORUN="$BUILD_DIR/bin/kolorun"
  [[ -x "$KOLORUN" ]] || { echo "train_scaling.sh: no $KOLORUN (build first)" >&2; exit 1; }
  ls "$BUILD_DIR"/python/kolo/_native*.so >/dev/null 2>&1 ||
    { echo "train_scaling.sh: no kolo Python package in $BUILD_DIR/python" >&2; exit 1; }
  export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
  export OMP_NUM_THREADS=1
  PROGRAMS=(py)
  if [[ -x "$BUILD_DIR/bin/fashion_mnist" ]]; then PROGRAMS=(cpp py); fi
  COMMON=(--epochs 2 --max-steps "$STEPS" --batch-size 64 --threads 1 --optimizer adam)

  train_cmd() { # program -> the example's command line
    case "$1" in
      cpp) echo "$BUILD_DIR/bin/fashion_mnist" ;;
      py) echo "$PYTHON $ROOT/examples/fashion_mnist.py" ;;
    esac
  }
  # run NAME COMMAND...: one run, its output in OUT_DIR/NAME.log.
  run() {
    local name="$1"; shift
    echo "+ $*" >"$OUT_DIR/$name.log"
    if ! timeout "$RUN_TIMEOUT" nice -n "$NICE" "$@" >>"$OUT_DIR/$name.log" 2>&1; then
      echo "train_scaling.sh: $name failed:" >&2
      tail -20 "$OUT_DIR/$name.log" >&2
      exit 1
    fi
  }
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(getconf _NPROCESSORS_ONLN) cores; uptime before: $(uptime)"
    echo "steps per epoch: $STEPS, batch 64 per rank, 1 thread per rank, repeats: $REPEATS"
  } >"$OUT_DIR/meta.txt"
  for ((r = 1; r <= REPEATS; ++r)); do
    for p in "${PROGRAMS[@]}"; do
      # shellcheck disable=SC2207
      cmd=($(train_cmd "$p"))
      echo "round $r/$REPEATS: $p 1 rank, 2 ranks, ceiling" >&2
      run "${p}_1_r$r" "$KOLORUN" -np 1 "${cmd[@]}" "${COMMON[@]}" --no-progress \
        --json "$OUT_DIR/${p}_1_r$r.json" --baseline "$OUT_DIR/${p}_base.json"
      run "${p}_2_r$r" "$KOLORUN" -np 2 "${cmd[@]}" "${COMMON[@]}" --no-progress \
        --json "$OUT_DIR/${p}_2_r$r.json" --baseline "$OUT_DIR/${p}_base.json"
      # The ceiling: two independent jobs of one rank each, at the same time.
      run "${p}_ceilA_r$r" "$KOLORUN" -np 1 "${cmd[@]}" "${COMMON[@]}" --no-progress \
        --json "$OUT_DIR/${p}_ceilA_r$r.json" --baseline "$OUT_DIR/${p}_ceilA.base" &
      pid_a=$!
      run "${p}_ceilB_r$r" "$KOLORUN" -np 1 "${cmd[@]}" "${COMMON[@]}" --no-progress \
        --json "$OUT_DIR/${p}_ceilB_r$r.json" --baseline "$OUT_DIR/${p}_ceilB.base" &
      pid_b=$!
      wait "$pid_a" || exit 1
      wait "$pid_b" || exit 1
    done
    echo "round $r/$REPEATS: ddp 1 rank, 2 ranks" >&2
    for n in 1 2; do
      run "ddp_${n}_r$r" "$PYTHON" "$ROOT/bench/ddp_fashion_mnist.py" --nproc "$n" \
        --epochs 2 --max-steps "$STEPS" --batch-size 64 --threads 1 \
        --json "$OUT_DIR/ddp_${n}_r$r.json"
    done
  done
  echo "uptime after: $(uptime)" >>"$OUT_DIR/meta.txt"
fi

/usr/bin/python3 - "$OUT_DIR" "$STAT" <<'EOF'  # the report: Debian's matplotlib
import glob, json, os, re, statistics, sys

out, stat = sys.argv[1], sys.argv[2]
runs = {}  # (program, config) -> [images/s per round]
for path in sorted(glob.glob(os.path.join(out, "*_r*.json"))):
    m = re.match(r"(cpp|py|ddp)_(1|2|ceilA|ceilB)_r(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    with open(path) as f:
        rate = json.load(f)["images_per_second"]
    runs.setdefault((m.group(1), m.group(2)), {})[int(m.group(3))] = rate
# The ceiling of a round: both independent runs of that round added up.
for p in ("cpp", "py"):
    a, b = runs.get((p, "ceilA"), {}), runs.get((p, "ceilB"), {})
    both = {r: a[r] + b[r] for r in a if r in b}
    if both:
        runs[(p, "ceil")] = both


def pick(p, c):
    rates = list(runs.get((p, c), {}).values())
    if not rates:
        return None
    return max(rates) if stat == "best" else statistics.median(rates)


res = {p: {c: pick(p, c) for c in ("1", "2", "ceil")} for p in ("cpp", "py", "ddp")}
res["ddp"]["ceil"] = res["py"]["ceil"]
names = {"cpp": "kolo C++ (libtorch)", "py": "kolo Python (kolo.torch)",
         "ddp": "PyTorch DDP (gloo)"}
fmt = lambda v: "-" if v is None else "%.0f" % v
pct = lambda a, b: "-" if a is None or not b else "%.1f%%" % (100 * a / b)
ddp2 = res["ddp"]["2"]
print("images/s, batch 64 per rank, 1 thread per rank (%s of the runs)\n" % stat)
print("| program | 1 rank | 2 ranks | speedup | ceiling (2 x 1 rank at once) "
      "| 2 ranks / ceiling | 2 ranks / DDP 2 ranks |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for p in ("cpp", "py", "ddp"):
    r = res[p]
    if r["1"] is None and r["2"] is None:
        continue
    speed = "-" if not r["1"] or r["2"] is None else "%.2fx" % (r["2"] / r["1"])
    print("| %s | %s | %s | %s | %s | %s | %s |" % (
        names[p], fmt(r["1"]), fmt(r["2"]), speed, fmt(r["ceil"]),
        pct(r["2"], r["ceil"]), "-" if p == "ddp" else pct(r["2"], ddp2)))
print()
for p in ("cpp", "py"):
    r = res[p]
    if r["2"] is None or not r["ceil"]:
        continue
    goal_c = r["2"] >= 0.95 * r["ceil"]
    goal_d = ddp2 is not None and r["2"] >= ddp2
    print("%s: 2 ranks at %s of the ceiling (goal >= 95%%: %s), %s of DDP's "
          "(goal >= 100%%: %s)" % (names[p], pct(r["2"], r["ceil"]),
                                    "met" if goal_c else "MISSED",
                                    pct(r["2"], ddp2), "met" if goal_d else "MISSED"))
# Per round: the 2-rank run against the ceiling measured right after it
# (the pairs closest in time, so the least affected by a changing load).
print()
for p in ("cpp", "py"):
    two, ceil = runs.get((p, "2"), {}), runs.get((p, "ceil"), {})
    ddp = runs.get(("ddp", "2"), {})
    rounds = sorted(r for r in two if r in ceil)
    if rounds:
        print("%s, per round: 2 ranks / ceiling %s; 2 ranks / DDP %s" % (
            names[p], ", ".join(pct(two[r], ceil[r]) for r in rounds),
            ", ".join(pct(two[r], ddp.get(r)) for r in rounds)))
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump({"stat": stat, "results": res, "runs": {"%s_%s" % k: v for k, v in
                                                       runs.items()}}, f, indent=1)

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("\n(no plot: apt-get install python3-matplotlib)")
    sys.exit(0)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
colors = {"cpp": "tab:blue", "py": "tab:orange", "ddp": "tab:green"}
for p in ("cpp", "py", "ddp"):
    r = res[p]
    if r["1"] is None or r["2"] is None:
        continue
    ax1.plot([1, 2], [r["1"], r["2"]], "o-", color=colors[p], label=names[p])
    ax2.plot([1, 2], [1.0, r["2"] / (2 * r["1"])], "o-", color=colors[p],
             label=names[p] + " (vs 2 x 1 rank)")
    if r["ceil"]:
        ax2.plot([2], [r["2"] / r["ceil"]], "s", color=colors[p], mfc="none",
                 ms=9, label=names[p] + " (vs ceiling)")
for p, mark in (("cpp", "*"), ("py", "P")):
    if res[p]["ceil"]:
        ax1.plot([2], [res[p]["ceil"]], mark, color=colors[p], ms=11,
                 label="ceiling for %s" % p)
ax1.set_xlabel("ranks (1 thread each)")
ax1.set_ylabel("images / s")
ax1.set_title("Fashion-MNIST CNN: throughput")
ax1.set_xticks([1, 2])
ax1.legend(fontsize=7)
ax2.axhline(0.95, ls="--", color="gray", lw=0.8)
ax2.set_xlabel("ranks (1 thread each)")
ax2.set_ylabel("efficiency")
ax2.set_title("efficiency (dashed: the 95% goal)")
ax2.set_xticks([1, 2])
ax2.set_ylim(0, 1.2)
ax2.legend(fontsize=7)
fig.tight_layout()
png = os.path.join(out, "train_scaling.png")
fig.savefig(png, dpi=110)
print("\nplot: %s" % png)
EOF
cat "$OUT_DIR/meta.txt" 2>/dev/null || true
echo "raw output: $OUT_DIR"

#!/usr/bin/env bash
# Convergence of the parameter-server modes on Fashion-MNIST (issue 16):
# the example (examples/fashion_mnist.py, or --example cpp for the libtorch
# one) trains the same number of epochs in four modes,
#
#   allreduce  kolorun -np 3              3 ranks, synchronous allreduce
#   sync-ps    kolorun --servers 1 -np 4  1 server, 3 workers
#   downpour   kolorun --servers 1 -np 4
#   easgd      kolorun --servers 1 -np 4
#
# with the example's defaults otherwise (Adam, batch 64 per worker; the
# learning rate scaled linearly for allreduce, sync-ps and easgd, unscaled
# for downpour, which applies one worker's batch per update). Prints a
# markdown table of the test accuracy after each epoch and the final one's
# difference to allreduce, and writes a PNG of test accuracy against epochs
# and against training time (the sum of the epochs' training seconds,
# evaluation left out) for the four modes.
#
#   bench/ps_convergence.sh [--build-dir build] [--epochs 3] [--example py|cpp]
#                           [--png docs/images/ps_convergence.png] [--out DIR]
#                           [-- extra example flags]
#
# Exit status: 0 when every run worked; 1 otherwise; 2 on a bad option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
EPOCHS=3
EXAMPLE=py
PNG="$ROOT/docs/images/ps_convergence.png"
OUT_DIR=""
EXTRA=()
PYTHON=/usr/bin/python3

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die_usage() {
  echo "ps_convergence.sh: $*" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
  esac
  [ $# -ge 2 ] || die_usage "$1: needs a value (or unknown option)"
  case "$1" in
    --build-dir) BUILD_DIR="$2" ;;
    --epochs) EPOCHS="$2" ;;
    --example) EXAMPLE="$2" ;;
    --png) PNG="$2" ;;
    --out) OUT_DIR="$2" ;;
    *) die_usage "$1: unknown option" ;;
  esac
  shift 2
done
[[ "$EPOCHS" =~ ^[1-9][0-9]*$ ]] || die_usage "--epochs '$EPOCHS': expected a positive integer"
KOLORUN="$BUILD_DIR/bin/kolorun"
[ -x "$KOLORUN" ] || die_usage "no $KOLORUN (build first, or --build-dir)"
case "$EXAMPLE" in
  py) PROGRAM=("$PYTHON" "$ROOT/examples/fashion_mnist.py") ;;
  cpp)
    PROGRAM=("$BUILD_DIR/bin/fashion_mnist")
    [ -x "${PROGRAM[0]}" ] || die_usage "no ${PROGRAM[0]} (built with libtorch only)"
    ;;
  *) die_usage "--example '$EXAMPLE': expected py or cpp" ;;
esac
[ -n "$OUT_DIR" ] || OUT_DIR="$(mktemp -d /tmp/kolo-ps-convergence.XXXXXX)"
mkdir -p "$OUT_DIR"
export PYTHONPATH="$BUILD_DIR/python" KOLO_TIMEOUT="${KOLO_TIMEOUT:-300}"

STATUS=0
for mode in allreduce sync-ps downpour easgd; do
  launch=(-np 3)
  [ "$mode" = allreduce ] || launch=(--servers 1 -np 4)
  echo "# $mode (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  if ! "$KOLORUN" "${launch[@]}" "${PROGRAM[@]}" --mode "$mode" --epochs "$EPOCHS" \
    --no-progress --json "$OUT_DIR/$mode.json" --baseline "$OUT_DIR/none.json" \
    "${EXTRA[@]}" >"$OUT_DIR/$mode.log" 2>&1; then
    echo "ps_convergence.sh: the $mode run failed; its output:" >&2
    sed 's/^/  /' "$OUT_DIR/$mode.log" >&2
    STATUS=1
  fi
  grep -E "epoch [0-9]+/|parameter servers" "$OUT_DIR/$mode.log" >&2 || true
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

"$PYTHON" - "$OUT_DIR" "$PNG" "$EXAMPLE" <<'EOF'
import json, os, sys
out, png, example = sys.argv[1:4]
modes = ["allreduce", "sync-ps", "downpour", "easgd"]
runs = {}
for m in modes:
    path = os.path.join(out, m + ".json")
    if os.path.exists(path):
        runs[m] = json.load(open(path))
if not runs:
    sys.exit("ps_convergence.sh: no run gave a record")
epochs = max(len(r["epoch_accuracy"]) for r in runs.values())
ref = runs.get("allreduce", {}).get("test_accuracy")
print("\n%s example, 3 workers (ps modes: + 1 server), %d epoch(s)\n" % (example, epochs))
print("| mode | " + " | ".join("epoch %d" % (e + 1) for e in range(epochs)) +
      " | final vs allreduce | training time (s) |")
print("| --- |" + " ---: |" * (epochs + 2))
for m in modes:
    r = runs.get(m)
    if r is None:
        print("| %s | failed |" % m)
        continue
    diff = "%+.2f points" % (100 * (r["test_accuracy"] - ref)) if ref is not None else ""
    print("| %s | %s | %s | %.1f |" % (m, " | ".join("%.2f%%" % (100 * a) for a in
                                                    r["epoch_accuracy"]),
                                       diff, sum(r["epoch_seconds"])))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("\n(no plot: apt-get install python3-matplotlib)")
    sys.exit(0)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
for m in modes:
    r = runs.get(m)
    if r is None:
        continue
    acc = [100 * a for a in r["epoch_accuracy"]]
    wall, t = [], 0.0
    for s in r["epoch_seconds"]:
        t += s
        wall.append(t)
    ax1.plot(range(1, len(acc) + 1), acc, "o-", label=m)
    ax2.plot(wall, acc, "o-", label=m)
ax1.set_xlabel("epoch")
ax1.set_ylabel("test accuracy (%)")
ax1.set_title("Fashion-MNIST (%s example): accuracy per epoch" % example)
ax1.set_xticks(range(1, epochs + 1))
ax1.legend()
ax2.set_xlabel("training time (s; shared, loaded machine)")
ax2.set_ylabel("test accuracy (%)")
ax2.set_title("accuracy against training time")
ax2.legend()
fig.tight_layout()
os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
fig.savefig(png, dpi=100)
print("\nplot: %s" % png)
EOF
echo "raw output: $OUT_DIR" >&2
exit "$STATUS"

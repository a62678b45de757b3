#!/usr/bin/env bash
# Instructions per operation of one rank's step (issue 15), counted by
# callgrind, so the figure does not depend on the machine's load: the
# calling thread's instructions per allreduce of python-torch
# (hvd.allreduce_async_ + hvd.synchronize; tensors read by
# kolo.torch._tensor_reader when installed), python-generic (the same
# reading tensors through torch's Python attributes), python-pyimpl (the same
# through kolo.torch's Python implementation, which the C fast path
# replaced), python-lean (the binding's allreduce_submit + wait_release)
# and the C++ step (kolo-fusion-bench
# --workload small: Runtime::enqueue + Handle::wait), and the Python
# layer's share (python-torch - c++).
#
#   bench/python_step_instructions.sh [--build-dir build] [--steps 3]
#
# Python: bench/python_step_instructions.py, instrumentation on for --steps
# steps of 1,000 operations after a warm-up step. C++: whole runs of
# (--steps + 1) and 1 timed steps, the difference over --steps x 1,000
# operations (start-up and shutdown cancel out). Needs valgrind; each
# Python run takes about a minute.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
STEPS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    *) echo "python_step_instructions.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
OUT="$(mktemp -d /tmp/kolo-step-instructions.XXXXXX)"

# The instruction total of thread 1 (the calling thread) in callgrind's
# output files $1.<pid>-01.
thread1() {
  awk '/^totals:/ {print $2}' "$1".*-01
}

python_count() {  # mode -> instructions per operation
  KOLO_CALLGRIND=1 PYTHONPATH="$BUILD_DIR/python" valgrind --tool=callgrind \
    --instr-atstart=no --separate-threads=yes --callgrind-out-file="$OUT/$1.%p" \
    /usr/bin/python3 "$ROOT/bench/python_step_instructions.py" "$1" "$STEPS" \
    >"$OUT/$1.log" 2>&1 || { cat "$OUT/$1.log" >&2; exit 1; }
  echo $(( $(thread1 "$OUT/$1") / (STEPS * 1000) ))
}

cpp_run() {  # steps -> thread 1's instructions
  KOLO_FUSION_THRESHOLD=67108864 valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$OUT/cpp$1.%p" "$BUILD_DIR/bin/kolo-fusion-bench" \
    --workload small --windows 1 --steps "$1" --warmup 1 >"$OUT/cpp$1.log" 2>&1 ||
    { cat "$OUT/cpp$1.log" >&2; exit 1; }
  thread1 "$OUT/cpp$1"
}

cpp_low=$(cpp_run 1)
cpp_high=$(cpp_run $((STEPS + 1)))
cpp=$(( (cpp_high - cpp_low) / (STEPS * 1000) ))
torch=$(python_count torch)
generic=$(python_count generic)
lean=$(python_count lean)
pyimpl=$(python_count pyimpl)
reader=$(sed -n 's/^native reader: //p' "$OUT/torch.log")
echo "instructions per operation, calling thread ($STEPS steps of 1,000; raw output in $OUT)"
echo "| path | instructions/op |"
echo "| --- | ---: |"
echo "| c++ (Runtime::enqueue + Handle::wait) | $cpp |"
echo "| python-lean (allreduce_submit + wait_release) | $lean |"
echo "| python-pyimpl (kolo.torch's Python implementation) | $pyimpl |"
echo "| python-torch (allreduce_async_ + synchronize; native reader: $reader) | $torch |"
echo "| python-generic (the same, tensors read through torch's Python attributes) | $generic |"
echo "| python-torch - c++ (the Python layer's share) | $(( torch - cpp )) |"
echo "| python-generic - c++ | $(( generic - cpp )) |"

#!/usr/bin/env bash
# Horovod's four TensorFlow 2 examples, unchanged but for their step counts,
# on 2 ranks under kolorun, with `import horovod.tensorflow(.keras)` served
# by kolo (the conformance shim) and MNIST by Debian's Fashion-MNIST
# (scripts/local_mnist). Each must exit 0 and print what it prints when it
# works; a failing example's output is shown. Not in `make test` (86 s of
# both cores at load 5, 2026-11-28); run it by hand:
#
#   tests/python/tf_horovod_examples.sh BUILD_DIR PYTHON [HOROVOD_DIR]
#
# BUILD_DIR: kolo's build (bin/kolorun, python/); PYTHON: an interpreter with
# TensorFlow and tf_keras (.venv/bin/python); HOROVOD_DIR: the conformance
# copy of Horovod (default: ../shared/conformance/horovod or
# ../../shared/conformance/horovod next to the project). The examples are
# Keras 2 scripts (compile(experimental_run_tf_function=...),
# optimizer.variables()), so they run under tf_keras: TF_USE_LEGACY_KERAS=1.
#
# Step counts, cut so that the run is brief (the copies are edited with sed;
# the test fails if an edit no longer matches):
#   tensorflow2_mnist.py              dataset.take(10000 // size) -> 40 // size
#   tensorflow2_keras_mnist.py        24 epochs of 500 // size steps -> 2 of 20 // size
#   tensorflow2_keras_mnist_elastic.py  the same, under kolorun --min-np 2
#   tensorflow2_synthetic_benchmark.py  flags: --batch-size 4 --num-warmup-batches 1
#                                     --num-batches-per-iter 1 --num-iters 2
# TF_EXAMPLES_LOGS=DIR keeps each example's output there (NAME.log).
# Exit status: 0 all passed, 1 one failed, 77 (skipped) without the
# Horovod copy or TensorFlow.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="$(cd "${1:?BUILD_DIR}" && pwd)"
PYTHON="${2:?PYTHON}"
[[ "$PYTHON" == */* ]] && PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
HOROVOD="${3:-}"
if [[ -z "$HOROVOD" ]]; then
  for d in "$ROOT/../shared/conformance/horovod" "$ROOT/../../shared/conformance/horovod"; do
    [[ -d "$d/examples" ]] && { HOROVOD="$(cd "$d" && pwd)"; break; }
  done
fi
if [[ -z "$HOROVOD" || ! -f "$HOROVOD/examples/tensorflow2_mnist.py" ]]; then
  echo "tf_horovod_examples.sh: skipped: no Horovod conformance copy (pass HOROVOD_DIR)"
  exit 77
fi
if ! "$PYTHON" -c 'import tensorflow, tf_keras' 2>/dev/null; then
  echo "tf_horovod_examples.sh: skipped: $PYTHON has no TensorFlow and tf_keras"
  exit 77
fi

WORK="$(mktemp -d /tmp/tf_horovod_examples.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$ROOT/scripts/local_mnist:$HOROVOD/shim:$BUILD_DIR/python"
export TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2
KOLORUN="$BUILD_DIR/bin/kolorun"
failed=0

# shorten EXAMPLE 'OLD' 'NEW'...: copy EXAMPLE into WORK with each OLD (a
# fixed string) replaced by NEW; fails if an OLD does not occur.
shorten() {
  local example="$1" text
  shift
  text="$(cat "$HOROVOD/examples/$example")"
  while [[ $# -gt 0 ]]; do
    if [[ "$text" != *"$1"* ]]; then
      echo "tf_horovod_examples.sh: $example no longer contains '$1'" >&2
      return 1
    fi
    text="${text//"$1"/"$2"}"
    shift 2
  done
  printf '%s\n' "$text" >"$WORK/$example"
}

# check NAME PATTERN... -- COMMAND...: run COMMAND in WORK (timeout 300 s);
# it must exit 0 and its output match every extended regex PATTERN.
check() {
  local name="$1" patterns=() status
  shift
  while [[ "$1" != "--" ]]; do patterns+=("$1"); shift; done
  shift
  local start=$SECONDS
  (cd "$WORK" && timeout 300 "$@") >"$WORK/$name.log" 2>&1
  status=$?
  [[ -n "${TF_EXAMPLES_LOGS:-}" ]] && mkdir -p "$TF_EXAMPLES_LOGS" && cp "$WORK/$name.log" "$TF_EXAMPLES_LOGS/"
  local missing=()
  for p in "${patterns[@]}"; do grep -Eq -- "$p" "$WORK/$name.log" || missing+=("$p"); done
  if [[ $status -eq 0 && ${#missing[@]} -eq 0 ]]; then
    echo "PASS $name ($((SECONDS - start)) s)"
  else
    echo "FAIL $name: exit status $status; missing: ${missing[*]:-nothing}"
    grep -v '^I0000\|^E0000\|^W0000\|^WARNING: All log' "$WORK/$name.log" | tail -30
    failed=1
  fi
}

shorten tensorflow2_mnist.py 'dataset.take(10000 // hvd.size())' 'dataset.take(40 // hvd.size())' &&
  check tensorflow2_mnist 'Step #0	Loss: [0-9.]+' 'Step #10	Loss: [0-9.]+' -- \
    "$KOLORUN" -np 2 "$PYTHON" tensorflow2_mnist.py || failed=1

shorten tensorflow2_keras_mnist.py 'steps_per_epoch=500 // hvd.size()' 'steps_per_epoch=20 // hvd.size()' \
  'epochs=24' 'epochs=2' &&
  check tensorflow2_keras_mnist 'Epoch 2/2' '10/10 .*loss: [0-9.]+.*accuracy: [0-9.]+' -- \
    "$KOLORUN" -np 2 "$PYTHON" tensorflow2_keras_mnist.py || failed=1

shorten tensorflow2_keras_mnist_elastic.py 'steps_per_epoch=500 // hvd.size()' \
  'steps_per_epoch=20 // hvd.size()' 'epochs=24-state.epoch' 'epochs=2-state.epoch' &&
  check tensorflow2_keras_mnist_elastic 'Epoch 2/2' '10/10 .*loss: [0-9.]+.*accuracy: [0-9.]+' -- \
    "$KOLORUN" --min-np 2 -np 2 "$PYTHON" tensorflow2_keras_mnist_elastic.py || failed=1

cp "$HOROVOD/examples/tensorflow2_synthetic_benchmark.py" "$WORK/"
check tensorflow2_synthetic_benchmark 'Number of CPUs: 2' 'Iter #1: [0-9.]+ img/sec per CPU' \
  'Total img/sec on 2 CPU\(s\): [0-9.]+' -- \
  "$KOLORUN" -np 2 "$PYTHON" tensorflow2_synthetic_benchmark.py --no-cuda --batch-size 4 \
  --num-warmup-batches 1 --num-batches-per-iter 1 --num-iters 2

exit $failed

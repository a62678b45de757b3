#!/usr/bin/env bash
# Horovod's own test suites played against real Horovod 0.28.1
# (bench/peers/setup-horovod.sh), the reference for kolo's results in
# docs/python.md. It runs the conformance runner beside the project
# (../shared/conformance/horovod/run.sh) unchanged, with an interpreter that
# drops the runner's PYTHONPATH (kolo's shim and build tree), so
# `import horovod.torch` is Horovod itself, launched by mpirun (Horovod's MPI
# controller).
#
#   bench/peers/horovod-conformance.sh [--np N] [--suite torch] [PATTERN]
#
# Logs in $OUT (default /tmp/hvd-reference); prints PASS / FAIL / SKIP / HANG
# per test and the runner's closing line.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CONFORMANCE="${KOLO_HOROVOD_CONFORMANCE:-$ROOT/../shared/conformance/horovod}"
HVD_PY="${KOLO_PEERS:-$ROOT/.peers}/horovod/bin/python"
"$ROOT/bench/peers/setup-horovod.sh" --check >/dev/null ||
  { echo "horovod-conformance: Horovod is not installed: run bench/peers/setup-horovod.sh" >&2; exit 1; }
[ -x "$CONFORMANCE/run.sh" ] ||
  { echo "horovod-conformance: no $CONFORMANCE/run.sh (set KOLO_HOROVOD_CONFORMANCE)" >&2; exit 1; }
WRAP="$(mktemp -d /tmp/hvd-reference-py.XXXXXX)"
trap 'rm -rf "$WRAP"' EXIT
printf '#!/bin/sh\nunset PYTHONPATH\nexec %s "$@"\n' "$HVD_PY" >"$WRAP/python"
chmod +x "$WRAP/python"
export OUT="${OUT:-/tmp/hvd-reference}"
cd "$ROOT"
"$CONFORMANCE/run.sh" --python "$WRAP/python" "$@" | sed -u 's/ on kolo, / on Horovod 0.28.1, /'

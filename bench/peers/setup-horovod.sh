#!/usr/bin/env bash
# Installs Horovod 0.28.1, the peer of bench/vs_horovod.sh and of the
# reference conformance run (bench/peers/horovod-conformance.sh), into a
# virtual environment of its own that sees Debian's torch 1.13:
#
#   bench/peers/setup-horovod.sh            build and install (10-20 minutes)
#   bench/peers/setup-horovod.sh --check    exit 0 when it is installed
#
# The environment is $KOLO_PEERS/horovod (default .peers/horovod in the source
# tree, ignored by git). Horovod is built from PyPI's source distribution with
# its PyTorch, Gloo and MPI parts and without TensorFlow and MXNet; nothing of
# Horovod's code is kept in kolo's tree. Never part of `make test`.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="${KOLO_PEERS:-$ROOT/.peers}"
VENV="$PEERS/horovod"
VERSION=0.28.1
LOG="$PEERS/horovod-build.log"

installed() {
  "$VENV/bin/python" - <<PY >/dev/null 2>&1
import horovod, horovod.torch as hvd
assert horovod.__version__ == "$VERSION", horovod.__version__
assert hvd.gloo_built() and hvd.mpi_built()
PY
}

if installed; then
  echo "setup-horovod: Horovod $VERSION is installed in $VENV"
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "setup-horovod: Horovod $VERSION is not installed in $VENV (run bench/peers/setup-horovod.sh)" >&2
  exit 1
fi

for tool in cmake g++ mpicxx; do
  command -v "$tool" >/dev/null || { echo "setup-horovod: $tool is missing (run scripts/install-deps.sh)" >&2; exit 1; }
done
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "setup-horovod: Debian's python3-torch is missing (run scripts/install-deps.sh)" >&2; exit 1; }

mkdir -p "$PEERS"
[[ -x "$VENV/bin/python" ]] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
echo "setup-horovod: [1/2] Horovod's Python dependencies into $VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  "setuptools<70" wheel "cloudpickle" "psutil" "pyyaml" "packaging" "cffi>=1.4.0"

echo "setup-horovod: [2/2] building Horovod $VERSION against torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') (10-20 minutes; log: $LOG)"
start=$(date +%s)
(
  export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1
  export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=
  export MAKEFLAGS="-j$(nproc)"
  "$VENV/bin/python" -m pip install -v --no-cache-dir --no-build-isolation --disable-pip-version-check \
    "horovod[pytorch]==$VERSION" >"$LOG" 2>&1
) &
build=$!
while kill -0 $build 2>/dev/null; do
  sleep 30
  step=$(grep -o '\[ *[0-9]*%\]' "$LOG" 2>/dev/null | tail -1 || true)
  echo "setup-horovod: building, $(( $(date +%s) - start )) s ${step:+, cmake $step}"
done
if ! wait $build || ! installed; then
  echo "setup-horovod: building Horovod $VERSION failed; the last lines of $LOG:" >&2
  grep -E 'error|Error' "$LOG" | tail -15 >&2 || tail -30 "$LOG" >&2
  exit 1
fi
echo "setup-horovod: Horovod $VERSION installed in $VENV in $(( $(date +%s) - start )) s"

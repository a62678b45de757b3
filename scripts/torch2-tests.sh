#!/usr/bin/env bash
# kolo on torch 2.x, from the same source tree as on Debian's torch 1.13:
#
#   1. .venv-torch2/: Debian's python3 with torch 2.x, torchvision, numpy 2
#      and pytest from PyPI (PyPI's x86_64 torch is a CUDA build; it runs on
#      the CPU). Created once; --setup-only stops here.
#   2. build-torch2/: kolo configured for that interpreter and that torch's
#      libtorch (the wheel's share/cmake), so kolo._native, kolo.torch's
#      native tensor reader, the libtorch integration (kolo_torch) and the
#      C++ examples are all built against torch 2.x.
#   3. ctest -L python (the Python package's tests) and -L torch (libtorch's)
#      in build-torch2, then extra ctest arguments if given.
#
#   scripts/torch2-tests.sh [--setup-only] [-- CTEST-ARGS...]
#
# Run it before any change to python/ or src/frameworks/torch lands
# (docs/python.md, "torch 1.13 and torch 2.x"). Not part of CI's run: the
# wheels (about 3 GB with their CUDA libraries) and a second build do not fit
# its budget.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-torch2"
BUILD="$ROOT/build-torch2"
PACKAGES=(torch==2.15.0 torchvision==0.29.2 "numpy>=2" pytest packaging)
SETUP_ONLY=0
CTEST_EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --setup-only) SETUP_ONLY=1; shift ;;
    --) shift; CTEST_EXTRA=("$@"); break ;;
    *) echo "usage: scripts/torch2-tests.sh [--setup-only] [-- CTEST-ARGS...]" >&2; exit 2 ;;
  esac
done

if ! "$VENV/bin/python" -c 'import torch, torchvision, numpy, pytest, packaging' 2>/dev/null; then
  echo "torch2-tests: [1/3] torch 2.x from PyPI into $VENV (about 3 GB the first time)"
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}"
fi
TORCH="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
echo "torch2-tests: [1/3] $VENV has torch $TORCH"
[ "$SETUP_ONLY" = 1 ] && exit 0

echo "torch2-tests: [2/3] building kolo against torch $TORCH in $BUILD"
mkdir -p "$BUILD"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# The wheel's libtorch_cuda finds its CUDA libraries (NCCL among them) in
# the nvidia/*/lib directories beside it; the linker must look there too
# before the CUDA toolkit's own (older) copies.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
RPATH_LINK="$(ls -d "$SITE"/nvidia/*/lib 2>/dev/null | paste -sd: || true)"
LINK_FLAGS="${RPATH_LINK:+-Wl,-rpath-link,$RPATH_LINK}"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DPython3_EXECUTABLE="$VENV/bin/python" -DKOLO_WITH_TENSORFLOW=OFF \
  -DCMAKE_PREFIX_PATH="$("$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" \
  -DCMAKE_EXE_LINKER_FLAGS="$LINK_FLAGS" -DCMAKE_SHARED_LINKER_FLAGS="$LINK_FLAGS" \
  -DCMAKE_MODULE_LINKER_FLAGS="$LINK_FLAGS" \
  >"$BUILD/configure.log" 2>&1 || { tail -30 "$BUILD/configure.log" >&2; exit 1; }
grep -q "kolo.torch._tensor_reader for torch $TORCH" "$BUILD/configure.log" ||
  { echo "torch2-tests: the tensor reader is not configured for torch $TORCH:" >&2;
    grep 'kolo:' "$BUILD/configure.log" >&2; exit 1; }
ninja -C "$BUILD" -j"$(getconf _NPROCESSORS_ONLN)"

echo "torch2-tests: [3/3] ctest -L 'python|torch' on torch $TORCH"
cd "$BUILD"
ctest -L 'python|torch' -j"$(getconf _NPROCESSORS_ONLN)" --output-on-failure "${CTEST_EXTRA[@]}"

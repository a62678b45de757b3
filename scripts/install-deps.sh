#!/usr/bin/env bash
# Installs every Debian package that kolo's build, tests, benchmarks and
# examples need, and TensorFlow's interpreter: the virtual environment .venv/
# of the source tree (Debian's python3 with TensorFlow, Keras 3 and tf_keras
# from PyPI; kept apart from Debian's torch 1.13, which needs numpy 1.x).
# Idempotent: packages already installed are checked with dpkg-query and
# nothing is printed; apt-get runs (update first) only when something is
# missing, pip only when .venv lacks a package. Run as root, or with sudo
# available.
#
#   scripts/install-deps.sh          install what is missing
#   scripts/install-deps.sh --check  exit 1 (listing them) if any is missing
set -euo pipefail

PACKAGES=(
  # build (ccache: the Makefile compiles through it when installed, so a
  # machine that builds again compiles only what changed)
  cmake ninja-build make g++ gcc pkg-config ccache
  # tests and formatting
  libgtest-dev libgmock-dev clang-format procps
  # make fuzz: libFuzzer targets (tests/fuzz/)
  clang
  # MPI engine and the OpenMPI baseline of the benchmarks
  libopenmpi-dev openmpi-bin
  # PyTorch (Gloo baseline, Python bindings, libtorch examples)
  python3 python3-dev python3-torch python3-numpy libtorch-dev pybind11-dev
  python3-pytest python3-pip
  libgloo-dev
  # examples: real Fashion-MNIST files, image-folder JPEG classifier
  dataset-fashion-mnist libjpeg-dev zlib1g-dev
  # multi-host tests in network namespaces
  iproute2
  # bench/fusion.sh's and bench/train_scaling.sh's plots
  python3-matplotlib
  # bench/synthetic.py --model resnet50 (and bench/ps_straggler.py's shapes)
  python3-torchvision
  # bench/ps_shards.sh's single-master baseline (bench/ps_mpilearn.py)
  python3-mpi4py
  # .venv/ (kolo.tensorflow, kolo.keras; see tensorflow_venv below)
  python3-venv
  # kolo.hpo and kolo-hpo (docs/hpo.md): Optuna's samplers, pruners and
  # storage, its trials table, params.yaml
  python3-optuna python3-pandas python3-yaml
)

# TensorFlow's interpreter (docs/tensorflow.md): the CPU build of TensorFlow,
# Keras 3, and tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1) without its
# dependency on the full (CUDA) tensorflow package, which would install a
# second TensorFlow over the first.
VENV="$(cd "$(dirname "$0")/.." && pwd)/.venv"
VENV_PACKAGES=(tensorflow-cpu==2.21.0 "keras>=3.10,<4" pytest packaging parameterized)
VENV_NODEPS=(tf-keras==2.21.0)
VENV_MODULES="tensorflow keras tf_keras pytest packaging parameterized"

tensorflow_venv() {
  if "$VENV/bin/python" -c "import $(echo $VENV_MODULES | tr ' ' ',')" >/dev/null 2>&1; then
    return 0
  fi
  if [[ "${1:-}" == "--check" ]]; then
    echo "missing: $VENV with TensorFlow, Keras 3 and tf_keras" >&2
    return 1
  fi
  echo "install-deps: TensorFlow's interpreter in $VENV (tensorflow-cpu, keras, tf-keras from PyPI)"
  [[ -x "$VENV/bin/python" ]] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${VENV_PACKAGES[@]}"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${VENV_NODEPS[@]}"
  echo "install-deps: $VENV done"
}

# One dpkg-query for all; a package it does not know is simply not listed.
installed=" $(dpkg-query -W -f='${Package}=${db:Status-Status} ' "${PACKAGES[@]}" 2>/dev/null || true) "
missing=()
for pkg in "${PACKAGES[@]}"; do
  if [[ "$installed" != *" $pkg=installed "* ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  tensorflow_venv "${1:-}"
  exit $?
fi

if [[ "${1:-}" == "--check" ]]; then
  echo "missing packages: ${missing[*]}" >&2
  tensorflow_venv --check || true
  exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: missing packages (${missing[*]}) and not root; install them as root" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
tensorflow_venv

#!/usr/bin/env bash
# The GPU checks of kolo (docs/gpu.md, "The GPU check"), in one run on a
# machine with a GPU: builds kolo with CUDA against that machine's PyTorch
# (its own python3; libtorch from torch.utils.cmake_prefix_path), then runs
# every check, each under its own time limit, the whole within
# KOLO_GPU_CHECK_BUDGET_S (450 s): a check starts only with at least 20 s
# of the budget left, and its limit is cut to what is left (its summary
# line says so when that cut ends it). Checks run in the order given, the
# most wanted first.
#
#   scripts/gpu-check.sh [--dry-run] [--only REGEX] OUTDIR
#   scripts/gpu-check.sh --prepare      # here: fill .gpucheck/ for the trip
#
# OUTDIR/summary.txt gets one line per check:
#   <check> PASS|FAIL|SKIP <figures or the reason>
# and OUTDIR/<check>.log its output; progress lines go to stdout. The exit
# status is 1 when any check failed (0 when all passed or skipped).
# --dry-run lists the checks with their time limits and runs nothing.
# Without a GPU (no nvidia-smi, or torch sees no device) every GPU check,
# the build included, reports SKIP with the reason.
#
# What a lent machine lacks travels in .gpucheck/ (ignored by git, made by
# --prepare, about 35 MB: the `run` tool carries it; docs/gpu.md):
# googletest's sources (built there), the Fashion-MNIST IDX files and
# Horovod's conformance suite (../shared/conformance/horovod).
#
# More checks: a file scripts/gpu-check.d/<name>.sh (the folder:
# KOLO_GPU_CHECK_EXTRAS, for the script's own test) is sourced after the
# checks below; it defines functions and adds them with
#   check NAME SECONDS FUNCTION [BEFORE]
# (at the end, or just before the check named BEFORE), and the build
# targets they need (built when the build defines them) with
#   build_targets TARGET...
# (the function runs in a fresh bash, in ROOT, with every function of
# this script and ROOT, OUT, BUILD, PY, KOLORUN, CARRIED, NEED_GPU_REASON
# exported; it writes its output to stdout, calls need_gpu first when it
# needs the GPU and the build, and gives its result with
#   result PASS|FAIL|SKIP "figures or reason"
# as its last act; a function that returns without a result FAILs).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CARRIED="${KOLO_GPU_CHECK_DATA:-$ROOT/.gpucheck}"
BUDGET_S="${KOLO_GPU_CHECK_BUDGET_S:-450}"  # the whole run ends by then
MIN_LEFT_S="${KOLO_GPU_CHECK_MIN_LEFT_S:-20}"  # a check starts only with this much left
DRY=0
ONLY=""
OUT=""
usage() { sed -n 7,9p "$0" >&2; exit 2; }

prepare() {
  local dest="$ROOT/.gpucheck"
  mkdir -p "$dest"
  grep -qx '/.gpucheck/' "$ROOT/.git/info/exclude" 2>/dev/null ||
    echo '/.gpucheck/' >>"$(git -C "$ROOT" rev-parse --git-path info/exclude)"
  rm -rf "$dest/googletest" "$dest/fashion-mnist" "$dest/conformance"
  cp -r /usr/src/googletest "$dest/googletest"
  cp -r /usr/share/datasets/fashion-mnist "$dest/fashion-mnist"
  cp -r "$ROOT/../shared/conformance/horovod" "$dest/conformance" 2>/dev/null ||
    cp -r /work/shared/conformance/horovod "$dest/conformance"
  du -sh "$dest"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    --prepare) prepare; exit $? ;;
    -h|--help) usage ;;
    -*) echo "gpu-check: unknown option $1" >&2; usage ;;
    *) OUT="$1"; shift ;;
  esac
done
[ -n "$OUT" ] || { [ "$DRY" = 1 ] && OUT=/tmp/gpu-check-dry; } || usage
[ -n "$OUT" ] || usage
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${KOLO_GPU_CHECK_BUILD:-$ROOT/build-gpu}"
KOLORUN="$BUILD/bin/kolorun"
START=$(date +%s)

# --- the machine ---------------------------------------------------------------
[ -d /usr/local/cuda/bin ] && PATH="$PATH:/usr/local/cuda/bin"
PY="$(command -v python3 || true)"
NEED_GPU_REASON=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  NEED_GPU_REASON="no GPU: nvidia-smi not found"
elif ! nvidia-smi -L >/dev/null 2>&1; then
  NEED_GPU_REASON="no GPU: nvidia-smi -L failed"
elif [ -z "$PY" ] || ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  NEED_GPU_REASON="no GPU for torch: python3 cannot import torch or torch.cuda.is_available() is False"
fi
# NCCL for the C programs too: torch's wheel brings libnccl.so.2 in the
# nvidia.nccl package (a process that imports torch has it loaded already).
if [ -z "$NEED_GPU_REASON" ]; then
  NCCL_DIR="$("$PY" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null)"
  [ -f "$NCCL_DIR/libnccl.so.2" ] && export LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
BUILD_EXTRA=""  # targets the hooks add (build_targets)
export ROOT OUT BUILD PY KOLORUN NEED_GPU_REASON CARRIED BUILD_EXTRA

# --- the runner ----------------------------------------------------------------
CHECKS=()   # "name seconds function", in the order they run
check() {
  local entry="$1 $2 $3" i
  if [ -n "${4:-}" ]; then
    for i in "${!CHECKS[@]}"; do
      if [ "${CHECKS[$i]%% *}" = "$4" ]; then
        CHECKS=("${CHECKS[@]:0:$i}" "$entry" "${CHECKS[@]:$i}")
        return
      fi
    done
    echo "gpu-check: check $1: no check $4 to go before" >&2
  fi
  CHECKS+=("$entry")
}
build_targets() { BUILD_EXTRA="${BUILD_EXTRA:+$BUILD_EXTRA }$*"; }

# Called by a check as its last act.
result() {
  echo "$1 ${2:-}" >"$OUT/.result"
  return 0
}
# A check that needs the GPU (and the build) calls this first.
need_gpu() {
  if [ -n "$NEED_GPU_REASON" ]; then result SKIP "$NEED_GPU_REASON"; exit 0; fi
  if [ ! -x "$KOLORUN" ]; then result SKIP "kolo not built with CUDA ($BUILD)"; exit 0; fi
}
py_env() {  # the built package on the path, ranks quick to give up
  export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  export KOLO_TIMEOUT=60 KOLO_STALL_SHUTDOWN=60 PYTHONDONTWRITEBYTECODE=1
}

run_check() {
  local name="$1" seconds="$2" fn="$3" log="$OUT/$1.log" t0 rc line left cut=""
  t0=$(date +%s)
  left=$((BUDGET_S - (t0 - START)))
  if [ "$left" -lt "$MIN_LEFT_S" ]; then
    line="$name SKIP no time left (${left}s of the ${BUDGET_S}s budget)"
  else
    if [ "$left" -lt "$seconds" ]; then
      cut=" (its ${seconds}s limit cut to the ${left}s left of the ${BUDGET_S}s budget)"
      seconds=$left
    fi
    rm -f "$OUT/.result"
    echo "gpu-check: [$(($(date +%s) - START))s] $name (limit ${seconds}s)"
    # A fresh bash with every function of this script (and of
    # scripts/gpu-check.d), so that a hang ends at the limit.
    timeout -k 10 "$seconds" bash -c "$(declare -f); cd '$ROOT' && $fn" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      line="$name FAIL timed out after ${seconds}s$cut (log $name.log)"
    elif [ -f "$OUT/.result" ]; then
      line="$name $(cat "$OUT/.result") [$(($(date +%s) - t0))s]"
    else
      line="$name FAIL exit $rc without a result (log $name.log: $(tail -1 "$log" | cut -c1-160))"
    fi
  fi
  echo "$line" >>"$OUT/summary.txt"
  echo "gpu-check:   $line"
}

# --- the checks of CUDA tensors through kolo (host staging) ---------------------

# The machine as seen: GPU, driver, torch, nvcc.
chk_environment() {
  {
    nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nvcc --version | tail -2; cmake --version | head -1; ninja --version; nproc
  } 2>&1
  [ -n "$NEED_GPU_REASON" ] && { result SKIP "$NEED_GPU_REASON"; return; }
  result PASS "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), torch $("$PY" -c 'import torch; print(torch.__version__)')"
}

# googletest (carried sources), then kolo with CUDA against this torch:
# libkolo, kolorun, the Python package, the device tests and what the hooks
# ask for (build_targets); the libtorch integration later (build_libtorch).
# ninja keeps going past a failed target, so one broken target leaves the
# others' checks able to run.
chk_build() {
  [ -n "$NEED_GPU_REASON" ] && { result SKIP "$NEED_GPU_REASON"; return; }
  set -e
  local gtest_args=() jobs; jobs=$(nproc)
  if [ -d "$CARRIED/googletest" ]; then
    cmake -S "$CARRIED/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=OFF >/dev/null
    ninja -C /tmp/gtest-build -j"$jobs" install >/dev/null
    gtest_args=(-DGTest_ROOT=/tmp/gtest)
  fi
  local torch_prefix pybind_dir site rpath_link link_flags
  torch_prefix="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  pybind_dir="$("$PY" -m pybind11 --cmakedir 2>/dev/null || true)"
  # As scripts/torch2-tests.sh: a wheel's libtorch_cuda finds its CUDA
  # libraries in the nvidia/*/lib directories beside it; so must the linker.
  site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  rpath_link="$(ls -d "$site"/nvidia/*/lib "$site"/nvidia/lib 2>/dev/null | paste -sd: || true)"
  link_flags="${rpath_link:+-Wl,-rpath-link,$rpath_link}"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKOLO_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DKOLO_WITH_TENSORFLOW=OFF \
    -DKOLO_WITH_MPI=OFF -DPython3_EXECUTABLE="$PY" ${pybind_dir:+-Dpybind11_DIR="$pybind_dir"} \
    -DCMAKE_PREFIX_PATH="$torch_prefix" "${gtest_args[@]}" \
    -DCMAKE_EXE_LINKER_FLAGS="$link_flags" -DCMAKE_SHARED_LINKER_FLAGS="$link_flags" \
    -DCMAKE_MODULE_LINKER_FLAGS="$link_flags"
  set +e
  build_these kolo kolorun kolo_native kolo_python_package cuda_test capi_cuda_test \
    cuda_collectives_test cuda_staging_test kolo_tensor_reader $BUILD_EXTRA
}

# Builds those of the targets that the configured build defines, with
# every core, then gives the check's result.
build_these() {
  local targets=() missing=() t
  for t in "$@"; do
    if ninja -C "$BUILD" -t query "$t" >/dev/null 2>&1; then targets+=("$t"); else missing+=("$t"); fi
  done
  if ninja -C "$BUILD" -k 0 -j"$(nproc)" "${targets[@]}"; then
    result PASS "built ${targets[*]}${missing[*]:+; not defined here: ${missing[*]}}"
  else
    result FAIL "ninja failed (log: the first error above); asked for ${targets[*]}"
  fi
}

# The libtorch integration (kolo_torch, torch_cuda_check): only the libtorch
# check needs it, so it is built just before that check.
chk_build_libtorch() {
  need_gpu
  build_these kolo_torch torch_cuda_check
}

# The device kernels' tests (tests/cuda_test.cc) and the core's own device
# tests, one rank (KOLO_DEVICE_PATH=staged: one rank has no other path):
# none may skip for want of a device. Tests of machines without a GPU skip
# here by design ("a CUDA device is present"), as does the 2-rank one.
chk_cuda_tests() {
  need_gpu
  local t failed=0 ran=0 skipped=0 nodev=0 out rc
  for t in cuda_test cuda_staging_test capi_cuda_test cuda_collectives_test; do
    [ -x "$BUILD/bin/$t" ] || { echo "$t: not built"; failed=$((failed + 1)); continue; }
    echo "== $t"
    out="$(KOLO_DEVICE_PATH=staged "$BUILD/bin/$t" 2>&1)"; rc=$?
    echo "$out"
    ran=$((ran + $(echo "$out" | grep -c '^\[       OK \]')))
    skipped=$((skipped + $(echo "$out" | grep -cE '^\[  SKIPPED \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+ \(')))
    nodev=$((nodev + $(echo "$out" | grep -cE '^(no CUDA device|this kolo build has no CUDA support)')))
    [ $rc -eq 0 ] || failed=$((failed + 1))
  done
  if [ $failed -gt 0 ] || [ $nodev -gt 0 ] || [ $ran -eq 0 ]; then
    result FAIL "$ran passed, $nodev skipped for want of a device, $failed binaries failed or missing"
  else
    result PASS "$ran tests passed; $skipped skipped, none for want of a device (see the log)"
  fi
}

# The probe (kolo_cuda_device_count through kolo._native) against nvidia-smi
# and CUDA_VISIBLE_DEVICES.
chk_probe() {
  need_gpu
  py_env
  local smi all none one
  smi=$(nvidia-smi -L | grep -c '^GPU')
  all=$("$PY" -c 'import kolo._native as n; print(n.cuda_devices()[0])')
  none=$(CUDA_VISIBLE_DEVICES= "$PY" -c 'import kolo._native as n; c, r = n.cuda_devices(); print(c, "|", r)')
  one=$(CUDA_VISIBLE_DEVICES=0 "$PY" -c 'import kolo._native as n; print(n.cuda_devices()[0])')
  echo "nvidia-smi: $smi; probe: $all; CUDA_VISIBLE_DEVICES='': $none; =0: $one"
  if [ "$all" = "$smi" ] && [ "${none%% *}" = 0 ] && [ "$one" = 1 ]; then
    result PASS "probe $all = nvidia-smi $smi; CUDA_VISIBLE_DEVICES='' -> 0 (${none#*| }); =0 -> 1"
  else
    result FAIL "probe $all, nvidia-smi $smi, CUDA_VISIBLE_DEVICES='' -> $none, =0 -> $one"
  fi
}

# A CPU-only kolo job (kolo.numpy collectives, host calls of kolo.h) creates
# no CUDA context: none of its processes appears among nvidia-smi's compute
# apps while it runs.
chk_no_context() {
  need_gpu
  py_env
  "$KOLORUN" -np 2 "$PY" "$ROOT/scripts/gpu_check/cpu_only_job.py" "$OUT/cpu_job_pids.txt"
  local rc=$?
  local apps; apps=$(tr '\n' ' ' <"$OUT/cpu_job_pids.txt" 2>/dev/null)
  if [ $rc -eq 0 ]; then result PASS "$apps"; else result FAIL "rc $rc: $apps"; fi
}

# The path a run of kolo took for device memory, as its output says it
# (KOLO_LOG_LEVEL=debug: the runtime's "device operations run on the ipc
# path"; cuda_collectives_test's "device path of the synchronous calls:
# ipc"): the distinct names, comma-separated; "unreported" when none.
paths_seen() {
  local seen
  seen=$(grep -ohE 'run on the [a-z]+ path|host-staged path|device path of the synchronous calls: [a-z]+' "$@" 2>/dev/null |
    sed -E 's/run on the ([a-z]+) path/\1/; s/host-staged path/staged/; s/.*calls: //' | sort -u | paste -sd, -)
  echo "${seen:-unreported}"
}

# cuda_collectives_test (every collective, dtype and op through the C
# calls and the runtime, device against host, bit for bit) under kolorun
# with the ranks sharing the GPU: `c_ranks PATH NP...` with
# KOLO_DEVICE_PATH=PATH; FAIL when a run fails, skips, or reports a path
# other than PATH.
c_ranks() {
  local path="$1" np fails=0 figures="" f ok skip rc seen; shift
  [ -x "$BUILD/bin/cuda_collectives_test" ] ||
    { result FAIL "cuda_collectives_test not built"; return; }
  for np in "$@"; do
    f="$OUT/c_${path}_np$np.txt"
    echo "== KOLO_DEVICE_PATH=$path kolorun -np $np cuda_collectives_test"
    KOLO_DEVICE_PATH=$path KOLO_LOG_LEVEL=debug KOLO_TIMEOUT=60 \
      "$KOLORUN" -np "$np" "$BUILD/bin/cuda_collectives_test" >"$f" 2>&1
    rc=$?
    cat "$f"
    ok=$(grep -c '\[       OK \]' "$f"); skip=$(grep -c '\[  SKIPPED \]' "$f")
    seen=$(paths_seen "$f")
    figures+="np$np: rc $rc, $ok OK lines, $skip skipped, path $seen; "
    { [ $rc -eq 0 ] && [ "$skip" -eq 0 ] && [ "$ok" -gt 0 ] && [ "$seen" = "$path" ]; } ||
      fails=$((fails + 1))
  done
  if [ $fails -eq 0 ]; then result PASS "$figures"; else result FAIL "$figures"; fi
}

# The C surface through host staging on 2 and 3 ranks sharing the GPU.
chk_c_ranks() {
  need_gpu
  c_ranks staged 2 3
}

# tests/python/test_torch_cuda.py (kolo.torch on CUDA tensors: every
# collective, dtype and op against CPU tensors element by element;
# DistributedOptimizer, fp16 compression, SyncBatchNorm, the broadcasts)
# under kolorun: `torch_ranks PATH NP...` with KOLO_DEVICE_PATH=PATH.
# On a GPU only the 2 tests of machines without one may skip.
torch_ranks() {
  local path="$1" np fails=0 figures="" f rc last skips seen; shift
  py_env
  for np in "$@"; do
    f="$OUT/torch_${path}_np$np.txt"
    echo "== KOLO_DEVICE_PATH=$path kolorun -np $np pytest test_torch_cuda.py"
    KOLO_DEVICE_PATH=$path KOLO_LOG_LEVEL=debug "$KOLORUN" -np "$np" "$PY" -m pytest -q -rs \
      -p no:cacheprovider "$ROOT/tests/python/test_torch_cuda.py" >"$f" 2>&1
    rc=$?
    cat "$f"
    last=$(grep -E '^\[0\] .*(passed|failed)' "$f" | tail -1)
    seen=$(paths_seen "$f")
    figures+="np$np: ${last#\[0\] }, path $seen; "
    skips=$(echo "$last" | grep -oE '[0-9]+ skipped' | cut -d' ' -f1)
    { [ $rc -eq 0 ] && [ "${skips:-0}" -le 2 ] && [ "$seen" = "$path" ]; } ||
      fails=$((fails + 1))
  done
  if [ $fails -eq 0 ]; then result PASS "$figures"; else result FAIL "$figures"; fi
}

# kolo.torch on CUDA tensors through host staging, 2 and 3 ranks.
chk_torch_ranks() {
  need_gpu
  torch_ranks staged 2 3
}

# libtorch: kolo::torch::DistributedOptimizer and broadcastParameters on CUDA
# tensors against the same on CPU tensors (tests/torch/cuda_check.cc).
chk_libtorch_ranks() {
  need_gpu
  [ -x "$BUILD/bin/torch_cuda_check" ] || { result FAIL "torch_cuda_check not built"; return; }
  local np fails=0 figures=""
  for np in 2 3; do
    echo "== kolorun -np $np torch_cuda_check"
    KOLO_TIMEOUT=60 "$KOLORUN" -np $np "$BUILD/bin/torch_cuda_check" >"$OUT/libtorch_np$np.txt" 2>&1
    local rc=$?
    cat "$OUT/libtorch_np$np.txt"
    figures+="np$np: $(grep -m1 'torch_cuda_check:' "$OUT/libtorch_np$np.txt" | sed 's/^\[0\] //'); "
    [ $rc -eq 0 ] || fails=$((fails + 1))
  done
  if [ $fails -eq 0 ]; then result PASS "$figures"; else result FAIL "$figures"; fi
}

# Fashion-MNIST on the GPU: 1 rank, then 2 ranks sharing it; the 2-rank
# test accuracy within 0.5 points of the 1-rank one.
chk_fashion_mnist() {
  need_gpu
  py_env
  local data="$CARRIED/fashion-mnist"
  [ -f "$data/train-images-idx3-ubyte.gz" ] || data=/usr/share/datasets/fashion-mnist
  [ -f "$data/train-images-idx3-ubyte.gz" ] ||
    { result FAIL "no Fashion-MNIST IDX files (run scripts/gpu-check.sh --prepare here and carry .gpucheck)"; return; }
  local epochs="${KOLO_GPU_CHECK_FMNIST_EPOCHS:-3}"
  "$KOLORUN" -np 1 "$PY" "$ROOT/scripts/gpu_check/fashion_mnist_gpu.py" --data "$data" \
    --epochs "$epochs" --json "$OUT/fmnist_1.json" || { result FAIL "1-rank run failed"; return; }
  "$KOLORUN" -np 2 "$PY" "$ROOT/scripts/gpu_check/fashion_mnist_gpu.py" --data "$data" \
    --epochs "$epochs" --json "$OUT/fmnist_2.json" || { result FAIL "2-rank run failed"; return; }
  "$PY" - "$OUT/fmnist_1.json" "$OUT/fmnist_2.json" <<'EOF'
import json, sys
one, two = (json.load(open(p)) for p in sys.argv[1:3])
diff = (one["accuracy"] - two["accuracy"]) * 100
line = ("1 rank %.2f%% (%.1f s), 2 ranks %.2f%% (%.1f s), %d epochs: 2 ranks %.2f points "
        "below" % (one["accuracy"] * 100, one["seconds"], two["accuracy"] * 100,
                   two["seconds"], one["epochs"], diff))
verdict = "PASS" if diff <= 0.5 else "FAIL"
open(sys.argv[1].rsplit("/", 1)[0] + "/.result", "w").write("%s %s\n" % (verdict, line))
print(verdict, line)
EOF
}

# Horovod's synthetic benchmark shape: torchvision ResNet-50, batch 64,
# synthetic data, 1 rank: kolo.torch.DistributedOptimizer against plain
# PyTorch in the same process, rounds alternating.
chk_resnet50() {
  need_gpu
  py_env
  "$KOLORUN" -np 1 "$PY" "$ROOT/scripts/gpu_check/resnet50_synthetic.py" \
    --json "$OUT/resnet50.json" || { result FAIL "the benchmark failed"; return; }
  "$PY" - "$OUT/resnet50.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ratio = r["kolo_img_s"] / r["plain_img_s"]
line = ("plain %.1f img/s, kolo %.1f img/s (%.3fx; medians of %d rounds of %d steps)"
        % (r["plain_img_s"], r["kolo_img_s"], ratio, r["rounds"], r["steps"]))
verdict = "PASS" if ratio >= 0.97 else "FAIL"
open(sys.argv[1].rsplit("/", 1)[0] + "/.result", "w").write("%s %s\n" % (verdict, line))
print(verdict, line)
EOF
}

# Horovod's own torch tests (../shared/conformance, carried in .gpucheck):
# the whole suite on 1 rank (its GPU variants put tensors on
# cuda:local_rank, so more ranks need more GPUs), then its GPU tests that
# take 2 ranks on one device (CPU/GPU mismatch errors, alltoall splits on
# the GPU).
chk_horovod_gpu() {
  need_gpu
  py_env
  local suite="$CARRIED/conformance"
  [ -f "$suite/test_torch.py" ] || { result SKIP "Horovod's suite not carried (.gpucheck/conformance)"; return; }
  rm -rf /tmp/hvd && mkdir -p /tmp/hvd/suite /tmp/hvd/utils
  cp "$suite/test_torch.py" /tmp/hvd/suite/ && cp "$suite/utils/common.py" /tmp/hvd/utils/
  export PYTHONPATH="$suite/shim:$PYTHONPATH" KOLO_TIMEOUT=20
  cd /tmp/hvd/suite || return
  local timeout_arg=()
  "$PY" -c 'import pytest_timeout' 2>/dev/null && timeout_arg=(--timeout 60)
  "$KOLORUN" -np 1 "$PY" -m pytest -q -rs -p no:cacheprovider "${timeout_arg[@]}" \
    test_torch.py >"$OUT/horovod_np1.txt" 2>&1
  local rc1=$?
  "$KOLORUN" -np 2 "$PY" -m pytest -q -rs -p no:cacheprovider "${timeout_arg[@]}" \
    -k "gpu or cuda" test_torch.py >"$OUT/horovod_np2.txt" 2>&1
  local rc2=$?
  tail -40 "$OUT/horovod_np1.txt"; tail -40 "$OUT/horovod_np2.txt"
  local s1 s2
  s1=$(grep -E '(passed|failed)' "$OUT/horovod_np1.txt" | tail -1)
  s2=$(grep -E '^\[0\] .*(passed|failed)' "$OUT/horovod_np2.txt" | tail -1)
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]; then
    result PASS "np1: $s1; np2 gpu tests: ${s2#\[0\] }"
  else
    result FAIL "np1 rc $rc1: $s1; np2 rc $rc2: ${s2#\[0\] } (failures: $(grep -h '^FAILED\|^\[.\] FAILED' "$OUT"/horovod_np*.txt | head -5 | tr '\n' ' '))"
  fi
}

check environment 30 chk_environment
check build 240 chk_build
check cuda_tests 60 chk_cuda_tests
check probe 30 chk_probe
check no_cuda_context 30 chk_no_context
check c_2_3_ranks 60 chk_c_ranks
check torch_2_3_ranks 120 chk_torch_ranks
check build_libtorch 120 chk_build_libtorch
check libtorch_2_3_ranks 60 chk_libtorch_ranks
check fashion_mnist 120 chk_fashion_mnist
check resnet50_synthetic 90 chk_resnet50
check horovod_gpu 150 chk_horovod_gpu

# Checks of later work (the IPC and NCCL paths, large model support):
# scripts/gpu-check.d/*.sh, in name order.
for extra in "${KOLO_GPU_CHECK_EXTRAS:-$ROOT/scripts/gpu-check.d}"/*.sh; do
  [ -f "$extra" ] || continue
  # shellcheck source=/dev/null
  source "$extra"
done

if [ "$DRY" = 1 ]; then
  echo "gpu-check: ${#CHECKS[@]} checks, in this order, within ${BUDGET_S}s:"
  for c in "${CHECKS[@]}"; do set -- $c; printf '  %-22s limit %4ss  %s\n' "$1" "$2" "$3"; done
  echo "gpu-check: the build adds the hooks' targets: ${BUILD_EXTRA:-none}"
  [ -n "$NEED_GPU_REASON" ] && echo "gpu-check: on this machine every GPU check would SKIP: $NEED_GPU_REASON"
  exit 0
fi

: >"$OUT/summary.txt"
for c in "${CHECKS[@]}"; do
  set -- $c
  if [ -n "$ONLY" ] && ! [[ "$1" =~ $ONLY ]]; then continue; fi
  run_check "$1" "$2" "$3"
done
rm -f "$OUT/.result"
echo "gpu-check: done in $(($(date +%s) - START))s; $OUT/summary.txt:"
cat "$OUT/summary.txt"
! grep -q '^[^ ]* FAIL' "$OUT/summary.txt"

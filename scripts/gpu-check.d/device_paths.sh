# The device paths of collectives on CUDA memory (docs/gpu.md, "The paths"
# and "The GPU check"): sourced by scripts/gpu-check.sh. These checks run
# right after cuda_tests, before the host-staged path's own checks, so a
# run short of time still shows every figure of the device paths:
#   gpu_bandwidth        kolo-gpu-bandwidth: the D2D copy against the kernels
#   ipc_allreduce        kolo-gpu-allreduce, 2 ranks: 256 MiB through ipc and
#                        staged, alternating, against the D2D copy
#   ipc_check            cuda_ipc_check --device=cuda -np 2, 3, and --bench
#   ipc_c_2_3_ranks      cuda_collectives_test, KOLO_DEVICE_PATH=ipc, -np 2, 3
#   nccl_1_rank          KOLO_DEVICE_PATH=nccl, -np 1: cuda_collectives_test,
#                        kolo.torch (nccl_built()), nccl_device_test
#   device_path_tests    device_path_check: the choice (ipc, hier, nccl) and
#                        every collective through it
#   resnet50_ipc_staged  ResNet-50 synthetic, 2 ranks, ipc against staged
#   ipc_torch_2_3_ranks  test_torch_cuda.py, KOLO_DEVICE_PATH=ipc, -np 2, 3
# Alone on a machine with a GPU (after a build): scripts/gpu-check.sh
#   --only 'build|gpu_bandwidth|ipc_' OUTDIR

build_targets kolo-gpu-bandwidth kolo-gpu-allreduce cuda_ipc_check device_path_check \
  nccl_device_test

# result from a program's last line "PASS|FAIL|SKIP figures" ($1); FAIL
# naming $2 (the log) when there is none.
result_line() {
  case "$1" in
    PASS*) result PASS "${1#PASS }" ;;
    SKIP*) result SKIP "${1#SKIP }" ;;
    FAIL*) result FAIL "${1#FAIL }" ;;
    *) result FAIL "no result line (see $2): ${1:0:160}" ;;
  esac
}

# The device's copy bandwidth against reduce2 / reduceMany / reduceToMany /
# divideInPlace / compressToHalf / decompressFromHalf on 256 MiB buffers:
# PASS when every kernel reaches half the copy's bandwidth and is right.
chk_gpu_bandwidth() {
  need_gpu
  local b="$BUILD/bin/kolo-gpu-bandwidth"
  [ -x "$b" ] || { result FAIL "kolo-gpu-bandwidth not built"; return; }
  "$b" --json "$OUT/gpu_bandwidth.json" | tee "$OUT/gpu_bandwidth.txt"
  result_line "$(tail -1 "$OUT/gpu_bandwidth.txt")" gpu_bandwidth.log
}

# 2 ranks sharing the GPU: a 256 MiB float32 allreduce through ipc and
# through host staging in alternating rounds, the D2D copy in each round:
# PASS at ipc/D2D >= 0.40 and ipc/staged >= 5x with every element right.
chk_ipc_allreduce() {
  need_gpu
  local b="$BUILD/bin/kolo-gpu-allreduce" f="$OUT/ipc_allreduce.txt"
  [ -x "$b" ] || { result FAIL "kolo-gpu-allreduce not built"; return; }
  KOLO_TIMEOUT=60 KOLO_LOG_LEVEL=debug "$KOLORUN" -np 2 "$b" \
    --json "$OUT/ipc_allreduce.json" >"$f" 2>&1
  cat "$f"
  # A rank's FAIL first (rank 0's summary may never come), else rank 0's.
  local line
  line=$(grep -m1 -E '^\[[0-9]+\] FAIL' "$f" || grep -E '^\[0\] (PASS|FAIL|SKIP)' "$f" | tail -1)
  result_line "$(echo "$line" | sed -E 's/^\[[0-9]+\] //')" ipc_allreduce.log
}

# Runs test programs, each entry "NP|ENV|PROGRAM ARGS|what a passing run
# prints (an extended regex)": NP ranks under kolorun ("-": the program
# alone), ENV assignments before it, PROGRAM from the build's bin/ (ARGS
# as a shell would split them). A run passes when it exits 0, prints the
# regex and no "FAIL" line; the figures are the (first 2) matching lines.
run_programs() {
  local entry np envs cmd want f i=0 fails=0 figures="" rc line launch who
  for entry in "$@"; do
    IFS='|' read -r np envs cmd want <<<"$entry"
    i=$((i + 1)); f="$OUT/$CHECK_NAME.$i.txt"
    launch="" who="alone"
    [ "$np" = - ] || { launch="\"\$KOLORUN\" -np $np"; who="-np $np"; }
    echo "== ${envs:+$envs }${launch:+kolorun -np $np }$cmd"
    eval "KOLO_TIMEOUT=60 ${envs:+$envs }$launch \"\$BUILD/bin/\"$cmd" >"$f" 2>&1
    rc=$?
    cat "$f"
    line=$(grep -E "$want" "$f" | sed -E 's/^\[[0-9]+\] //' | sort -u | head -2 | cut -c1-120 |
      paste -sd';' -)
    if [ $rc -eq 0 ] && [ -n "$line" ] && ! grep -qE '(^|\] |rank [0-9]+ )FAIL' "$f"; then
      figures+="${envs:+$envs }$who $cmd: $line; "
    else
      figures+="${envs:+$envs }$who $cmd: FAILED (rc $rc, $CHECK_NAME.$i.txt); "
      fails=$((fails + 1))
    fi
  done
  if [ $fails -eq 0 ]; then result PASS "$figures"; else result FAIL "$figures"; fi
}

# The IPC collectives object itself (cuda_ipc_check): every collective,
# dtype and op against the host collectives, and the reduceToMany kernel
# against the CPU kernels (NaN, infinities, subnormals); its --bench: the
# 256 MiB allreduce without the runtime or the C API (both variants).
chk_ipc_check() {
  need_gpu
  CHECK_NAME=ipc_check run_programs \
    "2||cuda_ipc_check --device=cuda|checks, 0 failed here, 0 in all" \
    "3||cuda_ipc_check --device=cuda|checks, 0 failed here, 0 in all" \
    "2||cuda_ipc_check --device=cuda --bench|bench .*ipc_allreduce_GBps="
}

# The choice of the path in kolorun jobs sharing the GPU and every
# collective through the chosen one (device_path_check): ipc with 2 and 3
# ranks, hier over pretend hosts (ipc or nccl inside them, tcp between),
# nccl with 1 rank, and nccl refused when ranks share the GPU.
chk_device_path_tests() {
  need_gpu
  CHECK_NAME=device_path_tests run_programs \
    "2||device_path_check --expect ipc|device_path_check PASS" \
    "3||device_path_check --expect ipc|device_path_check PASS" \
    "4||device_path_check --hosts 2 --expect 'hier (ipc inside hosts, tcp between)'|device_path_check PASS" \
    "3||device_path_check --hosts 2 --expect 'hier (ipc inside hosts, tcp between)'|device_path_check PASS" \
    "2|KOLO_DEVICE_PATH=hier|device_path_check --hosts 2 --expect 'hier (nccl inside hosts, tcp between)'|device_path_check PASS" \
    "1||device_path_check --expect nccl|device_path_check PASS" \
    "2|KOLO_DEVICE_PATH=nccl|device_path_check --expect-error 'share GPU'|device_path_check PASS"
}

# Every collective, dtype and op through the IPC path, 2 and 3 ranks
# sharing the GPU, element by element against the host collectives.
chk_ipc_c_ranks() {
  need_gpu
  c_ranks ipc 2 3
}

chk_ipc_torch_ranks() {
  need_gpu
  torch_ranks ipc 2 3
}

# A 1-rank NCCL communicator through kolo: cuda_collectives_test with
# KOLO_DEVICE_PATH=nccl (every collective, dtype and op, the runtime and the
# C calls), kolo.torch (scripts/gpu_check/nccl_one_rank.py: results right,
# nccl_built() true), and nccl_device_test.
chk_nccl_1_rank() {
  need_gpu
  py_env
  local f="$OUT/nccl_c.txt" rc ok seen torch_line
  [ -x "$BUILD/bin/cuda_collectives_test" ] ||
    { result FAIL "cuda_collectives_test not built"; return; }
  KOLO_DEVICE_PATH=nccl KOLO_LOG_LEVEL=debug KOLO_TIMEOUT=60 "$KOLORUN" -np 1 \
    "$BUILD/bin/cuda_collectives_test" \
    --gtest_filter=-CudaCollectives.DeviceAndHostMemoryUnderOneNameIsAMismatch >"$f" 2>&1
  rc=$?
  cat "$f"
  ok=$(grep -c '\[       OK \]' "$f")
  seen=$(paths_seen "$f")
  KOLO_DEVICE_PATH=nccl KOLO_LOG_LEVEL=debug "$KOLORUN" -np 1 "$PY" \
    "$ROOT/scripts/gpu_check/nccl_one_rank.py" >"$OUT/nccl_torch.txt" 2>&1
  cat "$OUT/nccl_torch.txt"
  torch_line=$(grep -E '^(\[0\] )?(PASS|FAIL) nccl_built' "$OUT/nccl_torch.txt" | sed -E 's/^\[0\] //')
  seen="$seen/$(paths_seen "$OUT/nccl_torch.txt")"
  # NCCL's own device test (1 GPU: the 1-rank grid, stream order, timeout,
  # 2 ranks on one GPU failing without a hang).
  KOLO_TEST_REQUIRE_GPU=1 "$BUILD/bin/nccl_device_test" >"$OUT/nccl_device_test.txt" 2>&1
  local drc=$? dok
  cat "$OUT/nccl_device_test.txt"
  dok=$(grep -c '^\[       OK \]' "$OUT/nccl_device_test.txt")
  local figures="cuda_collectives_test rc $rc, $ok OK lines; nccl_device_test rc $drc, $dok OK; kolo.torch: ${torch_line:-no answer}; path $seen"
  if [ $rc -eq 0 ] && [ "$ok" -gt 0 ] && [ "$seen" = "nccl/nccl" ] && [ $drc -eq 0 ] &&
     [ "$dok" -gt 0 ] && [ "${torch_line%% *}" = PASS ]; then
    result PASS "$figures"
  else
    result FAIL "$figures"
  fi
}

# ResNet-50 synthetic, batch 64 per rank, 2 ranks sharing the GPU, ipc
# and host staging in alternating rounds of one run: images/s of each and
# their ratio (PASS when ipc is not slower than staging and the runtime's
# log names both paths).
chk_resnet50_paths() {
  need_gpu
  py_env
  local f="$OUT/resnet50_paths.txt"
  KOLO_LOG_LEVEL=debug "$KOLORUN" -np 2 "$PY" "$ROOT/scripts/gpu_check/resnet50_paths.py" \
    --json "$OUT/resnet50_paths.json" >"$f" 2>&1
  cat "$f"
  local line seen
  line=$(grep -E '^\[0\] (PASS|FAIL) ' "$f" | tail -1 | sed 's/^\[0\] //')
  seen=$(paths_seen "$f")  # the runtime's debug line of each round
  [ -n "$line" ] || line="FAIL no verdict from the benchmark (see the log)"
  [ "$seen" = "ipc,staged" ] || line="FAIL ${line#* }; the runtime ran on: $seen"
  result_line "$line" resnet50_ipc_staged.log
}

# Cheapest first; all before the host-staged path's checks (probe, ...).
check gpu_bandwidth 40 chk_gpu_bandwidth probe
check ipc_allreduce 60 chk_ipc_allreduce probe
check ipc_check 60 chk_ipc_check probe
check ipc_c_2_3_ranks 90 chk_ipc_c_ranks probe
check nccl_1_rank 90 chk_nccl_1_rank probe
check device_path_tests 60 chk_device_path_tests probe
check resnet50_ipc_staged 120 chk_resnet50_paths probe
check ipc_torch_2_3_ranks 150 chk_ipc_torch_ranks probe

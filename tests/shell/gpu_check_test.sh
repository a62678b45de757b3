#!/usr/bin/env bash
# scripts/gpu-check.sh without a GPU: its syntax (its hooks' and Python
# programs' too), --dry-run's list of checks in their order and the hooks'
# build targets, the runner (a passing, a failing, a hanging check, one
# without a result, one that needs the GPU, one placed before another, one
# cut by the budget and one left without time: their summary lines and the
# exit status), and, on a machine without nvidia-smi, a whole run in which
# every check SKIPs saying why.
#   tests/shell/gpu_check_test.sh SOURCE_DIR
set -u
SRC="$1"
SCRIPT="$SRC/scripts/gpu-check.sh"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "gpu_check_test: FAIL: $*"; exit 1; }

bash -n "$SCRIPT" || fail "bash -n"
for hook in "$SRC"/scripts/gpu-check.d/*.sh; do bash -n "$hook" || fail "bash -n $hook"; done
for py in "$SRC"/scripts/gpu_check/*.py; do  # the checks' programs parse
  python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$py" ||
    fail "$py does not parse"
done
dry="$("$SCRIPT" --dry-run)" || fail "--dry-run exited $?"
# Every check, in the order they run: the device paths' figures (issue of
# the IPC and NCCL paths) right after the kernels' tests.
order="environment build cuda_tests gpu_bandwidth ipc_allreduce ipc_check ipc_c_2_3_ranks nccl_1_rank
  device_path_tests resnet50_ipc_staged ipc_torch_2_3_ranks probe no_cuda_context c_2_3_ranks torch_2_3_ranks
  build_libtorch libtorch_2_3_ranks fashion_mnist resnet50_synthetic horovod_gpu lms"
listed="$(echo "$dry" | sed -n 's/^  \([a-z0-9_]*\) .*/\1/p' | paste -sd' ')"
[ "$listed" = "$(echo $order)" ] || fail "--dry-run order: got '$listed', want '$(echo $order)'"
targets="kolo-gpu-bandwidth kolo-gpu-allreduce cuda_ipc_check device_path_check nccl_device_test"
echo "$dry" | grep -q "hooks' targets: $targets" ||
  fail "--dry-run must name the hooks' build targets: $dry"

mkdir "$TMP/extras"
cat >"$TMP/extras/self.sh" <<'CHECKS'
helper() { echo "helper ran"; }
chk_t_pass() { helper; result PASS "figure 1"; }
chk_t_fail() { result FAIL "bad"; }
chk_t_hang() { sleep 30; }
chk_t_noresult() { echo "oops"; return 3; }
chk_t_gpu() { NEED_GPU_REASON="no GPU: told so"; need_gpu; result PASS "never"; }
check t_pass 5 chk_t_pass
check t_fail 5 chk_t_fail
check t_hang 2 chk_t_hang
check t_noresult 5 chk_t_noresult
check t_gpu 5 chk_t_gpu
check t_early 5 chk_t_pass t_pass
CHECKS
KOLO_GPU_CHECK_EXTRAS="$TMP/extras" "$SCRIPT" --only '^t_' "$TMP/out" >/dev/null
rc=$?
[ $rc -eq 1 ] || fail "a failing check must make the exit status 1, got $rc"
s="$TMP/out/summary.txt"
grep -q '^t_pass PASS figure 1' "$s" || fail "t_pass: $(cat "$s")"
grep -q 'helper ran' "$TMP/out/t_pass.log" || fail "t_pass.log"
grep -q '^t_fail FAIL bad' "$s" || fail "t_fail: $(cat "$s")"
grep -q '^t_hang FAIL timed out after 2s' "$s" || fail "t_hang: $(cat "$s")"
grep -q '^t_noresult FAIL exit 3 without a result .*oops' "$s" || fail "t_noresult: $(cat "$s")"
grep -q '^t_gpu SKIP no GPU: told so' "$s" || fail "t_gpu: $(cat "$s")"
[ "$(wc -l <"$s")" -eq 6 ] || fail "6 lines expected: $(cat "$s")"
[ "$(head -1 "$s" | cut -d' ' -f1)" = t_early ] || fail "t_early goes before t_pass: $(cat "$s")"

# The budget: a check's limit is cut to what is left; then no check starts.
mkdir "$TMP/budget"
cat >"$TMP/budget/b.sh" <<'CHECKS'
chk_b_long() { sleep 20; result PASS "never"; }
check b_long 30 chk_b_long
check b_next 30 chk_b_long
CHECKS
KOLO_GPU_CHECK_EXTRAS="$TMP/budget" KOLO_GPU_CHECK_BUDGET_S=3 KOLO_GPU_CHECK_MIN_LEFT_S=1 \
  "$SCRIPT" --only '^b_' "$TMP/bout" >/dev/null
s="$TMP/bout/summary.txt"
grep -qE '^b_long FAIL timed out after [23]s \(its 30s limit cut to the [23]s left of the 3s budget\)' "$s" ||
  fail "b_long: $(cat "$s")"
grep -qE '^b_next SKIP no time left \(-?[0-9]+s of the 3s budget\)' "$s" || fail "b_next: $(cat "$s")"

if ! command -v nvidia-smi >/dev/null 2>&1; then
  KOLO_GPU_CHECK_BUILD="$TMP/nobuild" "$SCRIPT" "$TMP/all" >/dev/null ||
    fail "a run without a GPU must pass (every check SKIPs)"
  for c in $order; do
    grep -q "^$c SKIP no GPU: nvidia-smi not found" "$TMP/all/summary.txt" ||
      fail "$c must SKIP: $(cat "$TMP/all/summary.txt")"
  done
  [ "$(wc -l <"$TMP/all/summary.txt")" -eq "$(echo $order | wc -w)" ] ||
    fail "one line per check: $(cat "$TMP/all/summary.txt")"
fi
echo "gpu_check_test: ok"

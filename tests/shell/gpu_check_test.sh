#!/usr/bin/env bash
# scripts/gpu-check.sh without a GPU: its syntax, --dry-run's list of
# checks, the runner (a passing, a failing, a hanging check, one without a
# result, one that needs the GPU: their summary lines and the exit status),
# and, on a machine without nvidia-smi, a whole run in which every check
# SKIPs saying why.
#   tests/shell/gpu_check_test.sh SOURCE_DIR
set -u
SRC="$1"
SCRIPT="$SRC/scripts/gpu-check.sh"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "gpu_check_test: FAIL: $*"; exit 1; }

bash -n "$SCRIPT" || fail "bash -n"
dry="$("$SCRIPT" --dry-run)" || fail "--dry-run exited $?"
for c in environment build cuda_tests probe no_cuda_context c_2_3_ranks torch_2_3_ranks \
         libtorch_2_3_ranks fashion_mnist resnet50_synthetic horovod_gpu; do
  echo "$dry" | grep -q "^  $c " || fail "--dry-run does not list $c: $dry"
done

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
[ "$(wc -l <"$s")" -eq 5 ] || fail "5 lines expected: $(cat "$s")"

if ! command -v nvidia-smi >/dev/null 2>&1; then
  KOLO_GPU_CHECK_EXTRAS="$TMP/none" "$SCRIPT" "$TMP/all" >/dev/null ||
    fail "a run without a GPU must pass (every check SKIPs)"
  [ "$(grep -c ' SKIP no GPU: nvidia-smi not found' "$TMP/all/summary.txt")" -eq 11 ] ||
    fail "every check must SKIP: $(cat "$TMP/all/summary.txt")"
fi
echo "gpu_check_test: ok"

# kolo.torch.lms on the GPU (docs/lms.md): sourced by scripts/gpu-check.sh.
# One process: a model and batch needing 1.5x the memory allowed to the
# process (torch.cuda.set_per_process_memory_fraction) trains 20 steps with
# LMS, losses matching an uncapped plain run; then throughput with and
# without LMS on a batch that fits and the fraction of copy time hidden
# under compute. Figures: OUT/lms/lms.json and the summary line.
# Alone (no gpu-check.sh): PYTHONPATH=BUILD/python python3
#   scripts/gpu_check/lms_gpu.py --out OUTDIR
chk_lms() {
  need_gpu
  py_env
  local line
  "$PY" "$ROOT/scripts/gpu_check/lms_gpu.py" --out "$OUT/lms" | tee "$OUT/lms.summary"
  line="$(tail -1 "$OUT/lms.summary")"
  case "$line" in
    PASS*) result PASS "${line#PASS }" ;;
    FAIL*) result FAIL "${line#FAIL }" ;;
    *) result FAIL "no summary line (see lms.log)" ;;
  esac
}
check lms 120 chk_lms

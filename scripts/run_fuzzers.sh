#!/usr/bin/env bash
# Runs the libFuzzer targets of `make fuzz`: each for SECONDS from its seed
# corpus (tests/fuzz/corpus/TARGET, read only) and its own corpus
# (DIR/corpus/TARGET, where new inputs go), JOBS targets at a time (one core
# each: a target's time is wall-clock time, so running more targets than
# cores would give each less fuzzing). Prints each target's summary in the
# order given; exits 1 naming every target that found a failing input (kept
# in DIR/artifacts/TARGET-*).
#
#   scripts/run_fuzzers.sh DIR SECONDS JOBS TARGET...
set -euo pipefail
if [[ $# -lt 4 ]]; then
  echo "usage: scripts/run_fuzzers.sh DIR SECONDS JOBS TARGET..." >&2
  exit 2
fi
dir="$1" seconds="$2" jobs="$3"
shift 3
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$dir/artifacts" "$dir/logs"
rm -f "$dir"/logs/*.log

# One target: its libFuzzer output in DIR/logs/TARGET.log.
fuzz_one() {
  local t="$1"
  mkdir -p "$dir/corpus/$t"
  "$dir/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/$t-" \
    "$dir/corpus/$t" "$root/tests/fuzz/corpus/$t" >"$dir/logs/$t.log" 2>&1 || true
}

running=0
for t in "$@"; do
  [[ -x "$dir/fuzz_$t" ]] || { echo "run_fuzzers: no $dir/fuzz_$t (make build-fuzz)" >&2; exit 2; }
  fuzz_one "$t" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=()
for t in "$@"; do
  echo "== fuzz_$t for $seconds s"
  grep -E '^(stat::number_of_executed_units|Done|==[0-9]+==ERROR|SUMMARY)' "$dir/logs/$t.log" || true
  if ls "$dir/artifacts/$t-"* >/dev/null 2>&1; then
    echo "fuzz_$t found a failing input: $(ls "$dir/artifacts/$t-"*)"
    failed+=("$t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzzing failed: ${failed[*]} (their inputs in $dir/artifacts/)" >&2
  exit 1
fi

# shellcheck shell=bash
# shellcheck disable=SC2034  # MH_* are for the tests that source this
# Shared by the multi-host shell tests (tests/multihost/*_test.sh). Sourced:
#
#   source "$(dirname "$0")/test_lib.sh" BUILD_DIR
#
# Sources netns.sh, skips (exit 77) unless network namespaces can be made,
# and defines the build's tools and a few helpers. Every test creates its
# hosts with netns_up, which tears them down on exit, failing or not.

MH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/multihost/netns.sh
source "$MH_DIR/netns.sh"

MH_BUILD="${1:?usage: source test_lib.sh BUILD_DIR}"
MH_BUILD="$(cd "$MH_BUILD" && pwd)"
KOLORUN="$MH_BUILD/bin/kolorun"
BENCH="$MH_BUILD/bin/kolo-bench"
MH_FAILURES=0

netns_require
for tool in "$KOLORUN" "$BENCH"; do
  if [ ! -x "$tool" ]; then
    echo "FAIL: $tool is not built" >&2
    exit 1
  fi
done

mh_log() { echo "== $*"; }

# mh_fail MESSAGE: records a failure (the test goes on, exits 1 at the end).
mh_fail() {
  echo "FAIL: $*" >&2
  MH_FAILURES=$((MH_FAILURES + 1))
}

# mh_finish: exit status of the test.
mh_finish() {
  if [ "$MH_FAILURES" -ne 0 ]; then
    echo "$MH_FAILURES check(s) failed" >&2
    exit 1
  fi
  echo "PASS"
  exit 0
}

# mh_require_kolorun_hosts: exits 1 when this kolorun has no -H.
mh_require_kolorun_hosts() {
  local help
  help="$("$KOLORUN" --help 2>&1 || true)"
  if ! grep -q -- '-H' <<<"$help"; then
    echo "FAIL: $KOLORUN has no -H (multi-host launching)" >&2
    exit 1
  fi
}

# mh_assert_no_pids WHEN: fails when any process is left in a host.
mh_assert_no_pids() {
  local left k
  # A process killed a moment ago may still be exiting: give it a second.
  for ((k = 0; k < 10; k++)); do
    left="$(netns_pids)"
    [ -n "$left" ] || return 0
    sleep 0.1
  done
  mh_fail "$1: processes left in the hosts: $(echo "$left" | while read -r p; do
    echo -n "$p($(cat "/proc/$p/comm" 2>/dev/null)) "
  done)"
}

# mh_has_mpi_engine: true when this build's KOLO_TRANSPORT knows mpi and
# kolo was built with MPI (kolo-bench is linked against libmpi), i.e. ranks
# started by mpirun run under the MPI engine.
mh_has_mpi_engine() {
  # Whole outputs first: grep -q ending a pipe early would fail it (pipefail).
  local settings libs
  settings="$("$BENCH" --list-settings 2>/dev/null || true)"
  libs="$(ldd "$BENCH" 2>/dev/null || true)"
  grep -i 'KOLO_TRANSPORT' <<<"$settings" | grep -qiw 'mpi' && grep -q 'libmpi' <<<"$libs"
}

# The allreduce grid: one kolo-bench invocation per line (dtype, op, sizes,
# extra flags), each run once per algorithm. Sizes include odd element
# counts and 64M; kolo-bench checks every element of every size.
MH_GRID=(
  "-d float -r sum --sizes 4,12,4K,1000004,64M"
  "-d double -r max --sizes 8,64K,4M"
  "-d int32 -r prod --sizes 4,1K,1M"
  "-d bfloat16 -r avg --sizes 2,6,64K,2M"
  "-d half -r sum --sizes 2,1M --inplace"
  "-d int64 -r min --sizes 8,1M"
  "-d uint8 -r max --sizes 1,3,1M"
)
MH_ALGOS=(ring hier)

# mh_check_bench NAME LOG ALGO: the run's table lists every size, each
# checked "ok", with ALGO as the algorithm (empty ALGO: any).
mh_check_bench() {
  local name="$1" log="$2" algo="$3" rows bad
  # kolorun prefixes lines with "[rank] " (or "[host:rank] "); mpirun not.
  rows="$(sed -E 's/^\[[^]]*\] ?//' "$log" | grep -E '^ +[0-9]+ +[0-9]+ ' || true)"
  if [ -z "$rows" ]; then
    mh_fail "$name: no result rows in the output"
    sed 's/^/    /' "$log" | tail -20 >&2
    return
  fi
  bad="$(echo "$rows" | awk -v a="$algo" '$NF != "ok" || (a != "" && $4 != a)')"
  if [ -n "$bad" ]; then
    mh_fail "$name: rows not ok or not run with $algo:"
    echo "$bad" >&2
  fi
}

# mh_check_layout NAME LOG HOSTS PER_HOST: with KOLO_LOG_LEVEL=info every
# rank logged "rank R/N on host 'H' (local L/PER_HOST, host X/HOSTS)"; checks
# that the ranks really were spread over HOSTS hosts.
mh_check_layout() {
  local name="$1" log="$2" hosts="$3" per="$4" n distinct
  n="$(grep -cE "on host '[^']*' \(local [0-9]+/$per, host [0-9]+/$hosts\)" "$log" || true)"
  distinct="$(grep -oE "on host '[^']*'" "$log" | sort -u | wc -l)"
  if [ "$n" -ne $((hosts * per)) ] || [ "$distinct" -ne "$hosts" ]; then
    mh_fail "$name: expected $((hosts * per)) ranks on $hosts hosts, saw $n layout lines, $distinct hosts"
    grep "on host" "$log" >&2 || true
  fi
}

# mh_check_transport NAME LOG EXPECTED: every one of the 6 ranks logged
# "..., transport EXPECTED" at start-up (KOLO_LOG_LEVEL=info).
mh_check_transport() {
  local name="$1" log="$2" expected="$3" n
  n="$(grep -cE "\), transport ${expected}( |$)" "$log" || true)"
  if [ "$n" -ne 6 ]; then
    mh_fail "$name: $n of 6 ranks report transport '$expected':"
    grep "transport" "$log" >&2 || true
  fi
}

#!/usr/bin/env bash
# Elastic training under kolorun (docs/elastic.md), one case per call:
#   elastic_run.sh KOLORUN PYTHON kill|raise|min-np|reset-limit|host-added|host-removed [PROGRAM...]
# PROGRAM, when given, is run instead of PYTHON elastic_train.py (the C++
#   tests/torch/elastic_train.cc takes the same flags; PYTHON is then unused).
# ELASTIC_EXPECT_STEPS (kill, raise): the step count each survivor must end at.
# kill, raise: worker 1 of 3 dies by SIGKILL (or raises) at step 5; the two
#   survivors re-form a world of 2 and finish with identical parameters;
#   kolorun exits 0.
# min-np: the same loss with --min-np 3 --elastic-timeout 2: kolorun ends
#   the job with an error naming --min-np and exits 1.
# reset-limit: the same loss with --reset-limit 0: an error naming the limit.
# host-added, host-removed: --host-discovery-script lists a host more (a
#   worker starts there and the three re-form) or less (its worker ends and
#   the two others re-form); all finish with identical parameters.
set -uo pipefail
kolorun=$1 python=$2 case=$3
shift 3
program=("$python" "$(cd "$(dirname "$0")" && pwd)/elastic_train.py")
[ $# -gt 0 ] && program=("$@")
case $case in
  kill) flags=(--min-np 2); extra=() ;;
  raise) flags=(--min-np 2); extra=(--raise) ;;
  min-np) flags=(--min-np 3 --elastic-timeout 2); extra=() ;;
  reset-limit) flags=(--min-np 1 --reset-limit 0); extra=() ;;
  host-added | host-removed)
    # The discovery script lists the hosts of a file that worker 0 rewrites
    # at step 3: a host with one slot comes (2 -> 3 workers) or goes (3 -> 2).
    hosts=$(mktemp)
    trap 'rm -f "$hosts"' EXIT
    if [ "$case" = host-added ]; then
      printf 'localhost:2\n' >"$hosts"
      flags=(--host-discovery-script "cat $hosts" --min-np 2 --max-np 3 -np 2)
      extra=(--world 2 --rewrite "$hosts" 'localhost:2\n127.0.0.1:1')
    else
      printf 'localhost:2\n127.0.0.1:1\n' >"$hosts"
      flags=(--host-discovery-script "cat $hosts" --min-np 2)
      extra=(--world 3 --rewrite "$hosts" 'localhost:2')
    fi
    extra+=(--at 3 --step-sleep 0.1 --epochs 3) ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
case $case in host-added) ;; *) flags+=(-np 3) ;; esac
out=$(timeout -k 5 240 "$kolorun" "${flags[@]}" "${program[@]}" "${extra[@]}" 2>&1)
code=$?
echo "$out" | grep -v '^\[[0-9]\]  ' | tail -25
fail() { echo "FAILED: $*"; exit 1; }
# finished_equal EVENT WORLD DONE N WHAT: kolorun exited 0 and printed EVENT
# (when not empty) and WORLD; N lines match the regular expression DONE
# (the workers' last lines) and carry the same parameters.
finished_equal() {
  local event=$1 world=$2 done_re=$3 n=$4 what=$5
  [ $code -eq 0 ] || fail "kolorun exited $code"
  [ -z "$event" ] || echo "$out" | grep -q "$event" || fail "not seen: $event"
  echo "$out" | grep -q "$world" || fail "not seen: $world"
  done=$(echo "$out" | grep -E "$done_re")
  [ "$(echo "$done" | wc -l)" -eq "$n" ] || fail "not $n workers done"
  [ "$(echo "$done" | sed 's/.*params //' | sort -u | wc -l)" -eq 1 ] ||
    fail "the workers' parameters differ"
  # With ELASTIC_EXPECT_STEPS (kill, raise): the step count the rollback
  # implies (a survivor that kept its uncommitted step would count one less).
  if [ -n "${ELASTIC_EXPECT_STEPS:-}" ] && [ "$case" = kill -o "$case" = raise ]; then
    echo "$done" | grep -qv "steps $ELASTIC_EXPECT_STEPS," &&
      fail "a survivor did not end at step $ELASTIC_EXPECT_STEPS"
  fi
  echo "elastic $case: $what"
}
case $case in
  kill|raise)
    echo "$out" | grep -q '^\[1\] worker 1 done' && fail "the victim finished"
    finished_equal "" "elastic: world 2 has 2 worker(s): 0->0 2->1" \
      '^\[[02]\] worker [02] done: rank [01] of 2, steps [0-9]+, params ' 2 \
      "two survivors finished with identical parameters" ;;
  host-added)
    finished_equal "elastic: rank 2 on host 127.0.0.1 started on a discovered host" \
      "elastic: world 2 has 3 worker(s): 0->0 1->1 2->2" \
      '^\[[012]\] worker [012] done: rank [012] of 3, steps [0-9]+, params ' 3 \
      "three workers finished with identical parameters" ;;
  host-removed)
    finished_equal "elastic: host 127.0.0.1 is no longer listed by the discovery script" \
      "elastic: world 2 has 2 worker(s): 0->0 1->1" \
      '^\[[01]\] worker [01] done: rank [01] of 2, steps [0-9]+, params ' 2 \
      "two survivors finished with identical parameters" ;;
  min-np)
    [ $code -eq 1 ] || fail "kolorun exited $code, not 1"
    echo "$out" | grep -q "kolorun: elastic: only 2 worker(s) left, fewer than --min-np 3, for --elastic-timeout 2 s; ending the job" ||
      fail "no --min-np error"
    echo "elastic min-np: the job ended naming --min-np" ;;
  reset-limit)
    [ $code -eq 1 ] || fail "kolorun exited $code, not 1"
    echo "$out" | grep -q "kolorun: elastic: the job reached --reset-limit 0" || fail "no --reset-limit error"
    echo "elastic reset-limit: the job ended naming --reset-limit" ;;
esac

#!/bin/bash
# kolo.hpo end to end (hpo_study.py, hpo_resume.py):
#   hpo_study.sh KOLORUN PYTHON TESTDIR
# 1. A study on 4 ranks with a rank SIGKILLed: kolorun --hpo must exit 0,
#    name rank 3 as the only rank lost, and rank 0 must print its checks' ok.
# 2. A study whose kolorun is SIGKILLed midway, then resumed: the finished
#    trials are kept (hpo_resume.py checks them).
set -u
KOLORUN=$1 PY=$2 HERE=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "hpo_study.sh: $*"; exit 1; }

mkdir "$WORK/study"
out=$("$KOLORUN" --hpo -np 4 "$PY" "$HERE/hpo_study.py" "$WORK/study" 2>&1)
rc=$?
echo "$out" | grep -v '^\[0\]   '
[ $rc -eq 0 ] || fail "the study's job exited $rc"
echo "$out" | grep -q '^\[0\] hpo_study: ok' || fail "rank 0's checks did not pass"
echo "$out" | grep -q 'finished without 1 worker(s) that failed on the way (the study went on): rank 3 ' \
  || fail "kolorun did not name rank 3 as the one rank lost"

mkdir "$WORK/resume"
"$KOLORUN" --hpo -np 2 "$PY" "$HERE/hpo_resume.py" "$WORK/resume" first > "$WORK/first.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  n=$(grep -c 'COMPLETE' "$WORK/first.log")
  [ "$n" -ge 3 ] && break
  sleep 0.1
done
kill -KILL $pid
wait $pid 2>/dev/null
cat "$WORK/first.log"
[ "$n" -ge 3 ] || fail "the first job did not finish 3 trials"
grep -q 'kolo.hpo: [0-9]* trial(s)' "$WORK/first.log" && fail "the first job ended before the kill"
sleep 0.5  # kolorun's guard ends the ranks
out=$("$KOLORUN" --hpo -np 2 "$PY" "$HERE/hpo_resume.py" "$WORK/resume" resume 2>&1)
rc=$?
echo "$out" | grep -v '^\[0\]   '
[ $rc -eq 0 ] || fail "the resumed job exited $rc"
echo "$out" | grep -q '^\[0\] hpo_resume: ok' || fail "the resumed study lost trials"
echo "hpo_study.sh: ok"

#!/bin/bash
# kolo.hpo end to end (hpo_study.py, hpo_resume.py, hpo_pbt_fault.py):
#   hpo_study.sh KOLORUN PYTHON TESTDIR
# 1. A study on 4 ranks with a rank SIGKILLed, under plain kolorun (no
#    --hpo: the ranks declare the study themselves): kolorun must exit 0,
#    say that the study goes on, name rank 3 as the only rank lost, and
#    rank 0 must print its checks' ok.
# 2. A study whose kolorun (--hpo) is SIGKILLed midway, then resumed: the
#    finished trials are kept (hpo_resume.py checks them).
# 3. PBT on 4 ranks under plain kolorun with rank 3 SIGKILLed as it sends
#    its weights: the population goes on (hpo_pbt_fault.py checks the
#    lineage and the weights); then rank 1 exits 3 after the run, which
#    must end the job (exit 3, naming rank 1): outside a study the first
#    failure still ends the job.
# 4. PBT on 4 ranks in teams of 2 under plain kolorun with rank 3 SIGKILLed
#    while its team trains: member 1 fails, member 0 goes on, kolorun
#    exits 0 naming rank 3 (hpo_pbt_team_fault.py checks the lineage).
set -u
KOLORUN=$1 PY=$2 HERE=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "hpo_study.sh: $*"; exit 1; }

mkdir "$WORK/study"
out=$("$KOLORUN" -np 4 "$PY" "$HERE/hpo_study.py" "$WORK/study" 2>&1)
rc=$?
echo "$out" | grep -v '^\[0\]   '
[ $rc -eq 0 ] || fail "the study's job exited $rc"
echo "$out" | grep -q '^\[0\] hpo_study: ok' || fail "rank 0's checks did not pass"
echo "$out" | grep -q '^kolorun: rank 3 (pid [0-9]*) was killed by signal SIGKILL; the job runs a kolo.hpo study: its team.s trial fails, the study goes on' \
  || fail "kolorun did not say that the study goes on without rank 3"
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
mkdir "$WORK/pbt"
out=$("$KOLORUN" -np 4 "$PY" "$HERE/hpo_pbt_fault.py" "$WORK/pbt" 2>&1)
rc=$?
echo "$out"
echo "$out" | grep -q '^\[0\] hpo_pbt_fault: ok' || fail "PBT did not go on without rank 3"
echo "$out" | grep -q '^kolorun: rank 3 (pid [0-9]*) was killed by signal SIGKILL; the job runs a kolo.hpo study' \
  || fail "kolorun did not go on without rank 3 in PBT"
[ $rc -eq 3 ] || fail "rank 1's failure after the PBT run did not end the job (exit $rc, not 3)"
echo "$out" | grep -q '^kolorun: rank 1 (pid [0-9]*) exited with code 3' \
  || fail "kolorun did not name rank 1 as the rank that ended the job"
out=$("$KOLORUN" -np 4 "$PY" "$HERE/hpo_pbt_team_fault.py" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "PBT with a lost team rank exited $rc"
[ "$(echo "$out" | grep -c 'hpo_pbt_team_fault: ok')" -eq 3 ] \
  || fail "not every survivor of the PBT run passed its checks"
echo "$out" | grep -q 'finished without 1 worker(s) that failed on the way (the study went on): rank 3 ' \
  || fail "kolorun did not name rank 3 as the one rank lost in PBT"
echo "hpo_study.sh: ok"

#!/usr/bin/env bash
# A worker's death in a job with parameter servers under kolorun
# (docs/launching.md, "Jobs with parameter servers"), one case per call:
#   ps_worker_death.sh KOLORUN PYTHON CASE
# downpour, easgd, sync-backup: kolorun --servers 1 -np 4 runs
#   ps_worker_death.py; worker 2 kills itself with SIGKILL at step 5. kolorun
#   names it and goes on, the server logs the loss and goes on, workers 0
#   and 1 finish, the server exits 0, kolorun lists the lost worker and
#   exits 0.
# downpour-hosts: the same downpour job on two hosts (-H localhost:2,
#   127.0.0.1:2: tcp between them): the server is rank 1 (the highest rank
#   of the first host), worker 2 is rank 3; kolorun's roles agree with
#   kolo_init's.
# sync: the same in plain sync: workers 0 and 1 fail naming worker 2,
#   kolorun ends the job once every worker has failed and exits 137 (the
#   first worker lost, by SIGKILL).
# Ranks that are sh scripts (rank 3 is the server):
# sh-worker: KOLO_SERVERS=1 in the environment (no --servers), worker 1
#   exits 3 at once, the others finish: exit 0, worker 1 listed as lost.
# sh-server: the server exits 5: the job ends at once, exit 5.
# sh-all-workers: every worker exits 3: the job ends, exit 3.
# sh-stuck-server: the workers finish, the server never exits: with
#   KOLO_TIMEOUT=1 kolorun ends it 7 s later (2 x KOLO_TIMEOUT + 5) and
#   exits 1.
set -uo pipefail
kolorun=$1 python=$2 case=$3
script="$(cd "$(dirname "$0")" && pwd)/ps_worker_death.py"
# sh ranks: $1 is what the server does, $2 what worker 1 does, $3 the others.
ranks='case $KOLO_RANK in 3) eval "$1" ;; 1) eval "$2" ;; *) eval "$3" ;; esac'
finish='sleep 1; echo "worker $KOLO_RANK finished"'
lost_line() {  # the line kolorun prints for a lost worker rank $1, ending with $2
  echo "kolorun: rank $1 \(pid [0-9]+\) $2; it is a worker and the job has parameter servers: they decide whether the training goes on without it"
}
case $case in
  downpour | easgd | sync-backup | sync)
    cmd=("$kolorun" --verbose --servers 1 -np 4 "$python" "$script" "$case") ;;
  downpour-hosts) cmd=("$kolorun" --verbose --servers 1 -np 4 -H localhost:2,127.0.0.1:2
                       "$python" "$script" downpour) ;;
  sh-worker) cmd=(env KOLO_SERVERS=1 "$kolorun" -np 4 sh -c "$ranks" sh
                  'sleep 2' 'exit 3' "$finish") ;;
  sh-server) cmd=("$kolorun" --servers 1 -np 4 sh -c "$ranks" sh
                  'sleep 0.5; exit 5' 'sleep 60' 'sleep 60; echo finished') ;;
  sh-all-workers) cmd=("$kolorun" --servers 1 -np 4 sh -c "$ranks" sh
                       'sleep 60' 'exit 3' 'sleep 0.5; exit 3') ;;
  sh-stuck-server) cmd=(env KOLO_TIMEOUT=1 "$kolorun" --servers 1 -np 4 sh -c "$ranks"
                        sh 'sleep 300' "$finish" "$finish") ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
out=$(timeout -k 5 240 "${cmd[@]}" 2>&1)
code=$?
echo "$out" | tail -40
fail() { echo "FAILED: $*"; exit 1; }
has() { echo "$out" | grep -Eq -- "$1" || fail "no line matching: $1"; }
hasnt() { echo "$out" | grep -Eq -- "$1" && fail "a line matching: $1"; }
case $case in
  downpour | easgd | sync-backup)
    [ $code -eq 0 ] || fail "kolorun exited $code, not 0"
    has '^\[2\] worker 2: killing itself at step 5'
    has "$(lost_line 2 'was killed by signal SIGKILL')"
    has '^\[3\] .*worker 2 \(rank 2\) was lost.*going on without it'
    has '^\[0\] worker 0: finished 40 steps'
    has '^\[1\] worker 1: finished 40 steps'
    has '^kolorun: rank 3 \(pid [0-9]+\) exited with code 0'
    has '^kolorun: the job finished without 1 worker\(s\) that failed on the way \(the parameter servers went on\): rank 2 \(pid [0-9]+\) was killed by signal SIGKILL$'
    hasnt 'ending the job'
    echo "ps worker death $case: the others finished, kolorun exited 0" ;;
  downpour-hosts)
    [ $code -eq 0 ] || fail "kolorun exited $code, not 0"
    has "$(lost_line '3 on host 127.0.0.1' 'was killed by signal SIGKILL')"
    has '^\[localhost:1\] .*parameter server 0: worker 2 \(rank 3\) was lost.*going on without it'
    has '^\[localhost:0\] worker 0: finished 40 steps'
    has '^\[127.0.0.1:2\] worker 1: finished 40 steps'
    has '^kolorun: rank 1 on host localhost \(pid [0-9]+\) exited with code 0'
    has '^kolorun: the job finished without 1 worker\(s\) that failed on the way \(the parameter servers went on\): rank 3 on host 127.0.0.1 \(pid [0-9]+\) was killed by signal SIGKILL$'
    echo "ps worker death $case: the others finished, kolorun exited 0" ;;
  sync)
    [ $code -eq 137 ] || fail "kolorun exited $code, not 137"
    has "$(lost_line 2 'was killed by signal SIGKILL')"
    has '^\[0\] worker 0: step [0-9]+ failed: .*worker 2 \(rank 2\) was lost'
    has '^\[1\] worker 1: step [0-9]+ failed: .*worker 2 \(rank 2\) was lost'
    has '^kolorun: every worker has failed; ending the job'
    has '^kolorun: rank 2 \(pid [0-9]+\) was killed by signal SIGKILL$'
    hasnt 'finished 40 steps'
    echo "ps worker death sync: every worker failed naming worker 2, kolorun exited 137" ;;
  sh-worker)
    [ $code -eq 0 ] || fail "kolorun exited $code, not 0"
    has "$(lost_line 1 'exited with code 3')"
    has '^\[0\] worker 0 finished'
    has '^\[2\] worker 2 finished'
    has '^kolorun: the job finished without 1 worker\(s\) that failed on the way \(the parameter servers went on\): rank 1 \(pid [0-9]+\) exited with code 3$'
    echo "ps worker death $case: the others finished, kolorun exited 0" ;;
  sh-server)
    [ $code -eq 5 ] || fail "kolorun exited $code, not 5"
    has '^kolorun: rank 3 \(pid [0-9]+\) exited with code 5$'
    hasnt 'finished'
    echo "ps worker death $case: the job ended with the server" ;;
  sh-all-workers)
    [ $code -eq 3 ] || fail "kolorun exited $code, not 3"
    has "$(lost_line 1 'exited with code 3')"
    has '^kolorun: every worker has failed; ending the job'
    has '^kolorun: 3 worker\(s\) had failed before the job ended: '
    echo "ps worker death $case: the job ended with the last worker" ;;
  sh-stuck-server)
    [ $code -eq 1 ] || fail "kolorun exited $code, not 1"
    has '^kolorun: every worker has exited, but these parameter servers still run 7 s later \(2 x KOLO_TIMEOUT \+ 5 s\): rank 3; ending the job$'
    echo "ps worker death $case: the stuck server was ended" ;;
esac

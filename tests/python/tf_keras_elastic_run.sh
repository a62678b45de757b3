#!/usr/bin/env bash
# An elastic Keras job (tf_keras_elastic_train.py) that loses a rank and
# gains a host:  tf_keras_elastic_run.sh KOLORUN PYTHON
# kolorun starts 3 workers on the hosts that a discovery script lists
# (localhost:2 and 127.0.0.2:1). Worker 2 (on 127.0.0.2) SIGKILLs itself at
# step 5; the two survivors roll back and re-form a world of 2; worker 0
# then adds 127.0.0.3:1 to the hosts, kolorun starts a worker there and the
# three re-form and finish. Passes when kolorun exits 0, the victim never
# finished, the new host's worker did, and the three workers end with
# identical weights: prints "tf_keras elastic: three workers finished with
# identical weights".
set -uo pipefail
kolorun=$1 python=$2
here=$(cd "$(dirname "$0")" && pwd)
hosts=$(mktemp)
trap 'rm -f "$hosts"' EXIT
printf 'localhost:2\n127.0.0.2:1\n' >"$hosts"
out=$(TF_CPP_MIN_LOG_LEVEL=3 timeout -k 5 240 "$kolorun" --host-discovery-script "cat $hosts" \
  --min-np 2 --max-np 3 -np 3 "$python" "$here/tf_keras_elastic_train.py" \
  --victim 2 --kill-at 5 --add-at 8 --epochs 3 --step-sleep 0.1 \
  --rewrite "$hosts" 'localhost:2\n127.0.0.3:1' 2>&1)
code=$?
echo "$out" | grep -E 'elastic|worker|Error|error' | grep -v '^\[[0-9]\]  ' | tail -30
fail() { echo "FAILED: $*"; exit 1; }
[ $code -eq 0 ] || fail "kolorun exited $code"
echo "$out" | grep -q 'worker 2 kills itself' || fail "the victim did not kill itself"
echo "$out" | grep -q 'worker 2 done' && fail "the victim finished"
echo "$out" | grep -q 'worker 0 rewrote the hosts' || fail "the hosts were not rewritten"
done=$(echo "$out" | grep -E 'worker [0-9]+ done: rank [0-2] of 3, epoch 3, params ')
[ "$(echo "$done" | wc -l)" -eq 3 ] || fail "not 3 workers done in a world of 3"
echo "$done" | grep -q 'worker 3 done' || fail "the added host's worker did not finish"
[ "$(echo "$done" | sed 's/.*params \([0-9a-f]*\).*/\1/' | sort -u | wc -l)" -eq 1 ] ||
  fail "the workers' weights differ"
echo "tf_keras elastic: three workers finished with identical weights"

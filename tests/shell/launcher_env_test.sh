#!/usr/bin/env bash
# Ranks started the way srun and torchrun start them find each other from
# those launchers' variables alone, and run checked collectives.
#
#   launcher_env_test.sh BUILD_DIR
#
# Each case starts the ranks of kolo-bench as plain background processes,
# with only the variables the launcher would set (no KOLO_RANK, no
# KOLO_RENDEZVOUS), waits for all of them, and requires every rank to exit 0
# and rank 0 to be in a job of all of them and to report every size "ok":
#   srun, one node        SLURM_* with a one-node step: file store
#   srun, two nodes       SLURM_STEP_NUM_NODES=2 and a node list: rank 0
#                         hosts the store on the first node (here localhost);
#                         KOLO_HOST_ID per node makes them two hosts
#   torchrun, one node    RANK, WORLD_SIZE, LOCAL_*, MASTER_ADDR/PORT
#   torchrun, two nodes   the same with GROUP_RANK and KOLO_HOST_ID per node
#   jsrun, one host       JSM_NAMESPACE_* (LSF's jsrun) and PMIX_NAMESPACE:
#                         file store
set -euo pipefail
build=${1:?usage: launcher_env_test.sh BUILD_DIR}
bench="$build/bin/kolo-bench"
work=$(mktemp -d)
pids=()
stores=() # the file stores the emulated launchers' ranks make under /tmp
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work" "${stores[@]}"
}
trap cleanup EXIT

# Nothing of an outer launcher may leak in.
for v in $(env | sed -n 's/^\(KOLO_[A-Z_]*\|OMPI_[A-Z_]*\|PMI_[A-Z_]*\|PMIX_[A-Z_]*\|SLURM_[A-Z_]*\|JSM_[A-Z_]*\)=.*/\1/p'); do
  unset "$v"
done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT GROUP_RANK

# free_ports STEP: a port P below the kernel's ephemeral range (where the
# other tests' outgoing connections and port-0 listeners never land) with
# P and P+1 free, P a multiple of STEP; prints P. The stores listen on P
# (Slurm: 20000 + 16 * job id for step 0, + 1 for step 1) or P+1
# (torchrun: MASTER_PORT + 1).
free_ports() {
  /usr/bin/python3 - "$1" <<'PY'
import random, socket, sys
step = int(sys.argv[1])
for _ in range(1000):
    p = random.randrange(20000 + step, 32000, step)
    try:
        held = []
        for q in (p, p + 1):
            s = socket.socket()
            s.bind(("0.0.0.0", q))
            held.append(s)
    except OSError:
        continue
    print(p)
    break
else:
    sys.exit("launcher_env_test.sh: no free pair of ports in 20000-32000")
PY
}

# run_case NAME N CMD-PER-RANK: CMD-PER-RANK is a function taking the rank
# and printing the env assignments for it.
run_case() {
  local name=$1 n=$2 envfn=$3
  pids=()
  for ((r = 0; r < n; r++)); do
    # shellcheck disable=SC2046
    # KOLO_HIERARCHICAL_ALLREDUCE=1: hier wherever the job spans hosts (the
    # proof below that it did), the selection on one host.
    env $($envfn "$r") KOLO_TIMEOUT=20 KOLO_CONNECT_TIMEOUT=20 KOLO_HIERARCHICAL_ALLREDUCE=1 \
      timeout 120 "$bench" -b 8 -e 1M -f 64 -n 2 -w 1 >"$work/$name.$r.out" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for ((r = 0; r < n; r++)); do
    if ! wait "${pids[$r]}"; then
      echo "FAIL $name: rank $r exited non-zero:"
      sed 's/^/    /' "$work/$name.$r.out"
      failed=1
    fi
  done
  pids=()
  local ok
  ok=$(grep -c ' ok$' "$work/$name.0.out" || true)
  if [[ $failed == 0 && $ok != 3 ]]; then  # 8 B, 512 B and 32 KiB
    echo "FAIL $name: rank 0 checked $ok sizes, expected 3"
    cat "$work/$name.0.out"
    failed=1
  fi
  if [[ $failed == 0 ]] && ! grep -q "ranks $n " "$work/$name.0.out"; then
    echo "FAIL $name: rank 0 was not in a job of $n ranks"
    cat "$work/$name.0.out"
    failed=1
  fi
  if grep -q 'FAIL' "$work/$name.0.out"; then
    echo "FAIL $name: a result was wrong"
    cat "$work/$name.0.out"
    failed=1
  fi
  [[ $failed == 0 ]] && echo "ok   $name ($n ranks, $ok sizes checked)"
  return $failed
}

# Slurm's store port is 20000 + (16 * job + step) % 20000: a job id whose
# ports for steps 0 and 1 are free.
job=$((($(free_ports 16) - 20000) / 16))
# An earlier run with the same job id may have left its stores (signed with
# another job secret): start without them, and remove ours at exit.
stores=(/tmp/kolo-$job.0 /tmp/kolo-$job.1 /tmp/kolo-jsm-test-$job)
rm -rf "${stores[@]}"

srun_one_node() {
  echo SLURM_JOB_ID=$job SLURM_STEP_ID=0 SLURM_PROCID=$1 SLURM_NTASKS=3 \
    SLURM_STEP_NUM_TASKS=3 SLURM_LOCALID=$1 SLURM_NODEID=0 SLURM_STEP_NUM_NODES=1 \
    SLURM_STEP_TASKS_PER_NODE=3 SLURM_STEP_NODELIST=localhost
}
srun_two_nodes() {
  local node=$(($1 / 2))
  echo SLURM_JOB_ID=$job SLURM_STEP_ID=1 SLURM_PROCID=$1 SLURM_NTASKS=4 \
    SLURM_STEP_NUM_TASKS=4 SLURM_LOCALID=$(($1 % 2)) SLURM_NODEID=$node \
    SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE='2(x2)' \
    SLURM_STEP_NODELIST='localhost,127.0.0.1' KOLO_HOST_ID=node$node
}
torch_port=$(free_ports 1)
torchrun_one_node() {
  echo RANK=$1 WORLD_SIZE=3 LOCAL_RANK=$1 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$torch_port
}
torchrun_two_nodes() {
  local node=$(($1 / 2))
  echo RANK=$1 WORLD_SIZE=4 LOCAL_RANK=$(($1 % 2)) LOCAL_WORLD_SIZE=2 GROUP_RANK=$node \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$torch_port KOLO_HOST_ID=node$node
}
jsrun_one_host() {
  echo JSM_NAMESPACE_RANK=$1 JSM_NAMESPACE_SIZE=3 JSM_NAMESPACE_LOCAL_RANK=$1 \
    JSM_NAMESPACE_LOCAL_SIZE=3 PMIX_NAMESPACE=jsm-test-$job
}

status=0
run_case srun-one-node 3 srun_one_node || status=1
run_case srun-two-nodes 4 srun_two_nodes || status=1
run_case torchrun-one-node 3 torchrun_one_node || status=1
torch_port=$(free_ports 1)
run_case torchrun-two-nodes 4 torchrun_two_nodes || status=1
run_case jsrun-one-host 3 jsrun_one_host || status=1
# The two-node cases really ran as two hosts (shm inside, tcp between).
for name in srun-two-nodes torchrun-two-nodes; do
  if ! grep -q 'hier' "$work/$name.0.out"; then
    echo "FAIL $name: the hierarchical allreduce was not chosen (one host?)"
    cat "$work/$name.0.out"
    status=1
  fi
done
exit $status

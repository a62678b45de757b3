#!/usr/bin/env bash
# kolo against Horovod 0.28.1 (bench/peers/setup-horovod.sh), one run, the
# two alternating round by round:
#
#   allreduce   hvd.allreduce of float32 8 B .. 64 MiB on 2 ranks of one
#               host: Horovod with its Gloo controller (horovodrun --gloo),
#               Horovod with MPI (horovodrun --mpi), kolo (kolorun);
#               bench/peers/hvd_allreduce.py, median per call.
#   allreduce_inplace  the same through hvd.allreduce_ (into the input: no
#               fresh output tensor to page in; not in the default parts).
#   synthetic   Horovod's own examples/pytorch_synthetic_benchmark.py,
#               unchanged (kolo serves `import horovod.torch` through the
#               conformance shim), ResNet-18 and ResNet-50 on the CPU, 2 ranks
#               of one host: horovodrun (--mpi, its default here, and
#               --gloo) against kolorun, and the machine's ceiling: two
#               independent 1-rank runs at once.
#   netns       the same benchmark on 2 network-namespace hosts, 1 rank each,
#               host links shaped to 1 Gbit/s (tests/multihost/netns.sh; root);
#               horovodrun --gloo (run on host 1, reaching host 2 through an
#               `ssh` that enters its namespace).
#   elastic     bench/peers/elastic_steps.py on 2 netns hosts x 2 ranks, rank
#               1 SIGKILLed at step 5: seconds from the kill to the survivors'
#               next completed step, Horovod elastic (horovodrun --min-np 2
#               with a host discovery script) against kolo (kolorun --min-np 2).
#   binding     kolo's synthetic benchmark and the ceiling, unbound and with
#               every rank bound to its core (kolorun --bind-to core; the
#               ceiling's two 1-rank runs on one core each, taskset), the
#               two alternating (the order flips every round); no Horovod
#               (not in the default parts; docs/pipeline.md, "CPU binding").
#
#   bench/vs_horovod.sh [--build-dir build] [--rounds 6] [--parts allreduce,synthetic,netns,elastic]
#                       [--models resnet18,resnet50] [--batch 16] [--iters 3]
#                       [--python /usr/bin/python3] [--bind-to none|core] [--out DIR]
#
# --bind-to core: in the synthetic part, kolo's ranks are bound to a core
# each (kolorun --bind-to core) and so are the ceiling's two 1-rank runs
# (taskset, one core each); Horovod's runs are left as horovodrun starts
# them. Default none (as before).
#
# --python: kolo's interpreter (its torch is the one kolo trains with;
# Horovod always uses its own environment, which sees Debian's torch 1.13).
# Every process runs one compute thread (OMP_NUM_THREADS=1), so 2 ranks use
# the 2 cores and neither library gets more compute than the other. Each
# library's background thread's CPU time is read from /proc at the end of
# every synthetic run: the main threads (the training loop) apart from all
# other threads (the library's background loop and its transport's).
# Writes $OUT/report.md (the tables) and $OUT/vs_horovod.png; raw logs in $OUT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
ROUNDS=6
PARTS=allreduce,synthetic,netns,elastic
MODELS=resnet18,resnet50
BATCH=16
ITERS=3
KOLO_PY=/usr/bin/python3
BIND_TO=none
OUT=""
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "vs_horovod.sh: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --build-dir) BUILD_DIR="$(cd "$2" && pwd)" ;;
    --rounds) ROUNDS="$2" ;;
    --parts) PARTS="$2" ;;
    --models) MODELS="$2" ;;
    --batch) BATCH="$2" ;;
    --iters) ITERS="$2" ;;
    --python) KOLO_PY="$2" ;;
    --bind-to) BIND_TO="$2" ;;
    --out) OUT="$2" ;;
    *) echo "vs_horovod.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift 2
done

CONFORMANCE="${KOLO_HOROVOD_CONFORMANCE:-$ROOT/../shared/conformance/horovod}"
SHIM="$CONFORMANCE/shim"
SYNTHETIC="$CONFORMANCE/examples/pytorch_synthetic_benchmark.py"
HVD_ENV="${KOLO_PEERS:-$ROOT/.peers}/horovod"
HVD_PY="$HVD_ENV/bin/python"
HVDRUN="$HVD_ENV/bin/horovodrun"
KOLORUN="$BUILD_DIR/bin/kolorun"
case "$BIND_TO" in none | core) ;; *) echo "vs_horovod.sh: --bind-to expects none or core, got '$BIND_TO'" >&2; exit 2 ;; esac
NEEDS_HOROVOD=0
for part in ${PARTS//,/ }; do [ "$part" = binding ] || NEEDS_HOROVOD=1; done
if [ $NEEDS_HOROVOD = 1 ]; then
  "$ROOT/bench/peers/setup-horovod.sh" --check >/dev/null ||
    { echo "vs_horovod.sh: Horovod is not installed: run bench/peers/setup-horovod.sh" >&2; exit 1; }
fi
[ -x "$KOLORUN" ] || { echo "vs_horovod.sh: no $KOLORUN (build kolo first)" >&2; exit 1; }
[ -f "$SYNTHETIC" ] || { echo "vs_horovod.sh: no $SYNTHETIC (set KOLO_HOROVOD_CONFORMANCE)" >&2; exit 1; }
OUT="${OUT:-$(mktemp -d /tmp/kolo-vs-horovod.XXXXXX)}"
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export PYTHONDONTWRITEBYTECODE=1
KOLO_PATH="$SHIM:$BUILD_DIR/python"
RESULTS="$OUT/results.txt" # "part key round value" lines
: >"$RESULTS"
log() { echo "vs_horovod: $*" >&2; }
has_part() { [[ ",$PARTS," == *",$1,"* ]]; }

# watch_threads FILE: until killed, every second, writes to FILE the CPU
# ticks (user + system, 1/100 s) so far of the synthetic benchmark's
# processes, "MAIN OTHER": their main threads (the training loop) and every
# other thread (the library's background loop and its transport's threads;
# OMP_NUM_THREADS=1 leaves torch no pool of its own). Each thread counts with
# the last value it was seen with, also after it has ended.
watch_threads() {
  local file="$1" pids key
  local -A ticks=() main=()
  while sleep 1; do
    pids="$( (pgrep -f "^[^ ]*python[0-9.]* [^ ]*pytorch_synthetic_benchmark.py" || true) | tr '\n' ' ')"
    [ -n "$pids" ] || continue
    while read -r pid tid t; do
      ticks["$pid:$tid"]=$t
      main["$pid:$tid"]=$([ "$pid" = "$tid" ] && echo 1 || echo 0)
    done < <(for pid in $pids; do
        awk -v pid="$pid" '{ n = split($0, f, ") "); split(f[n], s, " ")
          print pid, $1, s[12] + s[13] }' /proc/"$pid"/task/*/stat 2>/dev/null
      done)
    local m=0 o=0
    for key in "${!ticks[@]}"; do
      if [ "${main[$key]}" = 1 ]; then m=$((m + ticks[$key])); else o=$((o + ticks[$key])); fi
    done
    echo "$m $o" >"$file"
  done
}

# ---- allreduce ------------------------------------------------------------
# allreduce_round ROUND PART [--inplace]: PART is allreduce (hvd.allreduce)
# or allreduce_inplace (hvd.allreduce_).
allreduce_round() {
  local r="$1" part="$2" peer log
  shift 2
  for peer in horovod-gloo horovod-mpi kolo; do
    log="$OUT/$part.$peer.$r.log"
    case "$peer" in
      horovod-gloo) timeout 300 "$HVDRUN" --gloo -np 2 -H localhost:2 "$HVD_PY" \
        "$ROOT/bench/peers/hvd_allreduce.py" --lib horovod "$@" >"$log" 2>&1 ;;
      horovod-mpi) timeout 300 "$HVDRUN" --mpi -np 2 -H localhost:2 "$HVD_PY" \
        "$ROOT/bench/peers/hvd_allreduce.py" --lib horovod "$@" >"$log" 2>&1 ;;
      kolo) PYTHONPATH="$BUILD_DIR/python" timeout 300 "$KOLORUN" -np 2 "$KOLO_PY" \
        "$ROOT/bench/peers/hvd_allreduce.py" --lib kolo "$@" >"$log" 2>&1 ;;
    esac || { log "$part round $r, $peer failed:"; tail -20 "$log" >&2; exit 1; }
    grep -o 'allreduce [0-9]* [0-9.]*' "$log" | awk -v part="$part" -v p="$peer" -v r="$r" \
      '{ print part " " p ":" $2 " " r " " $3 }' >>"$RESULTS"
  done
}

# ---- synthetic benchmark --------------------------------------------------
synthetic_args() { # MODEL
  echo --model "$1" --batch-size "$BATCH" --num-warmup-batches 1 --num-batches-per-iter 2 \
    --num-iters "$ITERS" --no-cuda
}
total_rate() { sed -n 's/.*Total img\/sec on [0-9]* [A-Z]*(s): \([0-9.]*\).*/\1/p' "$1" | tail -1; }

# synthetic_run PART KEY ROUND LOG COMMAND...: runs it, records its total
# img/s and the CPU seconds of its processes' main and other threads.
synthetic_run() {
  local part="$1" key="$2" r="$3" log="$4" watcher rate cpu
  shift 4
  watch_threads "$log.cpu" &
  watcher=$!
  "$@" >"$log" 2>&1 || { kill $watcher 2>/dev/null || true; log "$key round $r failed:"; tail -20 "$log" >&2; exit 1; }
  kill $watcher 2>/dev/null || true
  wait $watcher 2>/dev/null || true
  rate="$(total_rate "$log")"
  [ -n "$rate" ] || { log "$key round $r printed no rate:"; tail -20 "$log" >&2; exit 1; }
  read -r main other <"$log.cpu" 2>/dev/null || { main=0; other=0; }
  echo "$part $key $r $rate" >>"$RESULTS"
  echo "$part $key.main_cpu $r $(awk -v t="$main" 'BEGIN { print t / 100 }')" >>"$RESULTS"
  echo "$part $key.other_cpu $r $(awk -v t="$other" 'BEGIN { print t / 100 }')" >>"$RESULTS"
  log "$part $key round $r: $rate img/s (CPU s: main threads $((main / 100)), other threads $((other / 100)))"
}

synthetic_round() {
  local r="$1" model
  for model in ${MODELS//,/ }; do
    # horovodrun's default on one host with MPI built in is MPI; Gloo too.
    # shellcheck disable=SC2046
    synthetic_run synthetic "horovod:$model" "$r" "$OUT/synthetic.horovod.$model.$r.log" \
      timeout 900 "$HVDRUN" --mpi -np 2 -H localhost:2 "$HVD_PY" "$SYNTHETIC" $(synthetic_args "$model")
    # shellcheck disable=SC2046
    synthetic_run synthetic "horovod-gloo:$model" "$r" "$OUT/synthetic.horovod-gloo.$model.$r.log" \
      timeout 900 "$HVDRUN" --gloo -np 2 -H localhost:2 "$HVD_PY" "$SYNTHETIC" $(synthetic_args "$model")
    kolo_synthetic synthetic "kolo:$model" "$r" "$model" "$BIND_TO"
    ceiling_run synthetic "ceiling:$model" "$r" "$model" "$BIND_TO"
  done
}

# kolo_synthetic PART KEY ROUND MODEL BIND: kolo's 2-rank run, kolorun --bind-to BIND.
kolo_synthetic() {
  local part="$1" key="$2" r="$3" model="$4" bind="$5"
  # shellcheck disable=SC2046
  synthetic_run "$part" "$key" "$r" "$OUT/$part.${key//:/.}.$r.log" \
    env PYTHONPATH="$KOLO_PATH" timeout 900 "$KOLORUN" -np 2 --bind-to "$bind" "$KOLO_PY" \
    "$SYNTHETIC" $(synthetic_args "$model")
}

# ceiling_run PART KEY ROUND MODEL BIND: the ceiling, two 1-rank runs at once,
# no communication at all; BIND=core: each on one core of its own (the
# first two CPUs this script may use), as kolo's bound ranks are.
ceiling_run() {
  local part="$1" key="$2" r="$3" model="$4" bind="$5" cpus
  local a="$OUT/$part.${key//:/.}.$r.a.log" b="$OUT/$part.${key//:/.}.$r.b.log"
  local pin_a=() pin_b=()
  if [ "$bind" = core ]; then
    read -r -a cpus < <(/usr/bin/python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])')
    [ ${#cpus[@]} = 2 ] || { log "--bind-to core: the ceiling needs two CPUs"; exit 1; }
    pin_a=(taskset -c "${cpus[0]}")
    pin_b=(taskset -c "${cpus[1]}")
  fi
  # shellcheck disable=SC2046
  PYTHONPATH="$KOLO_PATH" timeout 900 "${pin_a[@]}" "$KOLORUN" -np 1 --bind-to "$bind" \
    "$KOLO_PY" "$SYNTHETIC" $(synthetic_args "$model") >"$a" 2>&1 &
  local pa=$!
  # shellcheck disable=SC2046
  PYTHONPATH="$KOLO_PATH" timeout 900 "${pin_b[@]}" "$KOLORUN" -np 1 --bind-to "$bind" \
    "$KOLO_PY" "$SYNTHETIC" $(synthetic_args "$model") >"$b" 2>&1 ||
    { log "ceiling run failed"; tail "$b" >&2; exit 1; }
  wait $pa || { log "ceiling run failed"; tail "$a" >&2; exit 1; }
  local total
  total="$(awk -v a="$(total_rate "$a")" -v b="$(total_rate "$b")" 'BEGIN { print a + b }')"
  echo "$part $key $r $total" >>"$RESULTS"
  log "$part $key round $r: $total img/s"
}

# binding_round ROUND: kolo and the ceiling unbound and bound, alternating.
binding_round() {
  local r="$1" model bind order="none core"
  [ $((r % 2)) = 0 ] && order="core none"
  for model in ${MODELS//,/ }; do
    for bind in $order; do
      kolo_synthetic binding "kolo-$bind:$model" "$r" "$model" "$bind"
      ceiling_run binding "ceiling-$bind:$model" "$r" "$model" "$bind"
    done
  done
}

# ---- netns hosts ------------------------------------------------------------
netns_setup() {
  # shellcheck source=tests/multihost/netns.sh
  source "$ROOT/tests/multihost/netns.sh"
  netns_require
  netns_up 2 1gbit
  # Gloo (under Horovod) looks up each host's own name: every namespace's
  # /etc/hosts (ip netns exec binds /etc/netns/NAME/hosts over it) names both.
  local i j
  for i in 1 2; do
    mkdir -p "/etc/netns/${NETNS_NAMES[$i]}"
    { cat /etc/hosts; for j in 1 2; do echo "${NETNS_IPS[$j]} ${NETNS_NAMES[$j]}"; done; } \
      >"/etc/netns/${NETNS_NAMES[$i]}/hosts"
  done
  trap 'rm -rf "/etc/netns/${NETNS_NAMES[1]}" "/etc/netns/${NETNS_NAMES[2]}"; netns_down' EXIT
  trap 'exit 130' INT TERM
  # horovodrun reaches hosts with `ssh`: the netns stand-in under that name.
  # It runs on host 1 (as from an allocation's first node), so the address
  # its rendezvous server announces on eth0 is one the other host reaches.
  SSH_DIR="$OUT/ssh-bin"
  mkdir -p "$SSH_DIR"
  ln -sf "$NETNS_SSH" "$SSH_DIR/ssh"
  HOSTS1="${NETNS_IPS[1]}:1,${NETNS_IPS[2]}:1"
  HOSTS2="${NETNS_IPS[1]}:2,${NETNS_IPS[2]}:2"
  NETNS_IFACE="$NETNS_SUBNET.0/24"
}

netns_round() {
  local r="$1" model
  for model in ${MODELS//,/ }; do
    # shellcheck disable=SC2046
    synthetic_run netns "horovod:$model" "$r" "$OUT/netns.horovod.$model.$r.log" \
      ip netns exec "${NETNS_NAMES[1]}" env PATH="$SSH_DIR:$PATH" HOROVOD_GLOO_IFACE=eth0 timeout 900 "$HVDRUN" --gloo -np 2 -H "$HOSTS1" \
      --network-interface "eth0" "$HVD_PY" "$SYNTHETIC" $(synthetic_args "$model")
    # shellcheck disable=SC2046
    synthetic_run netns "kolo:$model" "$r" "$OUT/netns.kolo.$model.$r.log" \
      env PYTHONPATH="$KOLO_PATH" timeout 900 "$KOLORUN" -np 2 -H "$HOSTS1" \
      --ssh-command "$NETNS_SSH" -x PYTHONPATH -x OMP_NUM_THREADS "$KOLO_PY" "$SYNTHETIC" \
      $(synthetic_args "$model")
  done
}

# ---- elastic ----------------------------------------------------------------
# recovery LOG: the last survivor's first step after the kill - the kill.
recovery() {
  awk '/victim kills itself at/ { k = $NF }
       /^(\[[^]]*\] ?)?step [0-9]+ done by pid/ || /step [0-9]+ done by pid/ {
         t = $NF; pid = $0; sub(/.*by pid /, "", pid); sub(/ .*/, "", pid)
         if (k != "" && t > k && !(pid in first)) first[pid] = t }
       END { if (k == "") exit 1; m = 0; for (p in first) if (first[p] > m) m = first[p]
             if (m == 0) exit 1; printf "%.3f\n", m - k }' "$1"
}

elastic_round() {
  local r="$1" log discover
  discover="$OUT/discover-hosts.sh"
  printf '#!/bin/sh\necho %s:2\necho %s:2\n' "${NETNS_IPS[1]}" "${NETNS_IPS[2]}" >"$discover"
  chmod +x "$discover"
  log="$OUT/elastic.horovod.$r.log"
  rm -f "$OUT/elastic.marker"
  ip netns exec "${NETNS_NAMES[1]}" env PATH="$SSH_DIR:$PATH" HOROVOD_GLOO_IFACE=eth0 timeout 300 "$HVDRUN" -np 4 --min-np 2 \
    --host-discovery-script "$discover" --network-interface eth0 \
    "$HVD_PY" "$ROOT/bench/peers/elastic_steps.py" --lib horovod --marker "$OUT/elastic.marker" \
    >"$log" 2>&1 || log "elastic round $r: horovodrun exited $? (see $log)"
  echo "elastic horovod $r $(recovery "$log" || echo nan)" >>"$RESULTS"
  log="$OUT/elastic.kolo.$r.log"
  rm -f "$OUT/elastic.marker"
  PYTHONPATH="$BUILD_DIR/python" timeout 300 "$KOLORUN" --min-np 2 -np 4 -H "$HOSTS2" \
    --ssh-command "$NETNS_SSH" -x PYTHONPATH -x OMP_NUM_THREADS "$KOLO_PY" \
    "$ROOT/bench/peers/elastic_steps.py" --lib kolo --marker "$OUT/elastic.marker" \
    >"$log" 2>&1 || log "elastic round $r: kolorun exited $? (see $log)"
  echo "elastic kolo $r $(recovery "$log" || echo nan)" >>"$RESULTS"
  log "elastic round $r: horovod $(tail -2 "$RESULTS" | head -1 | cut -d' ' -f4) s, kolo $(tail -1 "$RESULTS" | cut -d' ' -f4) s"
}

HVD_VERSION="not used"
if [ $NEEDS_HOROVOD = 1 ]; then
  HVD_VERSION="$("$HVD_PY" -c 'import horovod; print(horovod.__version__)') with torch $("$HVD_PY" -c 'import torch; print(torch.__version__)')"
fi
log "machine: $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg); kolo $(git -C "$ROOT" rev-parse --short HEAD), torch $("$KOLO_PY" -c 'import torch; print(torch.__version__)'); Horovod $HVD_VERSION; --bind-to $BIND_TO; logs in $OUT"
if has_part netns || has_part elastic; then netns_setup; fi
for ((r = 1; r <= ROUNDS; r++)); do
  if has_part allreduce; then log "round $r/$ROUNDS: allreduce"; allreduce_round "$r" allreduce; fi
  if has_part allreduce_inplace; then
    log "round $r/$ROUNDS: allreduce_inplace"
    allreduce_round "$r" allreduce_inplace --inplace
  fi
  if has_part synthetic; then log "round $r/$ROUNDS: synthetic"; synthetic_round "$r"; fi
  if has_part netns; then log "round $r/$ROUNDS: netns"; netns_round "$r"; fi
  if has_part binding; then log "round $r/$ROUNDS: binding"; binding_round "$r"; fi
  if has_part elastic; then log "round $r/$ROUNDS: elastic"; elastic_round "$r"; fi
done
log "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 "$ROOT/bench/vs_horovod_report.py" "$RESULTS" --plot "$OUT/vs_horovod.png" |
  tee "$OUT/report.md"

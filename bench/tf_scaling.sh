#!/usr/bin/env bash
# TensorFlow / Keras on 2 ranks of this host: kolo.keras against
# tf.distribute.MultiWorkerMirroredStrategy (TensorFlow's own collective
# ops over gRPC on loopback) on the same model and per-rank batch, and
# against the machine's ceiling (two independent 1-rank runs at once, their
# clocks started when both have warmed up, each training on until the other
# has timed its steps; their images/s added up); and one 64 MiB float32 allreduce
# through kolo.tensorflow against MWMS's all-reduce. Prints a markdown table
# with the ratios, writes OUT/results.json and draws OUT/tf_scaling.png
# (python3-matplotlib, Debian's /usr/bin/python3).
#
#   bench/tf_scaling.sh [--build-dir build] [--python .venv/bin/python] [--rounds 3]
#                       [--models "cnn resnet50"] [--keras "2 3"] [--no-allreduce]
#                       [--cnn-steps 150] [--resnet-steps 12] [--resnet-image 64]
#                       [--resnet-batch 16] [--iters 20] [--threads 1] [--inter-op 0]
#                       [--out DIR] [--from DIR]
#
# Models (bench/tf_scaling.py): cnn, Horovod's TensorFlow 2 MNIST CNN on
# Debian's Fashion-MNIST, batch 64 per rank, Adam; resnet50,
# keras.applications.ResNet50 (weights None, 1000 classes) on synthetic
# --resnet-image x --resnet-image images (64 by default: 224 would take
# minutes a step on 2 cores), batch --resnet-batch per rank, SGD. Each run:
# one model.fit of 5 warm-up steps (3 for resnet50) and the timed steps;
# --threads intra-op TensorFlow threads per process (1 by default; 0 is
# TensorFlow's default, one per core) and --inter-op inter-op threads (0,
# TensorFlow's default), alike for every system. kolo's ranks run with kolo.tensorflow's
# runtime settings (docs/tensorflow.md, "Runtime settings for TensorFlow
# ranks") unless the environment sets them; meta.txt lists the KOLO_*
# variables the run had.
#
# Keras: "2" is tf_keras (TF_USE_LEGACY_KERAS=1), where all three systems
# run (MWMS's model.fit fails under Keras 3, keras-team/keras#20585); "3"
# adds kolo.keras on Keras 3 against the Keras 3 ceiling.
#
# The systems alternate within every round, each round starting with the
# next one, so that a load that drifts falls on all of them; the ratios are
# taken within a round (runs minutes apart) and the table gives their median
# over the rounds and the range. --from DIR prints the table again from a
# run's JSON.
#
# Goals (issue 26): kolo.keras >= 95% of the ceiling and >= 1.2x MWMS's
# images/s; the 64 MiB allreduce >= 2x MWMS's. Exit status: 0 when every run
# worked (goals missed are reported), 1 when a run failed, 2 on a bad option.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${KOLO_BUILD_DIR:-$ROOT/build}"
PY="$ROOT/.venv/bin/python"
ROUNDS=3
MODELS="cnn resnet50"
KERAS="2 3"
ALLREDUCE=1
CNN_STEPS=150
RESNET_STEPS=12
RESNET_IMAGE=64
RESNET_BATCH=16
ITERS=20
THREADS=1
INTER_OP=0
OUT_DIR=""
FROM=""
RUN_TIMEOUT=900

usage() {
  sed -n '2,/^set -e/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --keras) KERAS="$2"; shift 2 ;;
    --no-allreduce) ALLREDUCE=0; shift ;;
    --cnn-steps) CNN_STEPS="$2"; shift 2 ;;
    --resnet-steps) RESNET_STEPS="$2"; shift 2 ;;
    --resnet-image) RESNET_IMAGE="$2"; shift 2 ;;
    --resnet-batch) RESNET_BATCH="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --inter-op) INTER_OP="$2"; shift 2 ;;
    --out) OUT_DIR="$2"; shift 2 ;;
    --from) FROM="$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "tf_scaling.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
for m in $MODELS; do
  case "$m" in cnn | resnet50) ;; *) echo "tf_scaling.sh: --models takes cnn and resnet50, not $m" >&2; exit 2 ;; esac
done
for v in "$THREADS" "$INTER_OP"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "tf_scaling.sh: --threads and --inter-op take a count >= 0, not $v" >&2; exit 2; }
done
for k in $KERAS; do
  case "$k" in 2 | 3) ;; *) echo "tf_scaling.sh: --keras takes 2 and 3, not $k" >&2; exit 2 ;; esac
done

if [[ -n "$FROM" ]]; then
  OUT_DIR="$FROM"
else
  if [[ -z "$OUT_DIR" ]]; then OUT_DIR="$(mktemp -d /tmp/tf_scaling.XXXXXX)"; fi
  mkdir -p "$OUT_DIR"
  BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
  KOLORUN="$BUILD_DIR/bin/kolorun"
  [[ -x "$KOLORUN" ]] || { echo "tf_scaling.sh: no $KOLORUN (build first)" >&2; exit 1; }
  ls "$BUILD_DIR"/python/kolo/tensorflow/_kolo_tf_ops*.so >/dev/null 2>&1 ||
    { echo "tf_scaling.sh: no kolo.tensorflow op library in $BUILD_DIR/python (build kolo_tf_ops)" >&2; exit 1; }
  [[ -x "$PY" ]] || { echo "tf_scaling.sh: no Python with TensorFlow at $PY (--python)" >&2; exit 1; }
  export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
  export TF_CPP_MIN_LOG_LEVEL=2 OMP_NUM_THREADS=1
  BENCH=("$PY" "$ROOT/bench/tf_scaling.py")

  # run NAME COMMAND...: one run, its output in OUT_DIR/NAME.log.
  run() {
    local name="$1"; shift
    echo "+ $*" >"$OUT_DIR/$name.log"
    if ! timeout "$RUN_TIMEOUT" "$@" >>"$OUT_DIR/$name.log" 2>&1; then
      echo "tf_scaling.sh: $name failed:" >&2
      grep -v '^I0000\|^E0000\|^W0000\|^WARNING: All log' "$OUT_DIR/$name.log" | tail -20 >&2
      exit 1
    fi
  }
  model_args() { # model -> its tf_scaling.py arguments
    case "$1" in
      cnn) echo "--model cnn --batch-size 64 --warmup 5 --steps $CNN_STEPS" ;;
      resnet50) echo "--model resnet50 --batch-size $RESNET_BATCH --image-size $RESNET_IMAGE --warmup 3 --steps $RESNET_STEPS" ;;
    esac
    echo "--threads $THREADS --inter-op $INTER_OP"
  }
  # one SYSTEM MODEL KERAS ROUND: one job of that system.
  one() {
    local system="$1" model="$2" k="$3" r="$4" legacy=0
    [[ "$k" == 2 ]] && legacy=1
    local name="${model}_k${k}_${system}_r$r"
    # shellcheck disable=SC2207
    local margs=($(model_args "$model"))
    echo "round $r/$ROUNDS: $model, Keras $k, $system" >&2
    case "$system" in
      kolo) run "$name" env TF_USE_LEGACY_KERAS=$legacy "$KOLORUN" -np 2 "${BENCH[@]}" train \
              --system kolo "${margs[@]}" --json "$OUT_DIR/$name" ;;
      mwms) run "$name" env TF_USE_LEGACY_KERAS=$legacy "${BENCH[@]}" train --system mwms --nproc 2 \
              "${margs[@]}" --json "$OUT_DIR/$name" ;;
      ceil)
        run "${name}A" env TF_USE_LEGACY_KERAS=$legacy "${BENCH[@]}" train --system single \
          "${margs[@]}" --together "$OUT_DIR/$name.together" --json "$OUT_DIR/${name}A" &
        local pid_a=$!
        run "${name}B" env TF_USE_LEGACY_KERAS=$legacy "${BENCH[@]}" train --system single \
          "${margs[@]}" --together "$OUT_DIR/$name.together" --json "$OUT_DIR/${name}B" &
        local pid_b=$!
        wait "$pid_a" || exit 1
        wait "$pid_b" || exit 1 ;;
      ar_kolo) run "allreduce_kolo_r$r" env TF_USE_LEGACY_KERAS=1 "$KOLORUN" -np 2 "${BENCH[@]}" \
                 allreduce --system kolo --mib 64 --iters "$ITERS" --json "$OUT_DIR/allreduce_kolo_r$r" ;;
      ar_mwms) run "allreduce_mwms_r$r" env TF_USE_LEGACY_KERAS=1 "${BENCH[@]}" allreduce \
                 --system mwms --nproc 2 --mib 64 --iters "$ITERS" --json "$OUT_DIR/allreduce_mwms_r$r" ;;
    esac
  }
  # rotate N WORDS...: the words starting at the N-th (mod count).
  rotate() {
    local n="$1"; shift
    local words=("$@") i
    for ((i = 0; i < ${#words[@]}; ++i)); do echo "${words[(i + n) % ${#words[@]}]}"; done
  }
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "host: $(getconf _NPROCESSORS_ONLN) cores; uptime before: $(uptime)"
    echo "rounds: $ROUNDS; models: $MODELS; keras: $KERAS; cnn steps $CNN_STEPS (batch 64);" \
      "resnet50 steps $RESNET_STEPS (batch $RESNET_BATCH, ${RESNET_IMAGE}x$RESNET_IMAGE); allreduce iters $ITERS"
    echo "threads: $THREADS intra-op, $INTER_OP inter-op (0: TensorFlow's default), per process (every system)"
    kolo_env="$(env | grep '^KOLO_' | sort | tr '\n' ' ' || true)"
    echo "KOLO_* in the environment: ${kolo_env:-none, so kolo.tensorflow sets its runtime settings}"
    echo "command: bench/tf_scaling.sh --rounds $ROUNDS --models \"$MODELS\" --keras \"$KERAS\"" \
      "--cnn-steps $CNN_STEPS --resnet-steps $RESNET_STEPS --resnet-image $RESNET_IMAGE" \
      "--resnet-batch $RESNET_BATCH --iters $ITERS --threads $THREADS --inter-op $INTER_OP$([[ $ALLREDUCE == 1 ]] || echo ' --no-allreduce')"
  } >>"$OUT_DIR/meta.txt"
  for ((r = 1; r <= ROUNDS; ++r)); do
    for model in $MODELS; do
      for k in $KERAS; do
        systems=(kolo ceil)
        [[ "$k" == 2 ]] && systems=(kolo mwms ceil)
        for system in $(rotate $((r - 1)) "${systems[@]}"); do one "$system" "$model" "$k" "$r"; done
      done
    done
    if [[ "$ALLREDUCE" == 1 ]]; then
      for system in $(rotate $((r - 1)) ar_kolo ar_mwms); do one "$system" allreduce 2 "$r"; done
    fi
  done
  echo "uptime after: $(uptime)" >>"$OUT_DIR/meta.txt"
fi

REPORT=(/usr/bin/python3 "$ROOT/bench/tf_scaling_report.py" "$OUT_DIR")
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null && REPORT+=(--plot "$OUT_DIR/tf_scaling.png")
"${REPORT[@]}"
echo "runs and logs: $OUT_DIR" >&2

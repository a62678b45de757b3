#!/usr/bin/env bash
# A job stopped at step 23 and resumed from its checkpoint ends at step 40
# with the same parameters, bit for bit, as a job that ran the 40 steps
# without stopping (2 ranks, KOLO_DETERMINISTIC=1; see checkpoint_resume.py).
#   checkpoint_resume.sh KOLORUN PYTHON [PROGRAM...]
# PROGRAM, when given, is run instead of PYTHON checkpoint_resume.py (the
# C++ tests/torch/checkpoint_resume.cc takes the same flags).
set -euo pipefail
kolorun=$1 python=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
program=("$python" "$here/checkpoint_resume.py")
[ $# -gt 0 ] && program=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KOLO_DETERMINISTIC=1
run() { "$kolorun" -np 2 "${program[@]}" "$@"; }
run --steps 40 --out "$work/straight.txt"
run --steps 40 --stop-at 23 --ckpt "$work/ckpt-{step}.pt"
ls "$work"/ckpt-23.pt
if ls -a "$work" | grep -q '\.tmp\.'; then echo "a temporary file was left behind"; exit 1; fi
run --steps 40 --resume "$work/ckpt-{step}.pt" --out "$work/resumed.txt"
if cmp -s "$work/straight.txt" "$work/resumed.txt"; then
  echo "resumed job equals the uninterrupted one bit for bit"
else
  echo "resumed job differs from the uninterrupted one"
  diff <(tr ' ' '\n' < "$work/straight.txt") <(tr ' ' '\n' < "$work/resumed.txt") | head
  exit 1
fi

#!/usr/bin/env bash
# Throughput of kolo.torch.zero stages 1-3 against kolo.torch.DistributedOptimizer
# and torch's ZeroRedundancyOptimizer (gloo), N = 2 and 4, one job each
# (variants interleaved inside; bench/zero_speed.py). From the source tree:
#   bash bench/zero_speed.sh [build]   (extra arguments go to zero_speed.py)
set -euo pipefail
build=${1:-build}
shift || true
here=$(cd "$(dirname "$0")" && pwd)
for n in 2 4; do
  PYTHONPATH="$build/python" "$build/bin/kolorun" -np "$n" /usr/bin/python3 \
    "$here/zero_speed.py" "$@" 2>&1 | grep '^\[0\]' | sed 's/^\[0\] //'
done

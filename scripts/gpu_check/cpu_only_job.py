"""A CPU-only kolo job for scripts/gpu-check.sh (check no_cuda_context):
collectives on host memory through kolo's runtime (kolo.numpy) and kolo.h's
synchronous calls, in a libkolo built with CUDA, on a machine with a GPU.
None of the ranks may hold a CUDA context: while every rank is still alive
(after the collectives, before the barrier that ends the job), rank 0 asks
nvidia-smi for the processes using the GPU and fails if any rank's pid is
among them. The device probe (kolo_cuda_device_count) is asked too: it
answers without a context.

    kolorun -np 2 python3 scripts/gpu_check/cpu_only_job.py OUT.txt
"""

import os
import subprocess
import sys

import numpy as np

import kolo
import kolo.numpy as kn
from kolo import _native


def main():
    kolo.init()
    rank, size = kolo.rank(), kolo.size()
    x = np.full(1 << 20, float(rank + 1), dtype=np.float32)
    total = kn.allreduce(x, op=kn.Sum, name="cpu.allreduce")
    assert total[0] == size * (size + 1) / 2, total[0]
    gathered = kn.allgather(np.arange(4, dtype=np.int64) + rank, name="cpu.allgather")
    assert gathered.shape == (4 * size,)
    count, reason = _native.cuda_devices()  # the probe: no context either
    pids = kn.allgather(np.array([os.getpid()], dtype=np.int64), name="cpu.pids")
    verdict = 0
    if rank == 0:
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True, text=True, check=True).stdout.split()
        holding = sorted(set(int(p) for p in apps if p.isdigit()) & set(pids.tolist()))
        line = ("ranks %s: %d hold a CUDA context (nvidia-smi compute apps: %s); "
                "probe: %d devices %s" % (pids.tolist(), len(holding), apps or "none",
                                           count, reason))
        with open(sys.argv[1], "w") as f:
            f.write(line + "\n")
        print(line)
        verdict = 1 if holding else 0
    verdict = int(kn.allreduce(np.array([verdict], dtype=np.int32), op=kn.Max,
                               name="cpu.verdict")[0])
    kolo.shutdown()
    sys.exit(verdict)


if __name__ == "__main__":
    main()

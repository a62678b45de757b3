#!/usr/bin/python3
"""The single-master baseline of bench/ps_shards.sh, written the way
MPI-Learn's master and workers talk (mpi_learn/mpi/process.py): one Python
master (rank 0, mpi4py) holds the weights; each worker sends its gradient
(--floats float32, ResNet-50's size by default, as one buffer), the master
receives from any worker, applies SGD (numpy) and sends the new weights
back to that worker, which waits for them before its next step. The
master serves the workers one at a time, as MPI-Learn's does. Run with
mpirun -np 5 (1 master, 4 workers):

    mpirun -np 5 /usr/bin/python3 bench/ps_mpilearn.py

A step is one gradient sent and the weights received (no compute); its
time is the slowest worker's. The master prints one JSON line:
{"bench": "ps_mpilearn", "workers", "floats", "step_seconds": [...]}.
"""

import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI

GRAD, WEIGHTS = 1, 2


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--floats", type=int, default=25557032)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.1)
    return p.parse_args()


def master(comm, a):
    workers = comm.Get_size() - 1
    weights = np.zeros(a.floats, dtype=np.float32)
    grad = np.empty(a.floats, dtype=np.float32)
    status = MPI.Status()
    for _ in range(workers * (a.warmup + a.steps)):
        comm.Recv([grad, MPI.FLOAT], source=MPI.ANY_SOURCE, tag=GRAD, status=status)
        weights -= a.lr * grad  # the master's optimizer (SGD)
        comm.Send([weights, MPI.FLOAT], dest=status.Get_source(), tag=WEIGHTS)


def worker(comm, a, workers_comm):
    weights = np.zeros(a.floats, dtype=np.float32)
    grad = np.full(a.floats, 1e-3, dtype=np.float32)
    times = []
    for step in range(a.warmup + a.steps):
        workers_comm.Barrier()
        start = time.perf_counter()
        comm.Send([grad, MPI.FLOAT], dest=0, tag=GRAD)
        comm.Recv([weights, MPI.FLOAT], source=0, tag=WEIGHTS)
        t = time.perf_counter() - start
        if step >= a.warmup:
            times.append(workers_comm.allreduce(t, op=MPI.MAX))
    return times


def main():
    a = parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    workers_comm = comm.Split(0 if rank > 0 else MPI.UNDEFINED, rank)
    if rank == 0:
        master(comm, a)
    else:
        times = worker(comm, a, workers_comm)
        if workers_comm.Get_rank() == 0:
            print(json.dumps({"bench": "ps_mpilearn", "workers": comm.Get_size() - 1,
                              "floats": a.floats, "step_seconds": times}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

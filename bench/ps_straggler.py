#!/usr/bin/python3
"""One run of bench/ps_straggler.sh: W workers train a model of ResNet-50's
size (torchvision's resnet50 parameter shapes, 25.6 M floats; without
torchvision, 161 tensors of the same total) whose compute is emulated by a
sleep of --compute-ms per step (--straggler: the last worker sleeps twice
as long), with one of three modes:

  allreduce  kolo.torch.DistributedOptimizer (kolorun -np W)
  sync       kolo.torch.ps sync PS          (kolorun --servers 1 -np W+1)
  downpour   kolo.torch.ps downpour          (kolorun --servers 1 -np W+1)

The gradient comes from a real backward pass of a trivial loss (the sum of
every parameter: gradients of ones, so the optimizer's hooks and the
servers' SGD see a real step); the sleep stands for the forward and
backward of the real model. After --warmup steps and a barrier, every
worker runs --steps timed steps (sync modes: all the same count, they wait
for each other) or, for downpour, steps until --seconds have passed (each
worker at its own pace). Throughput: the sum over workers of steps x
--batch-size / that worker's elapsed time. Worker 0 prints one JSON line:
{"bench": "ps_straggler", "mode", "straggler", "samples_per_s",
"per_worker_steps", "per_worker_seconds", ...}.
"""

import argparse
import json
import sys
import time

import torch

import kolo.torch as kolo
import kolo.torch.ps as ps


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["allreduce", "sync", "downpour"], required=True)
    p.add_argument("--compute-ms", type=float, default=1000.0,
                   help="emulated compute per step (the straggler: twice this)")
    p.add_argument("--straggler", action="store_true",
                   help="the last worker computes twice as long")
    p.add_argument("--steps", type=int, default=5, help="timed steps (sync modes)")
    p.add_argument("--seconds", type=float, default=0.0,
                   help="downpour: timed seconds (default: steps x compute)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--batch-size", type=int, default=32, help="samples per step")
    p.add_argument("--staleness-bound", type=int, default=16)
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.compute_ms < 0:
        p.error("--steps >= 1, --warmup >= 0, --compute-ms >= 0")
    return a


def resnet50_shapes():
    """The parameter shapes of ResNet-50 (25,557,032 floats)."""
    try:
        import torchvision
        return [tuple(p.shape) for p in torchvision.models.resnet50().parameters()]
    except ImportError:
        total, n = 25557032, 161
        return [((total // n) + (1 if i < total % n else 0),) for i in range(n)]


def barrier():
    kolo.allreduce(torch.zeros(1), name="bench.barrier", op=kolo.Sum)


def one_step(model, opt, sleep_s):
    opt.zero_grad()
    time.sleep(sleep_s)  # the forward and backward of the real model
    loss = sum(p.sum() for p in model.parameters()) * 1e-9
    loss.backward()
    opt.step()


def main():
    a = parse_args()
    kolo.init()  # a server rank serves here and exits
    rank, size = kolo.rank(), kolo.size()
    torch.manual_seed(0)
    model = torch.nn.ParameterList(
        [torch.nn.Parameter(torch.randn(s) * 0.01) for s in resnet50_shapes()])
    floats = sum(p.numel() for p in model.parameters())
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    if a.mode == "allreduce":
        opt = kolo.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
        kolo.broadcast_parameters(model.state_dict(), root_rank=0)
    else:
        opt = ps.DistributedOptimizer(sgd, named_parameters=model.named_parameters(),
                                      mode=a.mode, staleness_bound=a.staleness_bound)
    slow = a.straggler and rank == size - 1
    sleep_s = a.compute_ms / 1000.0 * (2 if slow else 1)
    for _ in range(a.warmup):
        one_step(model, opt, sleep_s)
    barrier()
    start = time.perf_counter()
    steps = 0
    budget = a.seconds or a.steps * a.compute_ms / 1000.0
    while True:
        one_step(model, opt, sleep_s)
        steps += 1
        if a.mode == "downpour":
            if time.perf_counter() - start >= budget:
                break
        elif steps == a.steps:
            break
    elapsed = time.perf_counter() - start
    mine = torch.tensor([float(steps), elapsed], dtype=torch.float64)
    every = kolo.allgather(mine.unsqueeze(0), name="bench.result")
    per_steps = [int(v) for v in every[:, 0].tolist()]
    per_seconds = every[:, 1].tolist()
    rate = sum(s * a.batch_size / t for s, t in zip(per_steps, per_seconds))
    if rank == 0:
        record = {"bench": "ps_straggler", "mode": a.mode, "straggler": a.straggler,
                  "workers": size, "floats": floats, "compute_ms": a.compute_ms,
                  "batch_size": a.batch_size, "samples_per_s": rate,
                  "per_worker_steps": per_steps, "per_worker_seconds": per_seconds}
        if a.mode != "allreduce":
            st = ps.stats()[0]
            record.update(updates=st["updates"], rejected=st["rejected"],
                          max_staleness=st["max_staleness"])
        print(json.dumps(record), flush=True)
    kolo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""One run of bench/ps_shards.sh on the parameter servers: every worker
pushes a gradient of --floats floats (default 25.6 M, ResNet-50's size, as
--tensors tensors of nearly equal size; the shard map splits and spreads
them over the servers) and pulls the parameters back, --steps timed times
after --warmup, through kolo.torch.ps in sync mode (SGD on the servers).
No compute: a step is the push and the pull. Each step's time is the
slowest worker's (steps are synchronous); worker 0 prints one JSON line:
{"bench": "ps_shards", "servers", "workers", "floats", "step_seconds": [...]}.

    kolorun --servers S -np S+4 /usr/bin/python3 bench/ps_shards.py
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
    p.add_argument("--floats", type=int, default=25557032)
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args()
    if a.floats < a.tensors or a.tensors < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--floats >= --tensors >= 1, --steps >= 1, --warmup >= 0")
    return a


def main():
    a = parse_args()
    kolo.init()  # a server rank serves here and exits
    base, extra = divmod(a.floats, a.tensors)
    params = [torch.nn.Parameter(torch.zeros(base + (1 if i < extra else 0)))
              for i in range(a.tensors)]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    opt = ps.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), mode="sync")
    for _ in range(a.warmup):
        opt.step()
    times = []
    for _ in range(a.steps):
        kolo.allreduce(torch.zeros(1), name="bench.barrier", op=kolo.Sum)
        start = time.perf_counter()
        opt.step()
        t = time.perf_counter() - start
        times.append(kolo.allreduce(torch.tensor([t], dtype=torch.float64),
                                    name="bench.step", op=kolo.Max).item())
    # Every worker holds the servers' values after the last pull: lr x the
    # average gradient subtracted once per step.
    expect = -0.1 * 1e-3 * (a.warmup + a.steps)
    got = params[0][0].item()
    if abs(got - expect) > 1e-6:
        raise SystemExit("ps_shards.py: worker %d: parameter 0 is %g after %d steps, "
                         "expected %g" % (kolo.rank(), got, a.warmup + a.steps, expect))
    if kolo.rank() == 0:
        print(json.dumps({"bench": "ps_shards", "servers": len(ps.stats()),
                          "workers": kolo.size(), "floats": a.floats,
                          "step_seconds": times}), flush=True)
    kolo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

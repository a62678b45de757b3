"""Throughput of sharded data parallelism (kolo.torch.zero stages 1-3)
against kolo.torch.DistributedOptimizer and PyTorch's
ZeroRedundancyOptimizer (torch.distributed over gloo, gradients averaged
by DistributedDataParallel), in one job, interleaved: each round runs every
variant for --steps steps, the order rotating from round to round, so load
from elsewhere on the machine hits all alike. Reports the median over
rounds of samples/s per variant, the ratios, and the bytes each rank sends
per step for kolo's variants (counted per operation: a ring allreduce sends
2(n-1)/n of the vector, a reduce-scatter and an allgather (n-1)/n each).

  build/bin/kolorun -np 2 /usr/bin/python3 bench/zero_speed.py
(run from the source tree with PYTHONPATH=build/python; bench/zero_speed.sh
runs N = 2 and 4.)
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import kolo.torch as hvd
from kolo.torch import zero
from kolo.torch.zero import comm


def make_model(width, layers):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods)


def adam(params):
    return torch.optim.Adam(params, lr=1e-4)


def build(kind, args):
    model = make_model(args.width, args.layers)
    if kind == "kolo":
        opt = hvd.DistributedOptimizer(adam(model.parameters()),
                                       named_parameters=model.named_parameters())
    elif kind.startswith("zero"):
        stage = int(kind[-1])
        if stage == 3:
            zero.wrap(model)
        opt = zero.DistributedOptimizer(adam(model.parameters()),
                                        named_parameters=model.named_parameters(),
                                        stage=stage, bucket_mb=args.bucket_mb)
    elif kind == "torch_zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        model = nn.parallel.DistributedDataParallel(model)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                      lr=1e-4)
    else:
        raise ValueError(kind)
    return model, opt


def run_steps(model, opt, steps, args):
    g = torch.Generator().manual_seed(hvd.rank())
    for _ in range(steps):
        x = torch.randn(args.batch, args.width, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--variants", default="kolo,zero1,zero2,zero3,torch_zero")
    args = ap.parse_args()
    hvd.init()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    variants = args.variants.split(",")
    if "torch_zero" in variants:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29700 + os.getuid() % 200))
        dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size())
    built = {k: build(k, args) for k in variants}
    psi = sum(p.numel() for p in make_model(args.width, args.layers).parameters())
    rates = {k: [] for k in variants}
    sent = {}
    for k in variants:  # warm-up, and the bytes of one step
        before = comm.sent_bytes[0]
        run_steps(*built[k], 1, args)
        sent[k] = comm.sent_bytes[0] - before
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for k in order:
            hvd.barrier()
            t0 = time.perf_counter()
            run_steps(*built[k], args.steps, args)
            hvd.barrier()
            rates[k].append(args.steps * args.batch * hvd.size() / (time.perf_counter() - t0))
    if hvd.rank() == 0:
        n = hvd.size()
        med = {k: statistics.median(v) for k, v in rates.items()}
        allreduce = 2 * (n - 1) / n * 4 * psi
        theory = {"kolo": allreduce, "zero1": allreduce, "zero2": allreduce,
                  "zero3": 1.5 * allreduce}
        out = {"ranks": n, "psi": psi, "batch": args.batch, "samples_per_s": med,
               "spread": {k: [min(v), max(v)] for k, v in rates.items()},
               "sent_mb_per_step": {k: sent[k] / 2 ** 20 for k in sent if k != "kolo"
                                    and k != "torch_zero"},
               "theory_mb_per_step": {k: v / 2 ** 20 for k, v in theory.items()}}
        print("ZERO_SPEED " + json.dumps(out), flush=True)
        for k in variants:
            line = "N=%d %-10s %8.1f samples/s  x%.3f of kolo" % (n, k, med[k],
                                                                  med[k] / med["kolo"])
            if "torch_zero" in med:
                line += "  x%.3f of torch_zero" % (med[k] / med["torch_zero"])
            if k in sent and k.startswith("zero"):
                line += "  sent %.1f MB/step (theory %.1f)" % (sent[k] / 2 ** 20,
                                                               theory[k] / 2 ** 20)
            print(line, flush=True)


if __name__ == "__main__":
    main()

"""Throughput of sharded data parallelism (kolo.torch.zero stages 1-3)
against kolo.torch.DistributedOptimizer and PyTorch's
ZeroRedundancyOptimizer (torch.distributed over gloo, gradients averaged
by DistributedDataParallel), in one job, interleaved: each round runs every
variant for --steps steps, the order rotating from round to round, so load
from elsewhere on the machine hits all alike. Variants: ``kolo`` (plain),
``zero1``/``zero2``/``zero3`` (stages, defaults), ``zero1o``/``zero2o``
(stages 1 and 2 with ``overlap_params=True``), ``torch_zero``.

Reports per variant the median over rounds of samples/s with its
quartiles, and the ratios to kolo's plain optimizer and to torch's ZeRO as
the median of the per-round ratios (each round's variants ran within
seconds of each other, so a ratio per round cancels most of the load that
moves the absolute rates) with their quartiles; the load average
(/proc/loadavg) at start and end; and the bytes each rank sends per step
for kolo's variants (counted per operation: a ring allreduce sends
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
        stage = int(kind[4])
        if stage == 3:
            zero.wrap(model)
        opt = zero.DistributedOptimizer(adam(model.parameters()),
                                        named_parameters=model.named_parameters(),
                                        stage=stage, bucket_mb=args.bucket_mb,
                                        overlap_params=kind.endswith("o"))
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
    ap.add_argument("--variants", default="kolo,zero1,zero2,zero1o,zero2o,zero3,torch_zero")
    args = ap.parse_args()
    hvd.init()
    load_start = open("/proc/loadavg").read().split()[:3]
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
    for k in variants:  # warm-up, then the bytes of one step in steady state
        run_steps(*built[k], 1, args)  # (overlap_params: the second step's
        before = comm.sent_bytes[0]    # forward starts the first's gathers)
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
        report(args, variants, rates, sent, psi, load_start)


def quartiles(v):
    """(first quartile, median, third quartile) of the values."""
    if len(v) < 2:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[1], q[2]


def report(args, variants, rates, sent, psi, load_start):
    n = hvd.size()
    load_end = open("/proc/loadavg").read().split()[:3]
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = {}
    for base in ("kolo", "torch_zero"):
        if base in rates:
            ratio[base] = {k: quartiles([a / b for a, b in zip(rates[k], rates[base])])
                           for k in variants}
    allreduce = 2 * (n - 1) / n * 4 * psi
    theory = {"kolo": allreduce, "zero1": allreduce, "zero2": allreduce,
              "zero1o": allreduce, "zero2o": allreduce, "zero3": 1.5 * allreduce}
    out = {"ranks": n, "psi": psi, "batch": args.batch, "rounds": args.rounds,
           "steps": args.steps, "bucket_mb": args.bucket_mb,
           "load_start": load_start, "load_end": load_end,
           "samples_per_s": med,
           "quartiles": {k: quartiles(v) for k, v in rates.items()},
           "spread": {k: [min(v), max(v)] for k, v in rates.items()},
           "ratio_quartiles": ratio,
           "sent_mb_per_step": {k: sent[k] / 2 ** 20 for k in sent if k.startswith("zero")},
           "theory_mb_per_step": {k: v / 2 ** 20 for k, v in theory.items()}}
    print("ZERO_SPEED " + json.dumps(out), flush=True)
    print("N=%d load average %s at start, %s at end; %d rounds x %d steps" %
          (n, " ".join(load_start), " ".join(load_end), args.rounds, args.steps), flush=True)
    for k in variants:
        q = out["quartiles"][k]
        line = "N=%d %-10s %7.1f samples/s (quartiles %.1f-%.1f)" % (n, k, med[k], q[0], q[2])
        for base in ("kolo", "torch_zero"):
            if base in ratio:
                r = ratio[base][k]
                line += "  x%.3f of %s (%.3f-%.3f)" % (r[1], base, r[0], r[2])
        if k in sent and k.startswith("zero"):
            line += "  sent %.1f MB/step (theory %.1f)" % (sent[k] / 2 ** 20,
                                                           theory[k] / 2 ** 20)
        print(line, flush=True)


if __name__ == "__main__":
    main()

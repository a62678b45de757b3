#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel (gloo) training the CNN of
examples/fashion_mnist.py on the same data and the same sampler: the
baseline of bench/train_scaling.sh.

    PYTHONPATH=build/python /usr/bin/python3 bench/ddp_fashion_mnist.py \\
        --nproc 2 --max-steps 300 --json out.json

With --nproc N (default 1) the script starts N copies of itself on
127.0.0.1 (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in their
environment; a free port is picked) and waits for them; when RANK is
already set (torchrun, or this script's own children) it is one rank.
Each rank trains for --epochs epochs of --max-steps steps (0: its whole
shard) with Adam at lr x N (linear scaling), 1 torch thread by default.
Rank 0 prints images/s per epoch over the slowest rank's time and writes
the JSON of examples/fashion_mnist.py (images_per_second: the mean over
epochs, leaving out the first when there are several; test_accuracy after
the last epoch) to --json.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="DDP (gloo) Fashion-MNIST baseline")
    p.add_argument("--nproc", type=int, default=1, help="ranks to start on 127.0.0.1")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.001, help="base Adam rate (x ranks)")
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(args.nproc))
    procs = [subprocess.Popen([sys.executable] + sys.argv,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(args.nproc)]
    codes = [p.wait() for p in procs]
    bad = [(r, c) for r, c in enumerate(codes) if c]
    if bad:
        sys.stderr.write("ddp_fashion_mnist: rank(s) failed: %s\n" % bad)
        return 1
    return 0


def run(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from fashion_mnist import (Cnn, DistributedSampler, evaluation_range,
                               load_fashion_mnist, to_input)

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    train_x, train_y = load_fashion_mnist(args.data, train=True)
    test_x, test_y = load_fashion_mnist(args.data, train=False)
    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(Cnn())  # broadcasts rank 0's
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * size)
    sampler = DistributedSampler(len(train_y), rank, size, args.seed)
    batches = (sampler.num_samples + args.batch_size - 1) // args.batch_size
    steps = min(batches, args.max_steps) if args.max_steps else batches

    def reduce(value, op):
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t, op=op)
        return float(t[0])

    rates, seconds_list, accuracy = [], [], 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = sampler.indices()
        model.train()
        start = time.perf_counter()
        for b in range(steps):
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            optimizer.zero_grad()
            F.cross_entropy(model(to_input(train_x[idx])), train_y[idx]).backward()
            optimizer.step()
        seconds = reduce(time.perf_counter() - start, dist.ReduceOp.MAX)
        model.eval()
        lo, hi = evaluation_range(len(test_y), rank, size)
        with torch.no_grad():
            correct = int((model.module(to_input(test_x[lo:hi])).argmax(1) ==
                           test_y[lo:hi]).sum())
        accuracy = reduce(correct, dist.ReduceOp.SUM) / len(test_y)
        rate = min(steps * args.batch_size, sampler.num_samples) * size / seconds
        rates.append(rate)
        seconds_list.append(seconds)
        if rank == 0:
            print("ddp epoch %d/%d: test accuracy %.2f%%, %.0f images/s, %.1f s"
                  % (epoch + 1, args.epochs, 100 * accuracy, rate, seconds), flush=True)
    kept = rates[1:] if len(rates) > 1 else rates
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": size, "epochs": args.epochs, "batch_size":
                       args.batch_size, "threads": args.threads, "optimizer": "adam",
                       "test_accuracy": accuracy,
                       "images_per_second": sum(kept) / len(kept),
                       "epoch_seconds": seconds_list}, f)
            f.write("\n")
    # Both ranks are done once this barrier passes. Leave without gloo's
    # teardown (destroy_process_group), which with torch 1.13 now and then
    # hangs at exit and would stall bench/train_scaling.sh.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    args = parse_args()
    if "RANK" not in os.environ:
        if args.nproc < 1:
            raise SystemExit("ddp_fashion_mnist: --nproc must be >= 1")
        return launch(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Gloo baseline of bench/fusion.sh: one torch.distributed all_reduce per tensor.

Spawns its own ranks (default 2) on this host, backend gloo, and measures
training steps the way kolo-fusion-bench and mpi-fusion-bench do:

    build/bin/kolo-fusion-bench --print-tensors resnet50 > /tmp/resnet50.txt
    /usr/bin/python3 bench/gloo_fusion.py -np 2 --tensors /tmp/resnet50.txt

The tensor file lists one tensor per line in submission order, its element
count first (kolo-fusion-bench --print-tensors). One step: for every tensor
in that order, a blocking dist.all_reduce (sum, in place) and a division by
the number of ranks (an average).

Method: WARMUP untimed steps, WARMUP more timed for rank 0 to pick the
steps per window so that a window lasts about --window-time seconds;
--windows windows, each after a barrier, a window's time the maximum over ranks; the median of the windows'
steps/s is reported. Then the inputs are refilled with kolo-fusion-bench's
rank-dependent values ((3 * rank + tensor + index) mod 11), one more step
runs and every element is compared with the average; exit 1 when one is
wrong.

With --master ADDR:PORT --rank R it runs one rank in this process instead
(the others started the same way, e.g. one per host, -np the world size),
over the interface --ifname (default: lo):
    ip netns exec HOST1 python3 bench/gloo_fusion.py -np 2 --rank 0 \
        --master 10.1.2.1:29500 --ifname eth0 --tensors ...
Needs Debian's python3-torch (run with /usr/bin/python3).
"""

import argparse
import datetime
import json
import math
import os
import socket
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gloo_fusion.py",
                                description="torch.distributed gloo, one all_reduce per tensor")
    p.add_argument("-np", dest="ranks", type=int, default=2, help="ranks to spawn (2)")
    p.add_argument("--tensors", required=True, help="element counts, one per line")
    p.add_argument("--workload", default="-", help="label for the output")
    p.add_argument("--windows", type=int, default=5, help="timed windows (5)")
    p.add_argument("--window-time", type=float, default=0.5, help="seconds per window (0.5)")
    p.add_argument("--steps", type=int, default=0, help="steps per window (0: from time)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (3)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--rank", type=int, default=-1,
                   help="with --master: run this one rank here (no spawning)")
    p.add_argument("--master", default="", help="ADDR:PORT of rank 0's rendezvous")
    p.add_argument("--ifname", default="lo", help="network interface of gloo (lo)")
    a = p.parse_args(argv)
    if a.ranks < 1 or a.windows < 1 or a.warmup < 0 or a.steps < 0:
        p.error("-np and --windows must be >= 1, --warmup and --steps >= 0")
    if not 0 < a.window_time < 3600:
        p.error(f"--window-time '{a.window_time}': expected seconds in (0, 3600)")
    if bool(a.master) != (a.rank >= 0):
        p.error("--master and --rank go together")
    if a.master and not 0 <= a.rank < a.ranks:
        p.error(f"--rank {a.rank}: expected 0..{a.ranks - 1} (-np {a.ranks})")
    try:
        with open(a.tensors) as f:
            a.counts = [int(line.split()[0]) for line in f
                        if line.strip() and not line.startswith("#")]
    except (OSError, ValueError) as e:
        p.error(f"--tensors '{a.tensors}': {e}")
    if not a.counts:
        p.error(f"--tensors '{a.tensors}': no tensors")
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, result_queue, master="127.0.0.1"):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", args.ifname)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank,
                            world_size=args.ranks, timeout=datetime.timedelta(seconds=120))
    n = args.ranks
    tensors = [torch.empty(c, dtype=torch.float32) for c in args.counts]

    def values(r, t, count):
        return ((torch.arange(count, dtype=torch.int64) + (3 * r + t)) % 11).to(torch.float32)

    def fill():
        for t, x in enumerate(tensors):
            x.copy_(values(rank, t, x.numel()))

    def step():
        for x in tensors:
            dist.all_reduce(x)
            x.div_(n)

    fill()
    for _ in range(args.warmup):
        step()
    steps = args.steps
    if steps == 0:
        # Timed after the warm-up (as kolo-fusion-bench does).
        calibrate = max(1, args.warmup)
        t0 = time.perf_counter()
        for _ in range(calibrate):
            step()
        per_step = (time.perf_counter() - t0) / calibrate
        want = math.ceil(args.window_time / max(per_step, 1e-9))
        chosen = torch.tensor([max(1, min(want, 10_000_000))], dtype=torch.int64)
        dist.broadcast(chosen, src=0)
        steps = int(chosen.item())

    per_second = []
    for _ in range(args.windows):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        worst = float(elapsed.item())
        per_second.append(steps / worst if worst > 0 else 0.0)

    fill()
    step()
    ok = True
    for t, x in enumerate(tensors):
        expected = sum(values(r, t, x.numel()).double() for r in range(n)) / n
        bad = ((x.double() - expected).abs() > 1e-5 * expected.abs().clamp(min=1)).nonzero()
        if bad.numel():
            i = int(bad[0].item())
            print(f"gloo_fusion.py: rank {rank}: tensor {t} ({x.numel()} floats): wrong "
                  f"average at index {i}: expected {expected[i].item():g}, got "
                  f"{x[i].item():g}", file=sys.stderr)
            ok = False
            break
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    check = "ok" if flag.item() == 1 else "FAIL"

    if rank == 0:
        med = statistics.median(per_second)
        nbytes = 4 * sum(args.counts)
        if args.json:
            print(json.dumps({
                "tool": "gloo_fusion.py", "mode": "per-tensor", "workload": args.workload,
                "case": "gloo", "ranks": n, "tensors": len(args.counts), "bytes": nbytes,
                "steps": steps, "windows": [round(v, 3) for v in per_second],
                "steps_per_s": round(med, 3), "step_ms": round(1e3 / med, 4) if med else 0,
                "check": check}), flush=True)
        else:
            print(f"# gloo_fusion.py {args.workload}: {n} ranks, {len(args.counts)} tensors, "
                  f"{nbytes} bytes\n#   windows of {steps} steps (steps/s): "
                  + " ".join(f"{v:.2f}" for v in per_second)
                  + f"\n  gloo  steps/s {med:.2f}  step {1e3 / med:.3f} ms  check {check}",
                  flush=True)
    dist.destroy_process_group()
    result_queue.put((rank, check == "ok"))


class _Result:
    def put(self, item):
        self.item = item


def main():
    args = parse_args(sys.argv[1:])
    if args.master:
        host, _, port = args.master.rpartition(":")
        result = _Result()
        worker(args.rank, args, int(port), result, master=host)
        sys.exit(0 if result.item[1] else 1)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    # Wait for all; when one rank fails, end the others (they would wait in a
    # collective until the gloo timeout) and name it.
    failed = None
    while failed is None and any(p.is_alive() for p in procs):
        for r, p in enumerate(procs):
            p.join(timeout=0.05)
            if p.exitcode not in (None, 0):
                failed = (r, p.exitcode)
                break
    if failed is None:
        failed = next(((r, p.exitcode) for r, p in enumerate(procs) if p.exitcode), None)
    if failed is not None:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        print(f"gloo_fusion.py: rank {failed[0]} exited with code {failed[1]}",
              file=sys.stderr)
        sys.exit(1)
    results = [queue.get() for _ in procs]
    sys.exit(0 if all(ok for _, ok in results) else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Gloo baseline of kolo-bench: torch.distributed (backend gloo) collectives.

Spawns its own ranks (default 2) on this host and measures all_reduce (and
broadcast, all_gather) the way kolo-bench and mpi-bench do, printing the same
columns (or, with --json, the same JSON objects):

    /usr/bin/python3 bench/gloo_allreduce.py -np 2 --sizes 8,1K,1M,64M

Method: for each size, WARMUP untimed iterations, a barrier, then ITERS
back-to-back iterations timed together; a rank's time is total / ITERS, the
reported time the maximum over ranks. --min-time S raises ITERS (rank 0
decides from the warm-up and broadcasts it) so that the timed loop lasts
about S seconds. algbw = bytes / time; busbw = algbw * 2(n-1)/n for
allreduce, (n-1)/n for allgather, 1 for broadcast. After the timed loop the
inputs are refilled with small rank-dependent integers (exact in the dtype),
the collective runs once more and every element is checked.

Needs Debian's python3-torch (run with /usr/bin/python3).
"""

import argparse
import datetime
import json
import math
import os
import re
import socket
import sys
import time

OPS = ("allreduce", "broadcast", "allgather")
DTYPES = {"float": "float32", "float32": "float32", "double": "float64", "float64": "float64"}


class FlagError(Exception):
    pass


def parse_size(flag, text):
    m = re.fullmatch(r"(\d+)\s*([kKmMgG]?)(i?[bB])?", text.strip())
    if not m:
        raise FlagError(f"{flag} '{text}': not a size (e.g. 8, 1K, 64M)")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(m.group(1)) * mult


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="gloo_allreduce.py",
        description="torch.distributed gloo baseline with kolo-bench's columns")
    p.add_argument("-np", dest="ranks", type=int, default=2, help="ranks to spawn (2)")
    p.add_argument("-o", dest="op", default="allreduce", help="allreduce|broadcast|allgather")
    p.add_argument("-b", dest="min_bytes", default="8", help="smallest size (8)")
    p.add_argument("-e", dest="max_bytes", default="64M", help="largest size (64M)")
    p.add_argument("-f", dest="factor", type=int, default=2, help="size factor (2)")
    p.add_argument("--sizes", default=None, help="explicit sizes, e.g. 8,1K,1M")
    p.add_argument("-n", dest="iters", type=int, default=20, help="timed iterations (20)")
    p.add_argument("-w", dest="warmup", type=int, default=5, help="untimed iterations (5)")
    p.add_argument("--min-time", type=float, default=0.0,
                   help="raise the iterations so a size runs this many seconds")
    p.add_argument("-d", dest="dtype", default="float", help="float|double (float)")
    p.add_argument("--json", action="store_true", help="one JSON object per size")
    p.add_argument("--check", dest="check", action="store_true", default=True)
    p.add_argument("--no-check", dest="check", action="store_false")
    a = p.parse_args(argv)
    try:
        if a.op not in OPS:
            raise FlagError(f"-o '{a.op}': expected one of {', '.join(OPS)}")
        if a.dtype not in DTYPES:
            raise FlagError(f"-d '{a.dtype}': expected float or double")
        a.dtype = DTYPES[a.dtype]
        if a.ranks < 1:
            raise FlagError(f"-np '{a.ranks}': expected at least 1")
        if a.factor < 2:
            raise FlagError(f"-f '{a.factor}': expected an integer >= 2")
        if a.iters < 1:
            raise FlagError(f"-n '{a.iters}': expected at least 1")
        if a.warmup < 0:
            raise FlagError(f"-w '{a.warmup}': expected at least 0")
        if not (0 <= a.min_time <= 3600):
            raise FlagError(f"--min-time '{a.min_time}': expected seconds in 0..3600")
        if a.sizes:
            a.size_list = [parse_size("--sizes", s) for s in a.sizes.split(",") if s]
            if not a.size_list:
                raise FlagError(f"--sizes '{a.sizes}': empty list")
        else:
            lo, hi = parse_size("-b", a.min_bytes), parse_size("-e", a.max_bytes)
            if lo > hi:
                raise FlagError(f"-b '{a.min_bytes}': larger than -e '{a.max_bytes}'")
            a.size_list = [lo]
            while a.size_list[-1] != 0 and a.size_list[-1] * a.factor <= hi:
                a.size_list.append(a.size_list[-1] * a.factor)
    except FlagError as e:
        print(f"gloo_allreduce.py: {e}", file=sys.stderr)
        sys.exit(2)
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, result_queue):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks, timeout=datetime.timedelta(seconds=120))
    n = args.ranks
    dtype = torch.float32 if args.dtype == "float32" else torch.float64
    esize = 4 if args.dtype == "float32" else 8
    factor = {"allreduce": 2.0 * (n - 1) / n, "allgather": (n - 1) / n,
              "broadcast": 1.0}[args.op]
    golden = torch.tensor(0x9E3779B97F4A7C15 - (1 << 64), dtype=torch.int64)
    chunk = 1 << 18
    ok_all = True

    def fill_values(dst, r, start, accumulate=False):
        # Writes (or adds) small pseudo-random integers per (rank, global
        # index), exact in the dtype: the same values as kolo-bench's and
        # mpi-bench's, ((index * golden mod 2^64) >> 61) + rank) mod 8. int64
        # multiplication wraps like uint64, and the top 3 bits of the product
        # are ((p >> 61) & 7) whatever its sign. Done in chunks, so that no
        # large temporary is allocated (fresh pages are costly on some VMs).
        for lo in range(0, dst.numel(), chunk):
            hi = min(lo + chunk, dst.numel())
            idx = torch.arange(start + lo, start + hi, dtype=torch.int64)
            v = (((idx * golden) >> 61) & 7).add_(r).remainder_(8)
            if accumulate:
                dst[lo:hi] += v
            else:
                dst[lo:hi] = v

    for size in args.size_list:
        count = size // esize
        per_rank = 0
        if args.op == "allgather":
            per_rank = count // n
            count = per_rank * n
        nbytes = count * esize
        recv = torch.empty(count, dtype=dtype)
        if args.op == "allreduce":
            fill_values(recv, rank, 0)

            def run():
                # torch.distributed reduces in place: that is gloo's natural
                # form (kolo-bench and mpi-bench time the out-of-place form).
                dist.all_reduce(recv)
        elif args.op == "broadcast":
            if rank == 0:
                fill_values(recv, 0, 0)
            else:
                recv.fill_(-1.0)

            def run():
                dist.broadcast(recv, src=0)
        else:
            send = torch.empty(per_rank, dtype=dtype)
            fill_values(send, rank, rank * per_rank)
            recv.fill_(-1.0)
            outs = list(recv.split(per_rank)) if per_rank > 0 else [
                torch.empty(0, dtype=dtype) for _ in range(n)]

            def run():
                dist.all_gather(outs, send)

        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            run()
        per_iter = (time.perf_counter() - t0) / args.warmup if args.warmup else 0.0
        iters = args.iters
        if args.min_time > 0:
            if per_iter <= 0:
                t = time.perf_counter()
                run()
                per_iter = time.perf_counter() - t
            want = math.ceil(args.min_time / max(per_iter, 1e-9))
            chosen = torch.tensor([max(iters, min(want, 10_000_000))], dtype=torch.int64)
            dist.broadcast(chosen, src=0)
            iters = int(chosen.item())

        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            run()
        elapsed = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        worst = float(elapsed.item())

        check = "-"
        if args.check:
            expected = torch.zeros(count, dtype=dtype)
            if args.op == "allreduce":
                fill_values(recv, rank, 0)
                for r in range(n):
                    fill_values(expected, r, 0, accumulate=True)
            elif args.op == "broadcast":
                if rank == 0:
                    fill_values(recv, 0, 0)
                else:
                    recv.fill_(-1.0)
                fill_values(expected, 0, 0)
            else:
                fill_values(send, rank, rank * per_rank)
                recv.fill_(-1.0)
                for r in range(n):
                    fill_values(expected[r * per_rank:(r + 1) * per_rank], r, r * per_rank)
            run()
            bad = (recv != expected).nonzero()
            ok = bad.numel() == 0
            if not ok:
                i = int(bad[0].item())
                print(f"gloo_allreduce.py: rank {rank}: {args.op} of {count} elements: wrong "
                      f"result at index {i}: expected {expected[i].item():g}, got "
                      f"{recv[i].item():g}", file=sys.stderr)
            flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            check = "ok" if flag.item() == 1 else "FAIL"
            ok_all = ok_all and check == "ok"

        if rank == 0:
            time_us = worst * 1e6
            algbw = nbytes / worst / 1e9 if worst > 0 else 0.0
            busbw = algbw * factor
            if args.json:
                print(json.dumps({
                    "tool": "gloo", "op": args.op, "bytes": nbytes, "count": count,
                    "dtype": args.dtype, "redop": "sum", "algorithm": "gloo", "ranks": n,
                    "iters": iters, "time_us": round(time_us, 3),
                    "algbw_gbps": round(algbw, 4), "busbw_gbps": round(busbw, 4),
                    "check": check}), flush=True)
            else:
                print(f"  {nbytes:12d} {count:12d} {args.dtype:>9s} {'gloo':>10s} {iters:8d} "
                      f"{time_us:12.2f} {algbw:12.3f} {busbw:12.3f} {check:>6s}", flush=True)
    dist.destroy_process_group()
    result_queue.put((rank, ok_all))


def main():
    args = parse_args(sys.argv[1:])
    import torch.multiprocessing as mp

    if not args.json:
        print(f"# gloo (torch {__import__('torch').__version__}): {args.op}  ranks {args.ranks}"
              f"  dtype {args.dtype}  op sum  iters {args.iters}"
              + (f" (or more to run {args.min_time:.2f} s)" if args.min_time > 0 else "")
              + f"  warmup {args.warmup}  check {'on' if args.check else 'off'}")
        print("# time: back-to-back iterations after a barrier, total / iters, max over ranks")
        print(f"# {'bytes':>12s} {'count':>12s} {'dtype':>9s} {'algorithm':>10s} {'iters':>8s} "
              f"{'time(us)':>12s} {'algbw(GB/s)':>12s} {'busbw(GB/s)':>12s} {'check':>6s}",
              flush=True)
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
        print(f"gloo_allreduce.py: rank {failed[0]} exited with code {failed[1]}",
              file=sys.stderr)
        sys.exit(1)
    results = [queue.get() for _ in procs]
    sys.exit(0 if all(ok for _, ok in results) else 1)


if __name__ == "__main__":
    main()

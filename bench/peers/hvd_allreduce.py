"""Latency of `hvd.allreduce` on float32 tensors of 8 B .. 64 MiB, through
Horovod's API as a user calls it, for bench/vs_horovod.sh.

    <launcher> python bench/peers/hvd_allreduce.py --lib horovod|kolo [--sizes 8,1K,...]

--lib horovod imports horovod.torch (Horovod 0.28.1, under horovodrun);
--lib kolo imports kolo.torch (under kolorun). Both run the same loop: per
size, warm-up calls, then timed calls each ended by the call's return (the
synchronous allreduce waits for the result), every call on a fresh input so
no library can skip work, and the result checked against the expected
average once per size. Rank 0 prints one line per size:

    allreduce <bytes> <median_us> <p10_us> <p90_us> <calls>

With --inplace, hvd.allreduce_ reduces into the input (refilled before each
timed call, outside the timing): no output tensor is allocated, so the time
is the library's alone, without the page faults of a fresh output buffer.
"""

import argparse
import statistics
import sys
import time

import torch


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def calls_for(nbytes):
    """Enough calls for a stable median in about a second at most per size."""
    if nbytes <= 64 << 10:
        return 300
    if nbytes <= 1 << 20:
        return 100
    if nbytes <= 16 << 20:
        return 20
    return 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", choices=("horovod", "kolo"), required=True)
    parser.add_argument("--sizes", default="8,1K,64K,1M,16M,64M")
    parser.add_argument("--inplace", action="store_true",
                        help="hvd.allreduce_ (into the input) instead of hvd.allreduce")
    args = parser.parse_args()
    if args.lib == "horovod":
        import horovod.torch as hvd
    else:
        import kolo.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for nbytes in (parse_size(s) for s in args.sizes.split(",")):
        count = max(1, nbytes // 4)
        calls = calls_for(nbytes)
        inputs = [torch.full((count,), float(rank + i), dtype=torch.float32) for i in range(2)]
        name = "bench.%d" % nbytes
        for i in range(3):
            hvd.allreduce(inputs[i % 2], name=name)
        times = []
        for i in range(calls):
            x = inputs[i % 2]
            t0 = time.perf_counter()
            if args.inplace:
                x.fill_(float(rank + i % 2))  # the input again: the result replaced it
                t0 = time.perf_counter()
                out = hvd.allreduce_(x, name=name)
            else:
                out = hvd.allreduce(x, name=name)
            times.append(time.perf_counter() - t0)
        expected = sum(float(r + (calls - 1) % 2) for r in range(size)) / size
        if abs(out[0].item() - expected) > 1e-4 or abs(out[-1].item() - expected) > 1e-4:
            print("allreduce of %d bytes: got %g, expected %g" % (nbytes, out[0].item(), expected),
                  file=sys.stderr)
            sys.exit(1)
        if rank == 0:
            q = statistics.quantiles([t * 1e6 for t in times], n=10)
            print("allreduce %d %.1f %.1f %.1f %d" % (nbytes, statistics.median(times) * 1e6, q[0],
                                                    q[-1], calls), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()

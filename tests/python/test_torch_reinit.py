"""hvd.shutdown() then hvd.init() in one process, as Horovod's elastic and
test scripts do (issue 17): 20 cycles on 2 ranks, each with an allreduce, an
asynchronous allreduce and a process set whose results are checked; from
cycle 2 to cycle 20 the process must not grow (open descriptors, mappings,
resident memory within 16 MiB).

Run: build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_reinit.py
(PYTHONPATH=build/python).
"""

import gc
import os

import torch

import kolo.torch as hvd

CYCLES = 20
RSS_TOLERANCE_KB = 16 * 1024


def footprint():
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return len(os.listdir("/proc/self/fd")), maps, rss


def test_shutdown_and_init_twenty_times():
    second = None
    for cycle in range(1, CYCLES + 1):
        hvd.init()
        assert hvd.is_initialized()
        n, r = hvd.size(), hvd.rank()
        assert n == 2
        t = hvd.allreduce(torch.full((1000,), float(r + cycle)), op=hvd.Sum,
                          name="reinit.sum")
        assert torch.all(t == n * cycle + n * (n - 1) / 2), (cycle, t[:4])
        h = hvd.allreduce_async(torch.full((8,), float(r)), op=hvd.Average,
                                name="reinit.avg")
        assert torch.all(hvd.synchronize(h) == (n - 1) / 2)
        ps = hvd.add_process_set([0, 1])
        g = hvd.allgather(torch.tensor([r]), process_set=ps)
        assert g.tolist() == [0, 1]
        hvd.shutdown()
        assert not hvd.is_initialized()
        # Collect what the cycle dropped before measuring.
        gc.collect()
        if cycle == 2:
            second = footprint()
        if cycle == CYCLES:
            last = footprint()
            print("rank", r, "cycle 2 (fds, maps, rss kB):", second,
                  "cycle", cycle, ":", last)
            assert last[0] <= second[0], ("open descriptors grew", second, last)
            assert last[1] <= second[1], ("mappings grew", second, last)
            assert last[2] <= second[2] + RSS_TOLERANCE_KB, ("memory grew", second, last)
    hvd.init()  # as the other test files leave it

"""Stage 3 trains a model whose plain data-parallel state does not fit a
per-rank memory limit (RSS watched), and its losses match plain data
parallelism's (same seeds). Run on 4 ranks with KOLO_DETERMINISTIC=1 and
MALLOC_MMAP_THRESHOLD_ (so freed blocks go back to the system):

  build/bin/kolorun -np 4 /usr/bin/python3 tests/python/zero_memory_limit.py

Each rank measures its peak RSS growth over a baseline: the peak (VmHWM)
is reset to the current RSS just before each mode trains (clear_refs), so
neither mode is measured against an earlier transient peak. The limit is
8Ψ bytes of float32 Adam training: plain data parallelism needs 16Ψ
(parameters, gradients, two moments); stage 3 on 4 ranks 16Ψ/4 plus the
gathered layers, the gradient window and the first use of torch's kernels
(docs/zero.md, "Memory, measured": about 6.2Ψ here, on torch 1.13 and
2.x). Stage 3 runs first and must stay under the limit; plain data
parallelism then must exceed it (so the limit binds), and the two loss
curves must agree.
"""

import gc
import os

import torch
import torch.nn as nn

import kolo.torch as hvd
from kolo.torch import zero

WIDTH, LAYERS, STEPS = 512, 16, 4


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak():
    """The peak RSS since the last reset_peak() (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak():
    """Resets the peak RSS to the current RSS (Linux: clear_refs 5) and
    returns it: the baseline of what follows."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss()


def model():
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(WIDTH, WIDTH),
                                                                nn.Tanh())])


def train(stage):
    net = model()
    if stage:
        zero.wrap(net)
        opt = zero.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=1e-3),
                                        named_parameters=net.named_parameters(), stage=3)
    else:
        opt = hvd.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=1e-3),
                                       named_parameters=net.named_parameters())
    g = torch.Generator().manual_seed(hvd.rank())
    losses = []
    for _ in range(STEPS):
        x = torch.randn(8, WIDTH, generator=g)
        opt.zero_grad()
        loss = (net(x) - x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    return losses


def main():
    hvd.init()
    torch.set_num_threads(1)
    assert hvd.size() == 4, "run on 4 ranks"
    psi = sum(p.numel() for p in model().parameters())
    limit = 8 * psi
    # Start-up: the runtime and torch's first operations, then one step of
    # both modes on a tiny model (torch 2.x loads much of its Python on the
    # first optimizer step and the first hooks); then the baseline.
    for stage in (3, 0):
        warm = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        if stage:
            zero.wrap(warm)
            warm_opt = zero.DistributedOptimizer(
                torch.optim.Adam(warm.parameters(), lr=1e-3),
                named_parameters=warm.named_parameters(prefix="warm%d" % stage), stage=3)
        else:
            warm_opt = hvd.DistributedOptimizer(
                torch.optim.Adam(warm.parameters(), lr=1e-3),
                named_parameters=warm.named_parameters(prefix="warm%d" % stage))
        warm(torch.randn(2, 4)).pow(2).mean().backward()
        warm_opt.step()
        del warm, warm_opt
    base = reset_peak()
    sharded = train(3)
    used3 = peak() - base
    gc.collect()
    base = reset_peak()
    plain = train(0)
    used0 = peak() - base
    worst3 = max(hvd.allgather_object(used3, name="used3"))
    least0 = min(hvd.allgather_object(used0, name="used0"))
    diff = max(abs(a - b) for a, b in zip(sharded, plain))
    if hvd.rank() == 0:
        print("psi %d, limit %.1f MB; stage 3 peak %.1f MB; plain peak %.1f MB; "
              "largest loss difference %g" % (psi, limit / 2 ** 20, worst3 / 2 ** 20,
                                             least0 / 2 ** 20, diff), flush=True)
    assert worst3 < limit, "stage 3 used %d bytes, limit %d" % (worst3, limit)
    assert least0 > limit, "plain data parallelism fits the limit (%d <= %d)" % (least0, limit)
    assert diff <= 1e-6 * max(abs(v) for v in plain), (sharded, plain)
    if hvd.rank() == 0:
        print("zero memory limit: stage 3 fits on 4 ranks, plain does not, losses agree",
              flush=True)


if __name__ == "__main__":
    main()

"""A model whose training does not fit one rank's memory limit trains on 2
and 4 pipeline stages:
    kolorun -np 4 /usr/bin/python3 tests/python/pipeline_memory.py

The limit: every rank sets RLIMIT_DATA (the kernel's cap on a process's
private writable memory: heap and anonymous mappings, where torch's CPU
tensors live) to its VmData after start-up plus LIMIT. An allocation past
it fails (torch: "can't allocate memory"), so the cap is enforced, not
observed afterwards.

The model: 8 Linear(1024, 1024) + Tanh layers in float32, 32 MiB of
parameters, 32 MiB of gradients, small activations (32 rows). Each rank
builds only its own stage's layers (torch.nn.Identity in the others'
places), as a model too large for one rank has to be built. Then, under
the same LIMIT = 48 MiB on every rank:
- 4 stages over the 4 ranks (8 + 8 MiB a rank) train 3 steps of 1F1B, the
  loss decreasing;
- 2 stages, in two pipelines at once (16 + 16 MiB a rank), the same;
- the unpipelined model (32 + 32 MiB) fails its first training step on
  every rank with torch's allocation error; without the cap, rank 0
  measures how much more than LIMIT that step takes.
Prints "pipeline memory ok" on every rank.
"""

import ctypes
import gc
import resource

import torch

import kolo.torch as kolo
from kolo.torch.pipeline import Pipeline

# Every allocation past 128 KiB its own mapping, returned when freed (glibc
# otherwise raises this threshold as blocks are freed and keeps freed heap,
# so VmData would hold on to memory no longer in use).
M_MMAP_THRESHOLD = -3
assert ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1
kolo.init()
me, n = kolo.rank(), kolo.size()
assert n == 4, "run on 4 ranks"
torch.set_num_threads(1)
MIB = 1 << 20
WIDTH, LINEARS, BATCH, CHUNKS, STEPS = 1024, 8, 32, 4, 3
LIMIT = 48 * MIB


def vm_data():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmData in /proc/self/status")


def layers(first, last):
    """The model's 2 * LINEARS layers, real in [first, last), Identity
    elsewhere; the same weights whichever rank builds them."""
    out = []
    for i in range(2 * LINEARS):
        if not first <= i < last:
            out.append(torch.nn.Identity())
        elif i % 2:
            out.append(torch.nn.Tanh())
        else:
            torch.manual_seed(i)
            out.append(torch.nn.Linear(WIDTH, WIDTH))
    return out


def loss_fn(out, target):  # squared error per row: gradients that train
    return torch.nn.functional.mse_loss(out, target, reduction="sum") / len(out)


g = torch.Generator().manual_seed(3)
x, y = torch.randn(BATCH, WIDTH, generator=g), torch.rand(BATCH, WIDTH, generator=g) - 0.5
pairs = kolo.add_process_set([0, 1]), kolo.add_process_set([2, 3])
pair = pairs[me // 2]

# Warm-up outside the cap: kolo's buffers, torch's first autograd step and
# its first optimizer (torch 2.x imports torch._dynamo, tens of MiB of
# Python, when the first optimizer is built).
small = [torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 4), torch.nn.Tanh()]
for ps in (None, pair):
    Pipeline(small, balance=[2, 2] if ps else [1] * 4, chunks=2, process_set=ps).train_step(
        torch.zeros(2, 4), loss_fn, torch.zeros(2, 4))
warm_opt = torch.optim.SGD(small[0].parameters(), lr=0.05)
warm_opt.step()
del warm_opt
kolo.barrier()
gc.collect()
base = vm_data()
_, hard = resource.getrlimit(resource.RLIMIT_DATA)
resource.setrlimit(resource.RLIMIT_DATA, (base + LIMIT, hard))


def train(split, ps):
    """STEPS steps of a pipeline with these split points (layer indices);
    the last stage's losses and the rank's most VmData over base."""
    stage = (ps or kolo.global_process_set).rank()
    bounds = [0] + split + [2 * LINEARS]
    pipe = Pipeline(layers(bounds[stage], bounds[stage + 1]), split_points=split,
                    chunks=CHUNKS, schedule="1f1b", process_set=ps)
    opt = torch.optim.SGD(pipe.module.parameters(), lr=0.05)
    losses, used = [], 0
    for _ in range(STEPS):
        loss = pipe.train_step(x, loss_fn, y)
        used = max(used, vm_data() - base)  # parameters and gradients live
        pipe.step(opt)
        if loss is not None:
            losses.append(loss.item())
    if pipe.is_last:
        assert all(b < a for a, b in zip(losses, losses[1:])), (split, losses)
    return losses, used


for split, ps in (([4, 8, 12], None), ([8], pair)):
    losses, used = train(split, ps)
    assert used < LIMIT, (me, split, used)
    print("rank %d: %d stages: %.1f MiB of the %d MiB limit; losses %s" %
          (me, len(split) + 1, used / MIB, LIMIT // MIB,
           " ".join("%.2f" % v for v in losses)), flush=True)
    gc.collect()
    kolo.barrier()


def unpipelined():
    model = torch.nn.Sequential(*layers(0, 2 * LINEARS))
    for xm, ym in zip(x.chunk(CHUNKS), y.chunk(CHUNKS)):
        (loss_fn(model(xm), ym) / CHUNKS).backward()
    return model


try:
    unpipelined()
    raise AssertionError("rank %d: the unpipelined step fit in %d MiB" % (me, LIMIT // MIB))
except RuntimeError as e:
    assert "can't allocate memory" in str(e), str(e)
gc.collect()
resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
if me == 0:
    model = unpipelined()
    print("rank 0: unpipelined: failed under %d MiB; takes %.1f MiB without the cap" %
          (LIMIT // MIB, (vm_data() - base) / MIB), flush=True)
    del model
kolo.barrier()
print("pipeline memory ok", flush=True)

"""Run under kolorun --servers 1 -np 4 (3 workers): downpour through
kolo.torch.ps trains a toy regression, and with staleness_bound=1 no applied
gradient is more than one version stale while worker 2 is held back on
purpose (it computes a gradient, then waits, with a barrier among the
workers, until the others have pushed 6 more; the server must refuse that
push). opt.pull(), opt.staleness() and ps.stats() counts are checked."""
import time

import torch
import kolo.torch as hvd
import kolo.torch.ps as ps

hvd.init()
assert hvd.size() == 3, hvd.size()
me = hvd.rank()
torch.manual_seed(7)
model = torch.nn.Linear(4, 1)
target = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
if me != 0:
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(9.0)  # the servers seed from worker 0; the others pull first

BOUND = 1
opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                              named_parameters=model.named_parameters(),
                              mode="downpour", staleness_bound=BOUND, pull_period=1000)
# Every worker starts from worker 0's parameters.
start = [p.detach().clone() for p in model.parameters()]
ref = hvd.broadcast(torch.cat([p.flatten() for p in start]), root_rank=0)
assert torch.equal(torch.cat([p.flatten() for p in start]), ref), "not seeded by worker 0"

steps = {0: 0, 1: 0, 2: 0}


def barrier():
    hvd.allreduce(torch.zeros(1), name="barrier")


def loss_on_batch(step):
    g = torch.Generator().manual_seed(1000 * me + step)
    x = torch.randn(16, 4, generator=g)
    y = x @ target.t()
    return torch.nn.functional.mse_loss(model(x), y)


def train_step(step):
    opt.zero_grad()
    loss_on_batch(step).backward()
    opt.step()
    assert opt.staleness() <= BOUND, (me, step, opt.staleness())
    steps[me] += 1


# Phase 1: worker 2 computes its gradient on version 0 but is held back at a
# barrier; workers 0 and 1 each push 3 times meanwhile (6 versions later).
barrier()
if me == 2:
    opt.zero_grad()
    loss_on_batch(0).backward()
barrier()
if me != 2:
    for s in range(3):
        train_step(s)
barrier()
if me == 2:
    opt.step()  # 6 versions stale: refused, then pulls
    assert opt.staleness() == 0, opt.staleness()  # nothing of this push applied
    steps[2] += 1
barrier()

# Phase 2: everyone trains at its own pace; worker 2 is slowed by sleeps.
for s in range(3, 60):
    if me == 2 and s % 5 == 0:
        time.sleep(0.02)
    train_step(s)
barrier()
opt.pull()
with torch.no_grad():
    g = torch.Generator().manual_seed(4242)
    x = torch.randn(256, 4, generator=g)
    final_loss = torch.nn.functional.mse_loss(model(x), x @ target.t()).item()
    model0 = torch.nn.Linear(4, 1)
    with torch.no_grad():
        for p, q in zip(model0.parameters(), start):
            p.copy_(q)
    initial_loss = torch.nn.functional.mse_loss(model0(x), x @ target.t()).item()
assert final_loss < 0.1 * initial_loss, (initial_loss, final_loss)

# opt.pull() gives every worker the servers' same parameters once all pushes
# are in.
pulled = torch.cat([p.detach().flatten() for p in model.parameters()])
assert torch.equal(hvd.broadcast(pulled, root_rank=0), pulled), "pull differs"

stats = ps.stats()
assert len(stats) == 1, stats
s0 = stats[0]
assert s0["pushes"] == [60, 60, 58], s0
assert s0["max_staleness"] <= BOUND, s0
assert s0["rejected"] >= 1, s0  # worker 2's held-back push at least
assert s0["updates"] + s0["rejected"] == 60 + 60 + 58, s0
assert s0["version"] == s0["updates"], s0
# Pulls: one at start, one per refusal, one per opt.pull(); pull_period is
# never reached.
assert all(n >= 2 for n in s0["pulls"]), s0
assert s0["pulls"][2] >= 3, s0  # start, after the refusal, opt.pull()
barrier()
print("worker %d: downpour trains within staleness bound %d (loss %.4f -> %.4f, "
      "%d refused)" % (me, BOUND, initial_loss, final_loss, s0["rejected"]), flush=True)
hvd.shutdown()

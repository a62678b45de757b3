"""Run under kolorun --servers 1 -np 3 (2 workers): easgd through
kolo.torch.ps equals the formula exactly on a toy problem. The workers take
turns (a barrier between them) so the order of the exchanges is known; each
worker replays the whole job (both workers' local SGD with momentum and the
center) in plain torch and compares its parameters, and the center that
opt.pull() loads, bit for bit. ps.stats() counts the exchanges."""
import copy

import torch
import kolo.torch as hvd
import kolo.torch.ps as ps

hvd.init()
W = hvd.size()
assert W == 2, W
me = hvd.rank()
ALPHA, PERIOD, STEPS = 0.25, 2, 6
torch.manual_seed(3)
model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh(), torch.nn.Linear(2, 1))
initial = copy.deepcopy(model)
hvd.broadcast_parameters(initial.state_dict(), root_rank=0)  # worker 0's values
if me != 0:
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(5.0)  # replaced by the center at start


def make_opt(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def batch(worker, step):
    g = torch.Generator().manual_seed(100 * step + worker)
    return torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)


def barrier():
    hvd.allreduce(torch.zeros(1), name="barrier")


opt = ps.DistributedOptimizer(make_opt(model.parameters()),
                              named_parameters=model.named_parameters(), mode="easgd",
                              easgd_alpha=ALPHA, easgd_period=PERIOD)
for p, q in zip(model.parameters(), initial.parameters()):
    assert torch.equal(p, q), "worker %d did not start from the center" % me

# The reference: both workers and the center, in the same order.
ref = [copy.deepcopy(initial) for _ in range(W)]
ref_opt = [make_opt(m.parameters()) for m in ref]
center = [p.detach().clone() for p in initial.parameters()]

for step in range(STEPS):
    for w in range(W):
        x, y = batch(w, step)
        if w == me:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        barrier()
        ref_opt[w].zero_grad()
        torch.nn.functional.mse_loss(ref[w](x), y).backward()
        ref_opt[w].step()
        if (step + 1) % PERIOD == 0:
            with torch.no_grad():
                for p, c in zip(ref[w].parameters(), center):
                    diff = ALPHA * (p - c)
                    c.add_(diff)
                    p.sub_(diff)

for (name, p), q in zip(model.named_parameters(), ref[me].parameters()):
    assert torch.equal(p, q), (me, name, (p - q).abs().max().item())
# opt.pull() loads the center.
opt.pull()
for (name, p), c in zip(model.named_parameters(), center):
    assert torch.equal(p, c), (me, name, (p - c).abs().max().item())
moved = sum((c - q).abs().sum().item() for c, q in zip(center, initial.parameters()))
assert moved > 0, "the center never moved: the test shows nothing"

stats = ps.stats()
exchanges = STEPS // PERIOD
assert stats[0]["pushes"] == [exchanges] * W, stats
assert stats[0]["updates"] == exchanges * W and stats[0]["version"] == exchanges * W, stats
assert stats[0]["rejected"] == 0, stats
assert stats[0]["pulls"][me] == 2, stats  # start and opt.pull()
barrier()
print("worker %d: easgd equals the formula exactly (%d exchanges)" % (me, exchanges),
      flush=True)
hvd.shutdown()

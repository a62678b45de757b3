"""Run under kolorun --servers 1 -np 5 (4 workers) with argument "sync" or
"easgd": groups of 2 workers (group_size=2) in front of the servers.

sync: a step of the groups (each group averages its gradients, the leaders
push, the servers average the leaders' pushes, the leaders broadcast the
result) equals a synchronous allreduce step over all 4 workers on the same
batches (float tolerance); only the leaders push.
easgd: two levels on a toy problem equal the formula bit for bit: the
groups take turns (a barrier between them) so the order of the exchanges
with the global center is known, and every worker replays the whole job
(4 workers' local SGD, the 2 group centers, the global center) in torch."""
import copy
import sys

import torch
import kolo.torch as hvd
import kolo.torch.ps as ps

MODE = sys.argv[1]
hvd.init()
W, me = hvd.size(), hvd.rank()
assert W == 4, W
G = 2
groups = [[0, 1], [2, 3]]
mine = me // G
torch.manual_seed(11)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
initial = copy.deepcopy(model)
hvd.broadcast_parameters(initial.state_dict(), root_rank=0)
if me != 0:
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(3.0)  # the servers seed from worker 0


def batch(worker, step):
    g = torch.Generator().manual_seed(100 * step + worker)
    return torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)


def loss(m, worker, step):
    x, y = batch(worker, step)
    return torch.nn.functional.mse_loss(m(x), y)


def barrier():
    hvd.allreduce(torch.zeros(1), name="barrier")


def check_sync():
    make = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)  # noqa: E731
    ref = copy.deepcopy(initial)
    ref_opt = make(ref.parameters())
    try:
        ps.DistributedOptimizer(make(model.parameters()), mode="sync", group_size=3)
        raise AssertionError("group_size=3 with 4 workers accepted")
    except ValueError as e:
        assert "group_size=3 does not divide the 4 workers" in str(e), str(e)
    opt = ps.DistributedOptimizer(make(model.parameters()),
                                  named_parameters=model.named_parameters(), mode="sync",
                                  group_size=G)
    for step in range(3):
        opt.zero_grad()
        loss(model, me, step).backward()
        opt.step()
        ref_opt.zero_grad()
        loss(ref, me, step).backward()
        for name, p in ref.named_parameters():
            p.grad = hvd.allreduce(p.grad, op=hvd.Average, name="ref." + name)
        ref_opt.step()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert torch.allclose(p, q, atol=1e-5), (me, step, name,
                                                     (p - q).abs().max().item())
    s = ps.stats()[0]
    assert s["pushes"] == [3, 0, 3, 0], s
    assert s["updates"] == 3 and s["version"] == 3, s
    assert s["pulls"][1] == 1 and s["pulls"][3] == 1, s  # the start only
    return "sync with group_size=2 equals allreduce"


def check_easgd():
    alpha, period, steps = 0.25, 2, 4
    make = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.5)  # noqa: E731
    opt = ps.DistributedOptimizer(make(model.parameters()),
                                  named_parameters=model.named_parameters(), mode="easgd",
                                  easgd_alpha=alpha, easgd_period=period, group_size=G)
    ref = [copy.deepcopy(initial) for _ in range(W)]
    ref_opt = [make(m.parameters()) for m in ref]
    center = [p.detach().clone() for p in initial.parameters()]
    gcenter = [[p.detach().clone() for p in initial.parameters()] for _ in groups]
    for step in range(steps):
        for g, members in enumerate(groups):
            if g == mine:
                opt.zero_grad()
                loss(model, me, step).backward()
                opt.step()
            barrier()
            for w in members:
                ref_opt[w].zero_grad()
                loss(ref[w], w, step).backward()
                ref_opt[w].step()
            if (step + 1) % period != 0:
                continue
            with torch.no_grad():
                diffs = []
                for w in members:
                    d = [alpha * (p - c) for p, c in zip(ref[w].parameters(), gcenter[g])]
                    for p, dd in zip(ref[w].parameters(), d):
                        p.sub_(dd)
                    diffs.append(d)
                for k, c in enumerate(gcenter[g]):
                    c.add_(diffs[0][k] + diffs[1][k])
                for cg, c in zip(gcenter[g], center):
                    d = alpha * (cg - c)
                    c.add_(d)
                    cg.sub_(d)
    for (name, p), q in zip(model.named_parameters(), ref[me].parameters()):
        assert torch.equal(p, q), (me, name, (p - q).abs().max().item())
    opt.pull()
    for (name, p), c in zip(model.named_parameters(), center):
        assert torch.equal(p, c), (me, "center", name, (p - c).abs().max().item())
    s = ps.stats()[0]
    exchanges = steps // period
    assert s["pushes"] == [exchanges, 0, exchanges, 0], s
    return "easgd two levels equal the formula exactly"


result = check_sync() if MODE == "sync" else check_easgd()
barrier()
print("worker %d: %s" % (me, result), flush=True)
hvd.shutdown()

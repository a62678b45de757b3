"""Run under kolorun --servers 1 -np 3: a sync-PS step equals a synchronous
allreduce step on the same batches (SGD with momentum, then Adam), and bad
arguments are clear errors."""
import copy

import torch
import kolo.torch as hvd
import kolo.torch.ps as ps

hvd.init()
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
if hvd.rank() != 0:
    for p in model.parameters():  # the servers seed from worker 0; others pull
        p.data.fill_(0.5)


def check_mode(make_opt):
    ref_model = copy.deepcopy(model)
    hvd.broadcast_parameters(ref_model.state_dict(), root_rank=0)
    ref_opt = make_opt(ref_model.parameters())
    opt = ps.DistributedOptimizer(make_opt(model.parameters()),
                                  named_parameters=model.named_parameters(), mode="sync")
    for step in range(3):
        g = torch.Generator().manual_seed(100 * step + hvd.rank())
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref_model(x), y).backward()
        for p in ref_model.parameters():
            p.grad = hvd.allreduce(p.grad, op=hvd.Average)
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert torch.allclose(p, q, atol=1e-5), (name, (p - q).abs().max().item())
    return opt


def expect_error(fn, text):
    try:
        fn()
    except ValueError as e:
        assert text in str(e), str(e)
        return
    raise AssertionError("no error, expected " + text)


expect_error(lambda: ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             mode="hogwild"),
             "supported: sync, downpour, easgd")
expect_error(lambda: ps.DistributedOptimizer(torch.optim.Adagrad(model.parameters()),
                                             mode="sync"),
             "Adagrad is not supported by the parameter servers (supported: SGD, Adam")
expect_error(lambda: ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             mode="downpour", staleness_bound=-1),
             "staleness_bound=-1")

opt = check_mode(lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9))
stats = ps.stats()
assert stats[0]["updates"] == 3, stats
assert stats[0]["pushes"] == [3, 3], stats
print("worker %d: sync PS equals allreduce (SGD momentum)" % hvd.rank(), flush=True)
hvd.shutdown()

"""DistributedOptimizer and the broadcast helpers, checked against
single-process PyTorch computed in the test on the union of the ranks'
batches.

  build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_optimizer.py
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kolo
import kolo.torch as hvd

BATCH = 6  # rows per rank and step


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    hvd.init()
    yield


class Net(nn.Module):
    def __init__(self, hidden=8, out=3, extra=False):
        super().__init__()
        self.fc1 = nn.Linear(5, hidden)
        self.fc2 = nn.Linear(hidden, out)
        if extra:
            self.side = nn.Linear(5, out)      # used by rank 0 only
            self.never = nn.Linear(5, out)     # used by no rank

    def forward(self, x, use_side=False):
        y = self.fc2(torch.tanh(self.fc1(x)))
        if use_side:
            y = y + self.side(x)
        return y


def make_net(seed=0, **kwargs):
    torch.manual_seed(seed)
    return Net(**kwargs)


def union_batch(step, rows_per_rank=BATCH):
    """The global batch of a step (same on every rank) and its targets."""
    g = torch.Generator().manual_seed(50 + step)
    n = rows_per_rank * hvd.size()
    return torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g)


def my_rows(tensor, rows_per_rank=BATCH):
    r = hvd.rank()
    return tensor[r * rows_per_rank:(r + 1) * rows_per_rank]


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def assert_same_on_every_rank(model):
    mine = flat(model)
    everyone = hvd.allgather(mine.unsqueeze(0))
    for r in range(hvd.size()):
        assert torch.equal(everyone[r], mine), "rank %d differs" % r


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_step_equals_single_process_on_union_batch():
    model = make_net()
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    assert isinstance(opt, torch.optim.SGD)
    for step in range(3):
        x, y = union_batch(step)
        opt.zero_grad()
        F.cross_entropy(model(my_rows(x)), my_rows(y)).backward()
        opt.step()
        ref_opt.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        ref_opt.step()
    assert torch.allclose(flat(model), flat(reference), atol=1e-6)
    assert not torch.equal(flat(model), flat(make_net()))  # it did train
    assert_same_on_every_rank(model)
    # the wrapped optimizer's state and schedulers work as usual
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    assert len(opt.state_dict()["state"]) == 4


def test_hooks_start_allreduce_during_backward():
    model = make_net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = union_batch(0)
    F.cross_entropy(model(my_rows(x)), my_rows(y)).backward()
    # every parameter's allreduce was submitted by its hook
    assert len(opt._handles) == 4
    assert all(h is not None for h, _ in opt._handles.values())
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()


def test_backward_passes_per_step():
    passes = 2
    model = make_net(1)
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.2)
    rows = BATCH * passes
    for step in range(2):
        x, y = union_batch(10 + step, rows)
        xs, ys = my_rows(x, rows), my_rows(y, rows)
        opt.zero_grad()
        for m in range(passes):
            part = slice(m * BATCH, (m + 1) * BATCH)
            F.cross_entropy(model(xs[part]), ys[part]).backward()
            if m < passes - 1:  # accumulating locally: nothing submitted yet
                assert all(h is None for h, _ in opt._handles.values())
        opt.step()
        # reference: sum over micro-batches, average over ranks
        ref_opt.zero_grad()
        loss = 0
        for r in range(hvd.size()):
            for m in range(passes):
                part = slice(r * rows + m * BATCH, r * rows + (m + 1) * BATCH)
                loss = loss + F.cross_entropy(reference(x[part]), y[part])
        (loss / hvd.size()).backward()
        ref_opt.step()
    assert torch.allclose(flat(model), flat(reference), atol=1e-6)
    assert_same_on_every_rank(model)


def test_fp16_compression():
    model = make_net(2)
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = union_batch(20)
    F.cross_entropy(model(my_rows(x)), my_rows(y)).backward()
    opt.synchronize()
    grads = [p.grad.clone() for p in model.parameters()]
    with opt.skip_synchronize():
        opt.step()
    F.cross_entropy(reference(x), y).backward()
    ref_grads = [p.grad.clone() for p in reference.parameters()]
    ref_opt.step()
    for g, rg in zip(grads, ref_grads):
        assert g.dtype == torch.float32
        # fp16 carries ~3 decimal digits: close, and each rank's half went
        # through float16 before the sum
        assert torch.allclose(g, rg, rtol=2e-3, atol=2e-4)
    assert torch.allclose(flat(model), flat(reference), atol=1e-4)
    assert_same_on_every_rank(model)


def test_unused_parameters_do_not_hang():
    model = make_net(3, extra=True)
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    x, y = union_batch(30)
    # the side branch is used by rank 0 only; `never` by nobody
    F.cross_entropy(model(my_rows(x), use_side=hvd.rank() == 0),
                    my_rows(y)).backward()
    opt.step()
    assert_same_on_every_rank(model)
    # reference: rank 0's loss uses the branch, the others' do not
    loss = 0
    for r in range(hvd.size()):
        part = slice(r * BATCH, (r + 1) * BATCH)
        loss = loss + F.cross_entropy(reference(x[part], use_side=r == 0), y[part])
    (loss / hvd.size()).backward()
    for p in reference.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    torch.optim.SGD(reference.parameters(), lr=0.5).step()
    assert torch.allclose(flat(model), flat(reference), atol=1e-6)
    assert torch.equal(model.never.weight, make_net(3, extra=True).never.weight)


def test_gradient_clipping_with_skip_synchronize():
    model = make_net(4)
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(),
                                   gradient_predivide_factor=2.0)
    x, y = union_batch(40)
    F.cross_entropy(model(my_rows(x)), my_rows(y)).backward()
    opt.synchronize()
    nn.utils.clip_grad_norm_(model.parameters(), 0.05)
    with opt.skip_synchronize():
        opt.step()
    F.cross_entropy(reference(x), y).backward()
    nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    torch.optim.SGD(reference.parameters(), lr=1.0).step()
    assert torch.allclose(flat(model), flat(reference), atol=1e-6)


def test_sum_op():
    model = make_net(5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   op=hvd.Sum)
    reference = copy.deepcopy(model)
    x, y = union_batch(50)
    F.cross_entropy(model(my_rows(x)), my_rows(y)).backward()
    opt.synchronize()
    loss = sum(F.cross_entropy(reference(x[r * BATCH:(r + 1) * BATCH]),
                               y[r * BATCH:(r + 1) * BATCH])
               for r in range(hvd.size()))
    loss.backward()
    for p, rp in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p.grad, rp.grad, atol=1e-6)
    with opt.skip_synchronize():
        opt.step()


def test_adasum_is_a_clear_error():
    model = make_net()
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 op=hvd.Adasum)


def test_mismatched_shape_names_the_parameter():
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("body", nn.Linear(4, 4))
    model.add_module("head", nn.Linear(4, 3 + hvd.rank()))  # differs
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    model(torch.randn(2, 4)).sum().backward()
    with pytest.raises(kolo.MismatchError, match="head"):
        opt.step()
    # the runtime goes on: a correct optimizer afterwards works
    test_step_equals_single_process_on_union_batch()


def test_mismatched_parameter_names_fail_at_construction():
    if hvd.size() < 2:
        pytest.skip("needs 2 ranks")
    model = make_net(extra=hvd.rank() == 0)
    with pytest.raises(kolo.MismatchError, match="side"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())


def test_named_parameters_checks():
    model = make_net()
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[named[0], named[0]] + named[1:])
    with pytest.raises(ValueError, match="not in it"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=named[1:])


def test_broadcast_parameters():
    model = make_net(seed=100 + hvd.rank())  # different on every rank
    model_bn = nn.BatchNorm1d(4)
    model_bn.running_mean.fill_(float(hvd.rank()))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    assert torch.equal(flat(model), flat(make_net(seed=100)))
    assert_same_on_every_rank(model)
    hvd.broadcast_parameters(model_bn.state_dict(), root_rank=hvd.size() - 1)
    assert torch.equal(model_bn.running_mean, torch.full((4,), hvd.size() - 1.0))
    other = make_net(seed=200 + hvd.rank())
    hvd.broadcast_parameters(list(other.named_parameters()), root_rank=hvd.size() - 1)
    assert torch.equal(flat(other), flat(make_net(seed=200 + hvd.size() - 1)))


def test_broadcast_optimizer_state():
    model = make_net(7)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1),
                          momentum=0.9)
    # a local (non-distributed) step with rank-dependent gradients
    for p in model.parameters():
        p.grad = torch.full_like(p, float(hvd.rank() + 1))
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    for p in model.parameters():
        buf = opt.state[p]["momentum_buffer"]
        assert torch.equal(buf, torch.ones_like(p))  # rank 0's gradient
        everyone = hvd.allgather(buf.reshape(1, -1))
        assert all(torch.equal(everyone[r], everyone[0]) for r in range(hvd.size()))

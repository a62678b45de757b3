"""Learning-rate rules (kolo.lr, also as kolo.torch.lr) at chosen steps, and
one LARS step against a computation by hand. Needs no other rank; runs the
same under kolorun.

  PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python/test_torch_lr.py
"""

import math

import pytest
import torch

import kolo.torch as hvd
from kolo.lr import LRSchedule, scale_factor, scale_lr, scheduler


def test_scaling_rules():
    assert scale_lr(0.1, 8, "linear") == pytest.approx(0.8)
    assert scale_lr(0.1, 4, "sqrt") == pytest.approx(0.2)
    assert scale_lr(0.1, 4, "none") == pytest.approx(0.1)
    assert scale_factor(1) == 1.0
    with pytest.raises(ValueError):
        scale_factor(0)
    with pytest.raises(ValueError):
        scale_factor(2, "cubic")
    assert hvd.lr.scale_lr is scale_lr


def test_warmup_then_step_decay():
    s = LRSchedule(world_size=4, scaling="linear", warmup=5, decay="step",
                   milestones=[10, 20], gamma=0.1)
    # Goyal et al.: from 1x at t=0 to 4x at t=5, linearly
    assert s(0) == pytest.approx(1.0)
    assert s(1) == pytest.approx(1.6)
    assert s(2.5) == pytest.approx(2.5)
    assert s(5) == pytest.approx(4.0)
    assert s(9) == pytest.approx(4.0)
    assert s(10) == pytest.approx(0.4)
    assert s(25) == pytest.approx(0.04)
    assert s.lr(0.1, 5) == pytest.approx(0.4)
    s2 = LRSchedule(world_size=9, scaling="sqrt", warmup=2, decay="step",
                    step_size=3, gamma=0.5)
    assert s2(1) == pytest.approx(2.0)  # 1 + (3 - 1) * 1/2
    assert s2(2) == pytest.approx(3.0)
    assert s2(3) == pytest.approx(1.5)
    assert s2(7) == pytest.approx(0.75)


def test_exponential_and_cosine():
    e = LRSchedule(world_size=2, warmup=2, decay="exponential", gamma=0.9)
    assert e(1) == pytest.approx(1.5)
    assert e(2) == pytest.approx(2.0)
    assert e(5) == pytest.approx(2 * 0.9 ** 3)
    c = LRSchedule(world_size=4, warmup=5, decay="cosine", total=15,
                   min_factor=0.1)
    assert c(5) == pytest.approx(4.0)
    assert c(10) == pytest.approx(4 * (0.1 + 0.9 * 0.5))
    assert c(7.5) == pytest.approx(4 * (0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2))
    assert c(15) == pytest.approx(0.4)
    assert c(100) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        LRSchedule(decay="cosine", warmup=5, total=5)
    with pytest.raises(ValueError):
        LRSchedule(decay="step")


def test_warmup_in_epochs_stepped_per_batch():
    s = LRSchedule(world_size=4, warmup=5, steps_per_epoch=10)
    assert s(25) == pytest.approx(2.5)   # 2.5 epochs into the warm-up
    assert s(50) == pytest.approx(4.0)


def test_as_torch_lambda_lr():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    sched = scheduler(opt, world_size=4, warmup=4, decay="step", milestones=[6],
                      gamma=0.5)
    seen = []
    for _ in range(8):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [0.1, 0.175, 0.25, 0.325, 0.4, 0.4, 0.2, 0.2]
    assert seen == pytest.approx(expected)
    # the plain LambdaLR form gives the same
    opt2 = torch.optim.SGD([p], lr=0.1)
    sched2 = torch.optim.lr_scheduler.LambdaLR(
        opt2, LRSchedule(world_size=4, warmup=4, decay="step", milestones=[6],
                         gamma=0.5))
    for _ in range(3):
        opt2.step()
        sched2.step()
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.325)


def test_lars_step_by_hand():
    w = torch.nn.Parameter(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))  # ||w|| = 5
    b = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    opt = hvd.lr.LARS([w, b], lr=2.0, momentum=0.5, weight_decay=0.1, eta=0.01,
                      eps=0.0)
    gw = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # ||g|| = sqrt(2)
    gb = torch.tensor([0.5, 0.5])
    w.grad, b.grad = gw.clone(), gb.clone()
    opt.step()
    trust = 0.01 * 5 / (math.sqrt(2) + 0.1 * 5)
    # d = g + wd w = [[0.3, 1], [1, 0.4]];  v = lr * trust * d;  w -= v
    v_w = [[2.0 * trust * 0.3, 2.0 * trust * 1.0], [2.0 * trust * 1.0, 2.0 * trust * 0.4]]
    expected_w = [[3.0 - v_w[0][0], -v_w[0][1]], [-v_w[1][0], 4.0 - v_w[1][1]]]
    assert w.detach().tolist() == [pytest.approx(r, abs=1e-6) for r in expected_w]
    # the bias is excluded: plain SGD, no weight decay: v = lr * g
    assert b.detach().tolist() == pytest.approx([1.0 - 1.0, -1.0 - 1.0])
    # second step: momentum buffers carry half of the first update
    w_now = [[expected_w[i][j] for j in range(2)] for i in range(2)]
    w.grad, b.grad = gw.clone(), gb.clone()
    opt.step()
    w_norm = math.sqrt(sum(x * x for row in w_now for x in row))
    trust2 = 0.01 * w_norm / (math.sqrt(2) + 0.1 * w_norm)
    d2 = [[gw[i][j].item() + 0.1 * w_now[i][j] for j in range(2)] for i in range(2)]
    v2 = [[0.5 * v_w[i][j] + 2.0 * trust2 * d2[i][j] for j in range(2)]
          for i in range(2)]
    expected2 = [[w_now[i][j] - v2[i][j] for j in range(2)] for i in range(2)]
    assert w.detach().tolist() == [pytest.approx(r, abs=1e-6) for r in expected2]
    assert b.detach().tolist() == pytest.approx([0.0 - 1.5, -2.0 - 1.5])


def test_lars_group_override():
    w = torch.nn.Parameter(torch.tensor([[1.0, 1.0]]))
    opt = hvd.lr.LARS([{"params": [w], "lars_adapt": False}], lr=0.5,
                      momentum=0.0, weight_decay=0.3)
    w.grad = torch.tensor([[2.0, 0.0]])
    opt.step()
    assert w.detach().tolist() == [[0.0, 1.0]]  # plain SGD step, no decay

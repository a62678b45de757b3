"""Run under kolorun --servers 1 -np 3 (2 workers) with argument "target"
(sync mode) or "patience" (downpour): ps.Validator on worker 0.

target: the validator evaluates snapshots in its background thread while
training goes on (its fn waits until the training thread has done 3 more
steps: if evaluation stopped training, it would wait in vain), records
(time, version, metric) with versions rising, and once the held-out loss
reaches the target every worker stops, in sync mode after the same step.
patience: fn returns a constant; after patience=2 evaluations without
improvement the validator stops both downpour workers."""
import sys
import threading

import torch
import kolo.torch as hvd
import kolo.torch.ps as ps

CASE = sys.argv[1]
hvd.init()
me = hvd.rank()
torch.manual_seed(2)
model = torch.nn.Linear(4, 1)
w_true = torch.tensor([[0.5, -1.0, 2.0, 0.25]])
g = torch.Generator().manual_seed(99)
x_val = torch.randn(64, 4, generator=g)
y_val = x_val @ w_true.t()
opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                              named_parameters=model.named_parameters(),
                              mode="sync" if CASE == "target" else "downpour")
steps_done = [0]
progress = threading.Condition()
TARGET = 0.05


def held_out_loss(m):
    start = steps_done[0]
    with progress:  # training must go on while this evaluation runs
        ok = progress.wait_for(lambda: steps_done[0] >= start + 3, timeout=120)
    assert ok, "training did not progress during an evaluation"
    return torch.nn.functional.mse_loss(m(x_val), y_val).item()


val = None
if me == 0:
    if CASE == "target":
        val = ps.Validator(held_out_loss, every_s=0, model=model, target=TARGET,
                           higher_is_better=False)
    else:
        val = ps.Validator(lambda params: 1.0, every_s=0, patience=2)

stopped_at = None
for step in range(2000):
    gen = torch.Generator().manual_seed(1000 * me + step)
    x = torch.randn(16, 4, generator=gen)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), x @ w_true.t()).backward()
    opt.step()
    with progress:
        steps_done[0] += 1
        progress.notify_all()
    if ps.should_stop():
        stopped_at = step
        break
assert stopped_at is not None, "worker %d: the validator never stopped training" % me
if val is not None:
    val.wait(timeout=120)
    val.close()
    h = val.history
    assert val.reason is not None, h
    if CASE == "target":
        assert len(h) >= 1 and h[-1][2] <= TARGET, h
        assert all(m > TARGET for _, _, m in h[:-1]), h
        assert all(a[1] < b[1] for a, b in zip(h, h[1:])), ("versions must rise", h)
        assert all(a[0] <= b[0] for a, b in zip(h, h[1:])), h
        assert "reached the target" in val.reason, val.reason
    else:
        assert len(h) == 3 and [m for _, _, m in h] == [1.0] * 3, h
        assert "no improvement" in val.reason, val.reason
ends = hvd.allgather_object(stopped_at, name="ends")
if CASE == "target":
    assert ends[0] == ends[1], ("sync workers must stop after the same step", ends)
hvd.allreduce(torch.zeros(1), name="barrier")
print("worker %d: validator (%s) stopped training after step %d" % (me, CASE, stopped_at),
      flush=True)
hvd.shutdown()

"""Run under kolorun --servers 1 --validators 1 -np 4: workers 0 and 1
train (sync mode), worker 2 is a validator rank. The sync rounds apply
without the validator's pushes; the validator pulls and evaluates on its
own, records rising versions, stops the training at the target, and ends
once both trainers have called ps.finish(), with a last evaluation of the
final parameters."""
import torch
import kolo.torch as hvd
import kolo.torch.ps as ps

hvd.init()
me, W = hvd.rank(), hvd.size()
assert W == 3, W
assert ps.is_validator() == (me == 2), (me, ps.is_validator())
torch.manual_seed(4)
model = torch.nn.Linear(4, 1)
w_true = torch.tensor([[1.0, 0.5, -0.5, 2.0]])
g = torch.Generator().manual_seed(77)
x_val = torch.randn(64, 4, generator=g)
y_val = x_val @ w_true.t()
opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                              named_parameters=model.named_parameters(), mode="sync")
TARGET = 0.05


def held_out_loss(m):
    return torch.nn.functional.mse_loss(m(x_val), y_val).item()


if ps.is_validator():
    val = ps.Validator(held_out_loss, every_s=0.05, model=model, target=TARGET,
                       higher_is_better=False)
    h = val.history
    assert len(h) >= 2, h
    assert all(a[1] <= b[1] for a, b in zip(h, h[1:])), ("versions must not fall", h)
    assert val.reason is not None and "reached the target" in val.reason, (val.reason, h)
    final = ps.stats()[0]
    assert h[-1][1] == final["version"], ("the last evaluation is of the final version",
                                          h[-1], final)
    assert final["pushes"][2] == 0, final
    assert final["pushes"][0] == final["pushes"][1] == final["version"], final
    result = "validated %d times, versions %d..%d" % (len(h), h[0][1], h[-1][1])
else:
    try:
        ps.save("/nonexistent-kolo-ckpt")
        raise AssertionError("ps.save with validator ranks accepted")
    except ValueError as e:
        assert "not supported with validator ranks" in str(e), str(e)
    steps = 0
    for step in range(3000):
        gen = torch.Generator().manual_seed(1000 * me + step)
        x = torch.randn(16, 4, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), x @ w_true.t()).backward()
        opt.step()
        steps += 1
        if ps.should_stop():
            break
    assert steps < 3000, "the validator rank never stopped the training"
    ps.finish()
    result = "trained %d steps" % steps
print("worker %d: validator rank job: %s" % (me, result), flush=True)
hvd.shutdown()

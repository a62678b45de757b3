"""kolo.torch.zero: sharded data parallelism checked bit for bit against
kolo.torch.DistributedOptimizer (float64, KOLO_DETERMINISTIC=1), on 2 and 3
ranks, with parameters whose sizes do not divide by the rank count and
buckets small enough to split parameters between ranks.

  KOLO_DETERMINISTIC=1 build/bin/kolorun -np 3 /usr/bin/python3 -m pytest \
      tests/python/test_torch_zero.py
"""

import os
import tempfile

import pytest
import torch
import torch.nn as nn

import kolo
import kolo.torch as hvd
from kolo.torch import zero

STEPS = 20
BATCH = 4
TINY_MB = 40 * 8 / 2 ** 20  # 40 float64 elements: buckets split parameters


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    assert os.environ.get("KOLO_DETERMINISTIC") == "1", "run with KOLO_DETERMINISTIC=1"
    hvd.init()
    yield


class Net(nn.Module):
    """Odd sizes: 7*13+13, 13*5+5, 5*3+3 elements; ``unused`` gets no grad."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(7, 13)
        self.fc2 = nn.Linear(13, 5)
        self.fc3 = nn.Linear(5, 3)
        self.unused = nn.Linear(2, 3)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def make_net():
    torch.manual_seed(0)
    return Net().double()


def batch(step):
    g = torch.Generator().manual_seed(1000 * step + hvd.rank())
    return torch.randn(BATCH, 7, generator=g, dtype=torch.float64), \
        torch.randn(BATCH, 3, generator=g, dtype=torch.float64)


OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01, weight_decay=1e-3),
}


def train(model, opt, steps=STEPS, passes=1, clip=None, start=0):
    losses = []
    for step in range(start, start + steps):
        opt.zero_grad()
        for k in range(passes):
            x, y = batch(step * passes + k)
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
        if clip is not None:
            opt.synchronize()
            if isinstance(opt, torch.optim.Optimizer) and hasattr(opt, "clip_grad_norm_"):
                opt.clip_grad_norm_(clip)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        losses.append(loss.item())
    return losses


def reference(kind, steps=STEPS, passes=1, clip=None):
    model = make_net()
    opt = hvd.DistributedOptimizer(OPTIMIZERS[kind](model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes)
    losses = train(model, opt, steps, passes, clip)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    names = {p: n for n, p in model.named_parameters()}
    state = {names[p]: dict(s) for p, s in opt.state.items()}
    return losses, params, state


def sharded(kind, stage, steps=STEPS, passes=1, clip=None, bucket_mb=TINY_MB,
            overlap=False, after=None):
    model = make_net()
    if stage == 3:
        zero.wrap(model)
    opt = zero.DistributedOptimizer(OPTIMIZERS[kind](model.parameters()),
                                    named_parameters=model.named_parameters(),
                                    stage=stage, bucket_mb=bucket_mb,
                                    backward_passes_per_step=passes,
                                    overlap_params=overlap)
    losses = train(model, opt, steps, passes, clip)
    if after is not None:
        after(model, opt)
    with zero.full_parameters(model):
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return losses, params, opt.gathered_state(), model, opt


def assert_bits(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.shape, b.shape)
    diff = (a != b).sum().item()
    assert diff == 0, "%s: %d of %d elements differ (max %g)" % (
        what, diff, a.numel(), (a - b).abs().max().item())


_REFS = {}


def ref(kind, passes=1):
    if (kind, passes) not in _REFS:
        _REFS[(kind, passes)] = reference(kind, passes=passes)
    return _REFS[(kind, passes)]


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_exact(kind, stage):
    r_losses, r_params, r_state = ref(kind)
    losses, params, state, _, _ = sharded(kind, stage)
    assert losses == r_losses
    for name, value in r_params.items():
        assert_bits(params[name], value, "parameter %s" % name)
    assert sorted(state) == sorted(r_state)
    for name, entry in r_state.items():
        assert sorted(state[name]) == sorted(entry), name
        for key, value in entry.items():
            assert_bits(torch.as_tensor(state[name][key]), torch.as_tensor(value),
                        "state %s of %s" % (key, name))


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_overlap_params(kind, stage):
    """overlap_params: step() leaves the parameters' allgathers to the next
    forward's module hooks (the unused module's bucket to the model's own
    hook); the training is still bit for bit the reference's, and
    model.state_dict() straight after step() holds the updated values."""
    r_losses, r_params, r_state = ref(kind)
    seen = {}

    def after(model, opt):
        seen["enabled"] = opt._gathers.enabled
        seen["pending"] = len(opt._gathers.running) + len(opt._gathers.queued)
        seen["state_dict"] = {k: v.clone() for k, v in model.state_dict().items()}

    losses, params, state, _, _ = sharded(kind, stage, overlap=True, after=after)
    assert seen["enabled"] and seen["pending"] > 0, seen
    assert losses == r_losses
    for name, value in r_params.items():
        assert_bits(seen["state_dict"][name], value, "state_dict() entry %s" % name)
        assert_bits(params[name], value, "parameter %s" % name)
    for name, entry in r_state.items():
        for key, value in entry.items():
            assert_bits(torch.as_tensor(state[name][key]), torch.as_tensor(value),
                        "state %s of %s" % (key, name))


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_backward_passes_per_step(stage):
    r_losses, r_params, _ = ref("adam", passes=2)
    losses, params, _, _, _ = sharded("adam", stage, passes=2)
    assert losses == r_losses
    for name, value in r_params.items():
        assert_bits(params[name], value, "parameter %s" % name)


def test_sharded_memory_is_a_share():
    """Each rank's optimizer state covers ceil(total/N) elements per bucket."""
    _, _, _, model, opt = sharded("adam", 2, steps=1, bucket_mb=1.0)
    total = sum(p.numel() for p in model.parameters())
    mine = sum(t.numel() for g in opt.param_groups for t in g["params"])
    assert mine <= -(-total // hvd.size())
    assert all(s["exp_avg"].numel() == t.numel() for t, s in opt.state.items()
               for t in [t])
    everyone = hvd.allgather_object(mine)
    assert sum(everyone) == total


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_clip_grad_norm(stage):
    r_losses, r_params, _ = reference("sgd", steps=5, clip=0.05)
    losses, params, _, _, _ = sharded("sgd", stage, steps=5, clip=0.05)
    for name, value in r_params.items():
        torch.testing.assert_close(params[name], value, rtol=1e-12, atol=1e-14)
    # The clipping happened: unclipped training ends elsewhere.
    _, free, _ = reference("sgd", steps=5)
    assert any(not torch.allclose(free[n], v) for n, v in r_params.items())


def test_stage3_releases_parameters():
    model = make_net()
    zero.wrap(model)
    def held():
        return sum(p.storage().size() for p in model.parameters())
    assert held() == 0
    opt = zero.DistributedOptimizer(OPTIMIZERS["sgd"](model.parameters()),
                                    named_parameters=model.named_parameters(), stage=3)
    x, y = batch(0)
    loss = ((model(x) - y) ** 2).mean()
    assert held() == 0  # also what the graph saved for backward
    loss.backward()
    assert held() == 0 and all(p.grad is None for p in model.parameters())
    opt.step()
    with zero.full_parameters(model):
        assert model.fc1.weight.shape == (13, 7)
    # From the second forward on, a unit's forward finds the next unit's
    # allgather started (prefetch), and at most two units hold memory.
    units = model._kolo_zero.units
    seen = []

    def check(module, inputs):
        held_units = [u for u in units if u.flat.storage().size()]
        seen.append((module, len(held_units)))
        if module is model.fc1:
            nxt = units[1]
            assert nxt.pending is not None or nxt.gathered, "fc2 not prefetched"

    for m in (model.fc1, model.fc2, model.fc3):
        m.register_forward_pre_hook(check)
    model(x).sum().backward()
    assert len(seen) == 3 and max(n for _, n in seen) <= 2, seen


def test_bad_use():
    model = make_net()
    params = list(model.named_parameters())
    with pytest.raises(ValueError, match="not in it"):
        zero.DistributedOptimizer(OPTIMIZERS["sgd"](model.parameters()),
                                  named_parameters=params[1:], stage=1)
    with pytest.raises(kolo.InvalidArgumentError, match="stage must be 1, 2 or 3"):
        zero.DistributedOptimizer(OPTIMIZERS["sgd"](model.parameters()), stage=4)
    with pytest.raises(kolo.InvalidArgumentError, match="wrap\\(model\\)"):
        zero.DistributedOptimizer(OPTIMIZERS["sgd"](model.parameters()),
                                  named_parameters=params, stage=3)
    # Stages mixed across ranks.
    stage = 1 if hvd.rank() == 0 else 2
    with pytest.raises(kolo.MismatchError, match="stage 1 on rank 0 but stage 2 on rank 1"):
        zero.DistributedOptimizer(OPTIMIZERS["sgd"](model.parameters()),
                                  named_parameters=params, stage=stage)
    # A parameter of another shape on one rank.
    other = make_net()
    if hvd.rank() == hvd.size() - 1:
        other.fc3 = nn.Linear(5, 4).double()
    with pytest.raises(kolo.MismatchError, match="fc3.weight"):
        zero.DistributedOptimizer(OPTIMIZERS["sgd"](other.parameters()),
                                  named_parameters=other.named_parameters(), stage=2)


# --- checkpoints ------------------------------------------------------------------

def shared_dir(process_set=hvd.global_process_set):
    path = tempfile.mkdtemp(prefix="kolo_zero_") if process_set.rank() == 0 else None
    return hvd.broadcast_object(path, root_rank=process_set.ranks[0], name="zero.test.dir",
                                process_set=process_set)


def build(stage, kind="adam", process_set=None, model=None):
    model = model or make_net()
    if stage == 3:
        zero.wrap(model, process_set=process_set)
    opt = zero.DistributedOptimizer(OPTIMIZERS[kind](model.parameters()),
                                    named_parameters=model.named_parameters(), stage=stage,
                                    bucket_mb=TINY_MB, process_set=process_set)
    return model, opt


def full_params(model):
    with zero.full_parameters(model):
        return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_same(a, b, what):
    assert sorted(a) == sorted(b), what
    for name in a:
        if isinstance(a[name], dict):
            assert_same(a[name], b[name], "%s %s" % (what, name))
        else:
            assert_bits(torch.as_tensor(a[name]), torch.as_tensor(b[name]),
                        "%s %s" % (what, name))


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_checkpoint_resumes_exactly(stage):
    path = shared_dir()
    model, opt = build(stage)
    train(model, opt, steps=3)
    zero.save(path, model, opt)
    train(model, opt, steps=3, start=3)
    model2, opt2 = build(stage)
    zero.load(path, model2, opt2)
    train(model2, opt2, steps=3, start=3)
    assert_same(full_params(model2), full_params(model), "parameter")
    assert_same(opt2.gathered_state(), opt.gathered_state(), "state")
    # A second save replaces the first: one set of shards.
    zero.save(path, model2, opt2)
    hvd.barrier()
    shards = [f for f in os.listdir(path) if f.startswith("shard-")]
    assert len(shards) == hvd.size(), shards


@pytest.mark.parametrize("stage", [2, 3])
def test_checkpoint_reshards(stage):
    """Saved by N ranks, loaded by N-1 (a process set); and back."""
    size = hvd.size()
    fewer = hvd.add_process_set(list(range(size - 1)))
    path, back = shared_dir(), shared_dir()
    model, opt = build(stage)
    train(model, opt, steps=2)
    zero.save(path, model, opt)
    state, params = opt.gathered_state(), full_params(model)
    if fewer.included():
        model2, opt2 = build(stage, process_set=fewer)
        zero.load(path, model2, opt2)
        assert_same(opt2.gathered_state(), state, "state")
        assert_same(full_params(model2), params, "parameter")
        train(model2, opt2, steps=1, start=2)
        zero.save(back, model2, opt2)
        state, params = opt2.gathered_state(), full_params(model2)
    state = hvd.broadcast_object(state, root_rank=0)
    params = hvd.broadcast_object(params, root_rank=0)
    model3, opt3 = build(stage)
    zero.load(back, model3, opt3)
    assert_same(opt3.gathered_state(), state, "state")
    assert_same(full_params(model3), params, "parameter")
    hvd.remove_process_set(fewer)


def test_consolidate_gives_plain_state_dicts():
    path = shared_dir()
    model, opt = build(3)
    train(model, opt, steps=2)
    zero.save(path, model, opt)
    state, params = opt.gathered_state(), full_params(model)
    if hvd.rank() == 0:
        model_sd, _ = zero.consolidate(path)
        plain = Net().double()
        plain.load_state_dict(torch.load(os.path.join(path, "consolidated.pt")))
        assert_same({n: p.detach() for n, p in plain.named_parameters()}, params, "parameter")
        plain_opt = OPTIMIZERS["adam"](plain.parameters())
        plain_opt.load_state_dict(torch.load(os.path.join(path, "consolidated.optimizer.pt")))
        names = {p: n for n, p in plain.named_parameters()}
        assert_same({names[p]: dict(s) for p, s in plain_opt.state.items()}, state, "state")
        assert plain_opt.param_groups[0]["lr"] == 0.01
    hvd.barrier()


def test_checkpoint_of_another_model_is_refused():
    path = shared_dir()
    model, opt = build(1)
    zero.save(path, model, opt)
    other = make_net()
    other.fc3 = nn.Linear(5, 4).double()
    model2, opt2 = build(1, model=other)
    with pytest.raises(kolo.InvalidArgumentError,
                       match="from another model: parameter 'fc3.weight' is torch.float64 "
                             "\\[3, 5\\] there and torch.float64 \\[4, 5\\] here"):
        zero.load(path, model2, opt2)
    with pytest.raises(kolo.InvalidArgumentError, match="not a kolo.torch.zero checkpoint|cannot read"):
        zero.load(path + "/missing", model, opt)


@pytest.mark.parametrize("stage", [2, 3])
def test_fp16_compression(stage):
    """Gradients travel as float16, as kolo.torch.DistributedOptimizer's do."""
    def run(make):
        torch.manual_seed(0)
        model = Net().float()
        opt = make(model)
        for step in range(3):
            x, y = batch(step)
            opt.zero_grad()
            ((model(x.float()) - y.float()) ** 2).mean().backward()
            opt.step()
        return full_params(model)

    ref = run(lambda m: hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
        compression=hvd.Compression.fp16))

    def sharded_opt(m):
        if stage == 3:
            zero.wrap(m)
        return zero.DistributedOptimizer(
            torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
            stage=stage, bucket_mb=TINY_MB, compression=hvd.Compression.fp16)

    got = run(sharded_opt)
    assert_same(got, ref, "parameter")


@pytest.mark.parametrize("stage", [1, 3])
def test_elastic_state_restores_the_commit(stage):
    """hvd.elastic.TorchState with a zero optimizer (and a wrapped model):
    restore() on the world of the commit gives the committed parameters and
    state back bit for bit (each rank's own block, no communication); a
    reset on the same world leaves them; training then goes on as from the
    commit. (A changed world: zero_elastic_train.py.)"""
    model, opt = build(stage)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
    train(model, opt, steps=2)
    state.step = 2
    state.commit()
    params, st = full_params(model), opt.gathered_state()
    train(model, opt, steps=2, start=2)
    after = full_params(model)
    assert not torch.equal(after["fc1.weight"], params["fc1.weight"])
    state.restore()
    assert state.step == 2
    assert_same(full_params(model), params, "restored parameter")
    assert_same(opt.gathered_state(), st, "restored state")
    state.reset()
    assert_same(opt.gathered_state(), st, "state after a reset on the same world")
    train(model, opt, steps=2, start=2)
    assert_same(full_params(model), after, "parameter trained again from the commit")


def test_elastic_state_bad_use():
    ps = hvd.add_process_set(list(range(hvd.size())))
    model, opt = build(1, process_set=ps)
    with pytest.raises(ValueError, match="on a process set"):
        hvd.elastic.TorchState(model=model, optimizer=opt)
    hvd.remove_process_set(ps)
    model, _ = build(3)
    plain = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="'model' is wrapped by kolo.torch.zero.wrap, but its "
                                         "parameters .* are in no kolo.torch.zero"):
        hvd.elastic.TorchState(model=model, optimizer=plain)


def _pretend_joined(state, model, opt):
    """This rank becomes a worker that has just joined: no commit, no
    optimizer state, zeroed parameters (what TorchState holds on a worker
    whose zero optimizers were built in a later elastic generation)."""
    from kolo.torch.zero.elastic import Snapshot
    handler = state._handlers["optimizer"]
    handler._snapshot, handler._joining = Snapshot(), True
    opt.state.clear()
    with torch.no_grad():
        for b in opt._buckets:
            unit = getattr(b, "unit", None)
            if unit is not None:
                unit.shard_buf.zero_()
            else:
                for p in b.params:
                    p.zero_()


@pytest.mark.parametrize("stage", [2, 3])
def test_elastic_join_reshards_the_commit(stage):
    """A worker that joins (here the last rank, made to hold nothing) gets
    its share of the others' commit in its first sync, while they re-shard
    in reset() (the last old rank's block comes from its ring neighbour's
    copy): afterwards every rank's consolidated parameters and state equal
    the commit bit for bit. (The real join, a host added to a running job:
    zero_elastic_train.py.)"""
    model, opt = build(stage)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
    train(model, opt, steps=2)
    state.commit()
    params, st = full_params(model), opt.gathered_state()
    joiner = hvd.rank() == hvd.size() - 1
    if joiner:
        _pretend_joined(state, model, opt)
    else:
        state.reset()  # what the old ranks run after the reset
    state.sync()
    assert_same(full_params(model), params, "parameter after the join")
    assert_same(opt.gathered_state(), st, "state after the join")


def test_elastic_join_of_another_model_is_refused():
    """A joiner whose optimizer differs (stage, names, shapes, dtypes) is
    refused on every rank with an error naming the ranks."""
    model, opt = build(1)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
    joiner = hvd.size() - 1
    if hvd.rank() == joiner:
        _pretend_joined(state, model, opt)
        opt._agreement = (1, [("other.weight", [3], "torch.float64")])
    with pytest.raises(kolo.MismatchError,
                       match="rank %d's optimizer differs from rank 0's" % joiner):
        state.sync() if hvd.rank() == joiner else state.reset()

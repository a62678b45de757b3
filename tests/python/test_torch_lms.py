"""kolo.torch.lms on the CPU: the placement planner's decisions (which saved
storages leave, in which order they come back, within which budget), the
saved-tensor hooks on real models (gradients bit for bit those without
LMS, the resident bytes never above the limit by the planner's count and
by the storages really held), optimizer-state offload (same numerics,
state and masters in separate host storages), data parallelism and the
sharded optimizer's stages 1-3 (losses bit for bit in float64 with and
without LMS), the timeline spans, bad arguments.

  KOLO_DETERMINISTIC=1 build/bin/kolorun -np 2 /usr/bin/python3 -m pytest \
      tests/python/test_torch_lms.py
"""

import json
import os
import tempfile

import pytest
import torch
import torch.nn as nn

import kolo
import kolo.torch as hvd
from kolo.torch import lms, zero
from kolo.torch.lms.planner import Planner

WIDTH, DEPTH, BATCH = 128, 6, 64
ACT = BATCH * WIDTH * 8  # one activation's bytes (float64): 64 KiB


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    hvd.init()
    yield


# --- the planner alone --------------------------------------------------------

class Recorder:
    """A mover that only records what the planner asked for."""

    def __init__(self):
        self.calls = []

    def offload(self, e):
        self.calls.append(("offload", e.index))

    def prefetch(self, e):
        self.calls.append(("prefetch", e.index))

    def fetch(self, e):
        self.calls.append(("fetch", e.index))

    def ready(self, e):
        self.calls.append(("ready", e.index))

    def forget(self, e):
        self.calls.append(("forget", e.index))


def run_planner(sizes, limit, prefetch, movable=None):
    """Saves ``sizes`` in order, then uses and releases them in reverse (a
    sequential model's backward). Returns (planner, resident after every
    call)."""
    p = Planner(limit, prefetch, Recorder())
    movable = movable or [True] * len(sizes)
    seen = []
    entries = []
    for n, m in zip(sizes, movable):
        entries.append(p.save(n, m))
        seen.append(p.resident)
    for e in reversed(entries):
        p.use(e)
        seen.append(p.resident)
        p.release(e)
        seen.append(p.resident)
    return p, seen


def test_planner_offloads_oldest_first_within_the_budget():
    p, seen = run_planner([100] * 6, limit=250, prefetch=2)
    assert p.offload_log == [0, 1, 2, 3]
    assert max(seen) <= 250 and p.stats["peak_resident"] <= 250
    assert p.stats["over_budget"] == 0
    # Backward: every offloaded entry came back once, highest index first.
    assert [i for i, _ in p.return_log] == [3, 2, 1, 0]
    assert p.resident == 0


def test_planner_prefetch_window_and_order():
    # Room for 4 entries: after use(5) the window holds 2 prefetched ones.
    p, seen = run_planner([100] * 8, limit=450, prefetch=2)
    assert p.offload_log == [0, 1, 2, 3]
    assert p.return_log == [(3, "prefetch"), (2, "prefetch"), (1, "prefetch"),
                            (0, "prefetch")]
    assert p.stats["peak_waiting"] == 2 and p.stats["fetched"] == 0
    assert max(seen) <= 450
    calls = p.mover.calls
    # The window: prefetches 3 and 2 are issued before 3 is read (ready),
    # and never more than 2 issued-but-unread.
    waiting = 0
    for kind, _ in calls:
        waiting += {"prefetch": 1, "ready": -1}.get(kind, 0)
        assert waiting <= 2
    assert calls.index(("prefetch", 2)) < calls.index(("ready", 3))


def test_planner_without_prefetch_fetches_on_demand():
    p, seen = run_planner([100] * 6, limit=250, prefetch=0)
    assert p.return_log == [(3, "fetch"), (2, "fetch"), (1, "fetch"), (0, "fetch")]
    assert p.stats["prefetched"] == 0 and max(seen) <= 250


def test_planner_keeps_what_is_not_movable():
    # Entries 2-4 small (not movable): they stay and count, the movable
    # ones before them make the room.
    p, seen = run_planner([100, 100, 60, 60, 60], limit=250, prefetch=1,
                          movable=[True, True, False, False, False])
    assert p.offload_log == [0, 1] and p.return_log == [(1, "prefetch"), (0, "prefetch")]
    assert p.stats["over_budget"] == 0 and max(seen) <= 250
    # A movable entry that does not fit beside the unmovable ones goes to
    # the host as it is saved.
    p = Planner(250, 1, Recorder())
    for n, m in [(100, False), (100, False), (100, True)]:
        p.save(n, m)
    assert p.offload_log == [2] and p.resident == 200
    # Not movable and over the budget: kept, and recorded as over budget.
    p, _ = run_planner([200, 100], limit=250, prefetch=1, movable=[False, False])
    assert p.offload_log == [] and p.stats["over_budget"] == 1


def test_planner_unlimited_moves_nothing():
    p, seen = run_planner([100] * 5, limit=None, prefetch=2)
    assert p.offload_log == [] and p.return_log == [] and max(seen) == 500


# --- the hooks on a real model ------------------------------------------------

def mlp(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 3)).to(dtype)


def data(step, dtype=torch.float64):
    g = torch.Generator().manual_seed(100 * step + hvd.rank())
    return (torch.randn(BATCH, WIDTH, generator=g, dtype=dtype),
            torch.randn(BATCH, 3, generator=g, dtype=dtype))


def grads_of(model):
    x, y = data(0)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


class Watch:
    """Wraps an Lms handle's planner: after every save and use the
    planner's resident count and the real bytes of the storages the hooks
    hold must agree and stay within the limit."""

    def __init__(self, handle, params):
        self.handle = handle
        self.planner = handle.planner
        self.samples = []
        self.param_ptrs = {p.data_ptr() for p in params}
        self.saved_ptrs = []
        save, use = self.planner.save, self.planner.use

        def checked_save(nbytes, movable, payload=None):
            e = save(nbytes, movable, payload)
            if payload is not None:
                self.saved_ptrs.append(payload.key[0])
            self.sample()
            return e

        def checked_use(e):
            use(e)
            self.sample()

        self.planner.save, self.planner.use = checked_save, checked_use

    def sample(self):
        acts = self.handle._activations
        # Called inside the hooks' lock: read the storages directly.
        real = sum(s.base.numel() * s.base.element_size()
                   for s in list(acts._all) if s.base is not None)
        self.samples.append((self.planner.resident, real))


def test_activations_bit_identical_within_the_budget():
    plain = grads_of(mlp())
    total = lms.enable(mlp(), offload=("activations",))  # no limit on the CPU
    free = grads_of(total.model)
    unlimited_peak = total.stats()["peak_resident"]
    # The input and each ReLU's output (saved by the ReLU and the next
    # Linear: one storage); the Linears' weights are not counted.
    assert total.stats()["offloaded"] == 0 and unlimited_peak == (DEPTH + 1) * ACT
    assert all(torch.equal(a, b) for a, b in zip(plain, free))

    limit = unlimited_peak // 2
    model = mlp()
    handle = lms.enable(model, limit_bytes=limit, prefetch=2, offload=("activations",))
    handle.min_offload_bytes = 4096
    watch = Watch(handle, model.parameters())
    got = grads_of(model)
    assert all(torch.equal(a, b) for a, b in zip(plain, got)), "gradients differ"
    st = handle.stats()
    assert st["offloaded"] > 0 and st["over_budget"] == 0
    assert st["peak_resident"] <= limit < unlimited_peak
    for counted, real in watch.samples:
        assert counted == real, watch.samples
        assert real <= limit, (real, limit)
    # Parameters are never saved as entries.
    assert not set(watch.saved_ptrs) & watch.param_ptrs
    # Every offloaded storage came back once, in reverse save order, the
    # window of 2 filled and never passed; all released after backward.
    planner = handle.planner
    returned = [i for i, _ in planner.return_log]
    assert sorted(returned) == sorted(planner.offload_log)
    assert returned == sorted(returned, reverse=True)
    assert st["peak_waiting"] == 2 and st["prefetched"] > 0
    assert handle.resident_bytes() == 0 and handle.held_storages() == {}
    assert st["host_bytes"] == 0 and st["peak_host_bytes"] >= st["offloaded_bytes"] // 2


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_activations_prefetch_window(prefetch):
    plain = grads_of(mlp())
    model = mlp()
    # Room for the storage in use and a full window; 7 storages, so 3 or
    # more are offloaded.
    limit = max(prefetch + 1, 2) * ACT
    handle = lms.enable(model, limit_bytes=limit, prefetch=prefetch,
                        offload=("activations",))
    handle.min_offload_bytes = 4096
    got = grads_of(model)
    assert all(torch.equal(a, b) for a, b in zip(plain, got))
    st = handle.stats()
    assert st["peak_waiting"] == prefetch and st["peak_resident"] <= limit
    assert st["offloaded"] > 0 and st["over_budget"] == 0
    if prefetch == 0:
        assert st["prefetched"] == 0 and st["fetched"] == st["offloaded"]


def test_small_storages_stay():
    model = mlp()
    handle = lms.enable(model, limit_bytes=ACT, offload=("activations",))
    handle.min_offload_bytes = ACT + 1  # every activation is "small"
    plain = grads_of(mlp())
    assert all(torch.equal(a, b) for a, b in zip(plain, grads_of(model)))
    st = handle.stats()
    assert st["offloaded"] == 0 and st["over_budget"] > 0


def test_limit_below_one_storage():
    # Every storage goes to the host as it is saved, once (the ReLU output
    # saved again by the next Linear is the same entry), and each use is
    # over the budget (it must come back whole).
    model = mlp()
    handle = lms.enable(model, limit_bytes=ACT // 2, offload=("activations",))
    handle.min_offload_bytes = 4096
    plain = grads_of(mlp())
    assert all(torch.equal(a, b) for a, b in zip(plain, grads_of(model)))
    st = handle.stats()
    assert st["saved"] == DEPTH + 1 and st["offloaded"] == DEPTH + 1, st
    assert st["over_budget"] == DEPTH + 1 and st["fetched"] == DEPTH + 1, st


def test_disable_restores_forward():
    model = mlp()
    handle = lms.enable(model, limit_bytes=ACT, offload=("activations",))
    handle.disable()
    grads_of(model)
    assert handle.stats()["saved"] == 0 and "forward" not in model.__dict__


# --- optimizer offload ----------------------------------------------------------

def train(model, opt, steps=3):
    losses = []
    for step in range(steps):
        x, y = data(step)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def check_placement(opt, params):
    where = lms.placement(opt)
    param_ptrs = {p.data_ptr() for p in params}
    assert where["masters"], "no host masters"
    for p, h in where["masters"]:
        assert h.device.type == "cpu" and h.data_ptr() != p.data_ptr()
        assert torch.equal(h, p.detach().reshape(h.shape))
    assert where["state"], "no optimizer state"
    for p, key, v in where["state"]:
        assert v.device.type == "cpu", (key, v.device)
        assert v.numel() <= 1 or v.data_ptr() not in param_ptrs, key


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_optimizer_offload_same_numerics(name):
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
            "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=1e-3)}[name]
    a, b = mlp(), mlp()
    opt_a = make(a.parameters())
    want = train(a, opt_a)
    handle = lms.enable(b, offload=("optimizer",))
    opt = handle.offload_optimizer(make(b.parameters()))
    assert isinstance(opt, torch.optim.Optimizer)
    got = train(b, opt)
    assert got == want
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    check_placement(opt, list(b.parameters()))
    # The state is keyed by the model's parameters: state_dict round trips.
    fresh = make(b.parameters())
    fresh.load_state_dict(opt.state_dict())
    # A parameter changed in place outside the step is read again.
    with torch.no_grad():
        b[0].weight.add_(1.0)
        a[0].weight.add_(1.0)
    assert train(b, opt, 1) == train(a, opt_a, 1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_bad_arguments():
    m = mlp()
    cases = [
        (dict(limit_bytes=0), "limit_bytes must be > 0, got 0"),
        (dict(limit_bytes=-5), "limit_bytes must be > 0, got -5"),
        (dict(limit_bytes="1G"), "limit_bytes must be a number of bytes or None, got '1G'"),
        (dict(prefetch=-1), "prefetch must be >= 0, got -1"),
        (dict(prefetch=1.5), "prefetch must be an int >= 0, got 1.5"),
        (dict(offload=("activations", "gpu")), "unknown offload kind 'gpu'"),
        (dict(offload=3), "offload must be a sequence"),
    ]
    for kwargs, text in cases:
        with pytest.raises(kolo.InvalidArgumentError) as info:
            lms.enable(m, **kwargs)
        assert text in str(info.value), (kwargs, str(info.value))
    handle = lms.enable(m, offload=("activations",))
    with pytest.raises(kolo.InvalidArgumentError, match="needs \"optimizer\""):
        handle.offload_optimizer(torch.optim.SGD(m.parameters(), lr=0.1))
    with pytest.raises(kolo.InvalidArgumentError, match="min_offload_bytes"):
        handle.min_offload_bytes = -1
    with pytest.raises(kolo.InvalidArgumentError, match="torch.nn.Module"):
        lms.enable("model")
    # A saved tensor on another device than the model's at enable().
    meta = mlp()
    lms.enable(meta, offload=("activations",))
    with pytest.raises(kolo.InvalidArgumentError, match="after model.to.device."):
        meta.to("meta")(torch.zeros(2, WIDTH, dtype=torch.float64, device="meta"))


# --- data parallelism and the sharded optimizer -----------------------------------

def dp_run(kind, with_lms, steps=4):
    model = mlp(seed=1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    handle = None
    if with_lms:
        handle = lms.enable(model, limit_bytes=3 * ACT, prefetch=2)
        handle.min_offload_bytes = 4096
    if kind == "stage3":
        model = zero.wrap(model)
    base = torch.optim.Adam(model.parameters(), lr=0.01)
    named = model.named_parameters()
    if kind == "plain":
        opt = hvd.DistributedOptimizer(base, named_parameters=named)
    else:
        opt = zero.DistributedOptimizer(base, named_parameters=named,
                                        stage=int(kind[-1]), bucket_mb=0.05)
    if with_lms:
        opt = handle.offload_optimizer(opt)
    losses = train(model, opt, steps)
    if with_lms:
        assert handle.stats()["offloaded"] > 0
        assert handle.stats()["peak_resident"] <= 3 * ACT
        check_placement(opt, list(model.parameters()))
    return losses, model


@pytest.mark.parametrize("kind", ["plain", "stage1", "stage2", "stage3"])
def test_data_parallel_losses_equal(kind):
    want, _ = dp_run(kind, False)
    got, _ = dp_run(kind, True)
    assert got == want, (kind, got, want)
    theirs = hvd.allgather_object(want, name="lms.%s" % kind)
    if hvd.size() > 1:  # the ranks' data differ: the equality means something
        assert theirs[0] != theirs[1]


# --- timeline -------------------------------------------------------------------

def test_timeline_spans():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "timeline.%d.json" % hvd.rank())
        model = mlp()
        handle = lms.enable(model, limit_bytes=2 * ACT, prefetch=1)
        handle.min_offload_bytes = 4096
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        opt = handle.offload_optimizer(opt)
        kolo.torch.start_timeline(path)
        train(model, opt, 1)
        hvd.stop_timeline()
        with open(path) as f:
            trace = json.load(f)
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
    spans = {}
    for e in trace:
        if e.get("ph") == "B":
            spans.setdefault(tracks.get(e["tid"]), []).append(e["name"])
    assert set(spans["lms compute"]) == {"FORWARD"}, spans
    copies = spans["lms copies"]
    assert "OFFLOAD" in copies and "PREFETCH" in copies, copies
    assert copies.count("OFFLOAD") == handle.stats()["offloaded"]
    assert spans["lms optimizer"] == ["GRAD_TO_HOST", "HOST_STEP", "PARAMS_TO_DEVICE"]

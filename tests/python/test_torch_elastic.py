"""kolo.torch.elastic (Horovod's elastic API) on 2 ranks: the state object
(commit, restore, sync from rank 0), the run decorator's handling of a
failure raised by the program and of a host update, the learning rate
following the world size, and ElasticSampler's re-sharding (every sample of
an epoch seen exactly once across resizes).

Run: build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_elastic.py
(PYTHONPATH=build/python).
"""

import pytest
import torch

import kolo
import kolo.torch as hvd

hvd.init()


def make_state(value, **extra):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return hvd.elastic.TorchState(model=model, optimizer=opt, epoch=0, batch=0, **extra)


def params(state):
    return [p.detach().clone() for p in state.model.parameters()]


def step(state):
    state.optimizer.zero_grad()
    state.model(torch.ones(2, 4)).sum().backward()
    state.optimizer.step()


def test_commit_then_restore_undoes_what_followed():
    state = make_state(1.0)
    step(state)
    state.epoch, state.batch = 3, 7
    state.commit()
    committed, momentum = params(state), state.optimizer.state_dict()["state"][0]["momentum_buffer"].clone()
    step(state)
    step(state)
    state.epoch, state.batch = 9, 9
    assert not torch.equal(params(state)[0], committed[0])
    state.restore()
    assert all(torch.equal(a, b) for a, b in zip(params(state), committed))
    assert torch.equal(state.optimizer.state_dict()["state"][0]["momentum_buffer"], momentum)
    assert (state.epoch, state.batch) == (3, 7)


def test_sync_makes_every_rank_equal_to_rank_0s_commit():
    r = hvd.rank()
    state = make_state(float(r + 1))
    state.epoch = 10 + r
    sampler = hvd.elastic.ElasticSampler(list(range(100)), seed=5)
    sampler.record_batch(0, 10 + r)
    state2 = hvd.elastic.TorchState(model=state.model, optimizer=state.optimizer,
                                    sampler=sampler, epoch=state.epoch)
    state2.sync()
    for p in state2.model.parameters():
        assert torch.all(p == 1.0), (r, p)
    assert state2.epoch == 10
    assert state2.sampler.processed_num == 10 * hvd.size()


class _Calls:
    def __init__(self):
        self.train = 0
        self.resets = 0


def test_failure_raised_by_the_program_rolls_back_and_retries():
    state = make_state(1.0)
    calls = _Calls()
    state.register_reset_callbacks([lambda: setattr(calls, "resets", calls.resets + 1)])

    @hvd.elastic.run
    def train(state):
        calls.train += 1
        if calls.train == 1:
            step(state)
            state.batch = 1
            state.commit()
            step(state)
            state.batch = 2
            hvd.allreduce(torch.ones(1), name="elastic.before_failure")
            raise hvd.HorovodInternalError("simulated failure")
        return params(state), state.batch

    result, batch = train(state)
    assert calls.train == 2 and calls.resets == 1
    assert batch == 1  # rolled back to the commit
    expected = make_state(1.0)
    step(expected)
    assert all(torch.equal(a, b) for a, b in zip(result, params(expected)))
    assert hvd.is_initialized() and hvd.size() == 2
    # The job works after the reset (a new generation).
    assert hvd.allreduce(torch.ones(3), op=hvd.Sum, name="elastic.after").tolist() == [2.0] * 3


def test_a_program_error_is_not_retried():
    state = make_state(1.0)
    calls = _Calls()

    @hvd.elastic.run
    def train(state):
        calls.train += 1
        raise kolo.InvalidArgumentError("a bug in the program")

    with pytest.raises(kolo.InvalidArgumentError, match="a bug in the program"):
        train(state)
    assert calls.train == 1


def test_host_update_interrupts_every_rank_at_the_same_commit():
    state = make_state(1.0)
    calls = _Calls()
    state.register_reset_callbacks([lambda: setattr(calls, "resets", calls.resets + 1)])
    if hvd.rank() == 0:
        hvd.elastic.notify_hosts_updated(timestamp=1, removed_only=False)

    @hvd.elastic.run
    def train(state):
        calls.train += 1
        step(state)
        state.batch += 1
        state.commit()  # the first call raises HostsUpdatedInterrupt here, on both ranks
        return state.batch

    # No rollback for a host update: the step of the interrupted call stays.
    assert train(state) == 2
    assert calls.train == 2 and calls.resets == 1
    # The interrupt is consumed: a later commit goes through.
    state.commit()


def test_learning_rate_follows_the_world_size_at_a_reset():
    for rule, expected in (("linear", 0.1 * 2 / 4), ("sqrt", 0.1 * (2 / 4) ** 0.5),
                           ("none", 0.1)):
        state = make_state(1.0, lr_rule=rule)
        # As if the state had been committed in a world of 4 ranks and the
        # job re-formed with the 2 of this one.
        state._world_size = 4
        state.on_reset()
        assert state.optimizer.param_groups[0]["lr"] == pytest.approx(expected), rule
    with pytest.raises(ValueError, match="lr_rule"):
        make_state(1.0, lr_rule="cubic")


def test_sampler_covers_an_epoch_exactly_once_across_resizes():
    data = list(range(1000))
    batch = 7
    seen = []
    # The world goes 3 -> 2 -> 4 -> 1 ranks; each phase runs a few batches on
    # every rank, then the sampler state (as committed) re-shards.
    state = None
    for world, batches in ((3, 5), (2, 9), (4, 4), (1, None)):
        samplers = []
        for r in range(world):
            s = hvd.elastic.ElasticSampler(data, seed=11)
            if state is not None:
                s.load_state_dict(state)
            s.reset(rank=r, num_replicas=world)
            samplers.append(s)
        per_rank = [list(s) for s in samplers]
        n = batches if batches is not None else max(
            (len(p) + batch - 1) // batch for p in per_rank)
        for b in range(n):
            for r in range(world):
                seen.extend(per_rank[r][b * batch:(b + 1) * batch])
            for s in samplers:
                s.record_batch(b, batch)
        state = samplers[0].state_dict()
    assert sorted(seen) == data  # nothing lost, nothing twice
    # A new epoch starts over, in a different order.
    s = hvd.elastic.ElasticSampler(data, seed=11)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first
    assert s.processed_num == 0


def test_sampler_uses_the_jobs_ranks():
    s = hvd.elastic.ElasticSampler(list(range(11)), shuffle=False)
    assert list(s) == list(range(hvd.rank(), 11, hvd.size()))
    assert len(s) == (6 if hvd.rank() == 0 else 5)

"""kolo.torch.checkpoint on 2 ranks: save and load of a TorchState (model,
optimizer, sampler, scheduler, plain attributes), keep-last-K, and the
errors (a missing file, a file that is not a checkpoint, a torn file, an
unwritable directory) raised on every rank with one message naming the
path. The stop-and-resume equality is checkpoint_resume.sh.

Run: build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_checkpoint.py
(PYTHONPATH=build/python).
"""

import os

import pytest
import torch

import kolo
import kolo.torch as hvd

hvd.init()


def shared_dir(tmp_path_factory):
    # Rank 0 writes; both ranks (one host) look at the same directory.
    path = hvd.broadcast_object(str(tmp_path_factory.mktemp("ckpt")) if hvd.rank() == 0 else None,
                                root_rank=0, name="test.ckpt.dir")
    return path


@pytest.fixture
def directory(tmp_path_factory):
    return shared_dir(tmp_path_factory)


def make_state(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(5, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    model(torch.ones(1, 5)).sum().backward()
    opt.step()
    sched.step()
    sampler = hvd.elastic.ElasticSampler(list(range(50)), seed=seed)
    sampler.record_batch(0, 4)
    return hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler,
                                  scheduler=sched, epoch=seed, step=seed * 10)


def test_save_then_load_restores_everything_on_every_rank(directory):
    saved = make_state(3)
    path = hvd.checkpoint.save(os.path.join(directory, "a.pt"), saved)
    assert path == os.path.join(directory, "a.pt")
    loaded = make_state(4 + hvd.rank())
    assert hvd.checkpoint.load(path, loaded) == path
    for a, b in zip(saved.model.parameters(), loaded.model.parameters()):
        assert torch.equal(a, b)
    sa, sb = saved.optimizer.state_dict(), loaded.optimizer.state_dict()
    assert torch.equal(sa["state"][0]["exp_avg"], sb["state"][0]["exp_avg"])
    assert sb["param_groups"][0]["lr"] == sa["param_groups"][0]["lr"]
    assert loaded.scheduler.state_dict()["last_epoch"] == saved.scheduler.state_dict()["last_epoch"]
    assert loaded.sampler.state_dict() == saved.sampler.state_dict()
    assert (loaded.epoch, loaded.step) == (3, 30)
    # Loaded means committed: a restore goes back to the checkpoint.
    loaded.step = 99
    loaded.restore()
    assert loaded.step == 30


def test_keep_last_removes_older_files_of_the_pattern(directory):
    state = make_state(1)
    pattern = os.path.join(directory, "run-{step:04d}.pt")
    for s in range(1, 6):
        state.step = s
        hvd.checkpoint.save(pattern, state, keep_last=2)
    hvd.barrier()
    assert sorted(os.listdir(directory)) == ["run-0004.pt", "run-0005.pt"]
    other = make_state(2)
    assert hvd.checkpoint.load(pattern, other).endswith("run-0005.pt")
    assert other.step == 5


def test_errors_name_the_path_and_are_the_same_on_every_rank(directory):
    state = make_state(1)
    missing = os.path.join(directory, "missing.pt")
    messages = []
    with pytest.raises(kolo.InvalidArgumentError, match="missing.pt") as e:
        hvd.checkpoint.load(missing, state)
    messages.append(str(e.value))
    garbage = os.path.join(directory, "garbage.pt")
    torn = os.path.join(directory, "torn.pt")
    if hvd.rank() == 0:
        with open(garbage, "wb") as f:
            torch.save({"weights": 1}, f)
    hvd.barrier()
    with pytest.raises(kolo.InvalidArgumentError, match="garbage.pt.*not a kolo checkpoint"):
        hvd.checkpoint.load(garbage, state)
    hvd.checkpoint.save(torn, state)
    if hvd.rank() == 0:
        size = os.path.getsize(torn)
        with open(torn, "r+b") as f:
            f.truncate(size // 2)
    hvd.barrier()
    with pytest.raises(kolo.InvalidArgumentError, match="torn.pt") as e:
        hvd.checkpoint.load(torn, state)
    messages.append(str(e.value))
    with pytest.raises(kolo.InvalidArgumentError, match="cannot write .*no-such-dir"):
        hvd.checkpoint.save(os.path.join(directory, "no-such-dir", "x.pt"), state)
    with pytest.raises(kolo.InvalidArgumentError, match="keep_last"):
        hvd.checkpoint.save(os.path.join(directory, "y.pt"), state, keep_last=0)
    everyone = hvd.allgather_object(messages, name="test.ckpt.messages")
    assert everyone[0] == everyone[1]

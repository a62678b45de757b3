"""SyncBatchNorm over the ranks equals torch.nn.BatchNorm over the union
batch: outputs, input gradients, weight/bias gradients (summed over ranks),
running statistics; also with different batch sizes per rank.

  build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_sync_batch_norm.py
"""

import pytest
import torch
import torch.nn as nn

import kolo.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    hvd.init()
    yield


def rows_of(r):
    """Rank r holds r + 2 rows (different sizes on purpose)."""
    return r + 2


def offsets():
    starts = [0]
    for r in range(hvd.size()):
        starts.append(starts[-1] + rows_of(r))
    return starts


def check_against_union(ref_cls, feature_shape, momentum):
    channels = feature_shape[0]
    starts = offsets()
    total = starts[-1]
    g = torch.Generator().manual_seed(7)
    ref = ref_cls(channels, momentum=momentum)
    sync = hvd.SyncBatchNorm(channels, momentum=momentum)
    with torch.no_grad():
        w = torch.rand(channels, generator=g) + 0.5
        b = torch.randn(channels, generator=g)
        for m in (ref, sync):
            m.weight.copy_(w)
            m.bias.copy_(b)
    me = slice(starts[hvd.rank()], starts[hvd.rank() + 1])
    for it in range(2):
        x = torch.randn((total,) + tuple(feature_shape), generator=g) * 3 + 1
        upstream = torch.randn((total,) + tuple(feature_shape), generator=g)
        # reference on the union batch; loss = sum(y * upstream)
        xr = x.clone().requires_grad_()
        ref.zero_grad()
        yr = ref(xr)
        (yr * upstream).sum().backward()
        # this rank's part through SyncBatchNorm
        xs = x[me].clone().requires_grad_()
        sync.zero_grad()
        ys = sync(xs)
        (ys * upstream[me]).sum().backward()
        assert torch.allclose(ys, yr[me], atol=1e-5), it
        assert torch.allclose(xs.grad, xr.grad[me], atol=1e-5), it
        gw = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
        gb = hvd.allreduce(sync.bias.grad, op=hvd.Sum)
        assert torch.allclose(gw, ref.weight.grad, atol=1e-4)
        assert torch.allclose(gb, ref.bias.grad, atol=1e-4)
        assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-5)
        assert torch.allclose(sync.running_var, ref.running_var, atol=1e-5)
    assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == 2
    # evaluation mode: running statistics, no communication
    sync.eval()
    ref.eval()
    x = torch.randn((3,) + tuple(feature_shape), generator=g)
    assert torch.allclose(sync(x), ref(x), atol=1e-5)


def test_sync_batch_norm_2d():
    check_against_union(nn.BatchNorm2d, (3, 4, 5), momentum=0.1)


def test_sync_batch_norm_1d_cumulative_average():
    check_against_union(nn.BatchNorm1d, (4,), momentum=None)


def test_convert_sync_batchnorm_and_training():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(),
                          nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(model[1], hvd.SyncBatchNorm)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x = torch.randn(4, 1, 6, 6) + hvd.rank()
    model(x).sum().backward()
    opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(everyone[r], flat) for r in range(hvd.size()))
    stats = hvd.allgather(model[1].running_mean.unsqueeze(0))
    assert all(torch.equal(stats[r], stats[0]) for r in range(hvd.size()))

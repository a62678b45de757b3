"""kolo.torch collectives against values computed here with plain torch.

Run on 2 or more ranks:
  build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_collectives.py
Every rank runs the same tests in the same order; each rank can compute any
other rank's input (inputs are functions of the rank), so the expected result
is computed locally.
"""

import pytest
import torch

import kolo
import kolo.torch as hvd

ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
              torch.int32, torch.int64, torch.uint8]
BYTE_DTYPES = [torch.bool, torch.int8, torch.int16, torch.complex64]


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    hvd.init()
    yield


def rank_input(r, shape, dtype, low=1, high=4):
    """Small deterministic values of rank r (exact in every dtype)."""
    g = torch.Generator().manual_seed(1000 + r)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def reference(op, inputs):
    stacked = torch.stack([x.double() for x in inputs])
    if op == hvd.Sum:
        return stacked.sum(0)
    if op == hvd.Average:
        return stacked.sum(0) / len(inputs)
    if op == hvd.Min:
        return stacked.min(0).values
    if op == hvd.Max:
        return stacked.max(0).values
    return stacked.prod(0)


def all_inputs(shape, dtype):
    return [rank_input(r, shape, dtype) for r in range(hvd.size())]


def test_topology():
    assert hvd.is_initialized()
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size() <= hvd.size()
    assert 0 <= hvd.cross_rank() < hvd.cross_size()
    assert hvd.global_process_set.size() == hvd.size()
    assert hvd.global_process_set.rank() == hvd.rank()


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max,
                                hvd.Product],
                         ids=["sum", "avg", "min", "max", "prod"])
def test_allreduce_dtype_op(dtype, op):
    shape = (3, 5)
    inputs = all_inputs(shape, dtype)
    out = hvd.allreduce(inputs[hvd.rank()], op=op)
    assert out.dtype == dtype and out.shape == torch.Size(shape)
    expected = reference(op, inputs)
    if op == hvd.Average and not dtype.is_floating_point:
        # integer averages: within one of the exact quotient
        assert (out.double() - expected).abs().max() <= 1
    else:
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        assert torch.allclose(out.double(), expected, atol=tol), (out, expected)
    # the input is untouched by the out-of-place form
    assert torch.equal(inputs[hvd.rank()], rank_input(hvd.rank(), shape, dtype))


def test_allreduce_average_default_and_scaling():
    x = torch.full((4,), float(hvd.rank() + 1))
    mean = sum(range(1, hvd.size() + 1)) / hvd.size()
    assert torch.allclose(hvd.allreduce(x), torch.full((4,), mean))
    assert torch.allclose(hvd.allreduce(x, average=False),
                          torch.full((4,), mean * hvd.size()))
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.allclose(out, torch.full((4,), mean * hvd.size()))
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0)
    assert torch.allclose(out, torch.full((4,), 3 * mean * hvd.size()))


def test_allreduce_non_contiguous():
    inputs = all_inputs((4, 6), torch.float32)
    expected = reference(hvd.Sum, inputs).float()
    mine = inputs[hvd.rank()]
    # a transposed view: out of place
    out = hvd.allreduce(mine.t(), op=hvd.Sum)
    assert torch.equal(out, expected.t())
    # a strided view of a bigger tensor, in place: only its elements change
    big = torch.full((4, 12), -7.0)
    view = big[:, ::2]
    view.copy_(mine)
    assert not view.is_contiguous()
    result = hvd.allreduce_(view, op=hvd.Sum)
    assert result is view
    assert torch.equal(big[:, ::2], expected)
    assert torch.equal(big[:, 1::2], torch.full((4, 6), -7.0))


def test_allreduce_inplace_async_poll():
    x = torch.full((1000,), float(hvd.rank()))
    handle = hvd.allreduce_async_(x, name="inplace.async", op=hvd.Sum)
    while not hvd.poll(handle):
        pass
    assert hvd.synchronize(handle) is x
    assert torch.equal(x, torch.full((1000,), float(sum(range(hvd.size())))))
    assert hvd.synchronize(handle) is x  # again: the same result


def test_allreduce_inplace_async_failure_is_kept():
    # A shape that differs across ranks: synchronize raises the mismatch,
    # and raises the same error again; the handle is then done.
    x = torch.zeros(4 + hvd.rank())
    handle = hvd.allreduce_async_(x, name="inplace.mismatch", op=hvd.Sum)
    with pytest.raises(kolo.MismatchError) as first:
        hvd.synchronize(handle)
    assert "'inplace.mismatch'" in str(first.value), str(first.value)
    with pytest.raises(kolo.MismatchError) as second:
        hvd.synchronize(handle)
    assert second.value is first.value
    assert hvd.poll(handle)
    # The runtime goes on: the next in-place allreduce works.
    y = torch.ones(3)
    h = hvd.allreduce_async_(y, name="inplace.after", op=hvd.Sum)
    assert hvd.synchronize(h) is y
    assert torch.equal(y, torch.full((3,), float(hvd.size())))
    assert hvd.synchronize(h) is y


def test_allreduce_scalar_and_empty():
    s = hvd.allreduce(torch.tensor(float(hvd.rank() + 1)), op=hvd.Sum)
    assert s.shape == torch.Size([]) and s.item() == sum(range(1, hvd.size() + 1))
    e = hvd.allreduce(torch.empty(0, 3), op=hvd.Sum)
    assert e.shape == torch.Size([0, 3])


def test_allreduce_autograd():
    x = torch.ones(3, requires_grad=True)
    y = hvd.allreduce(x * (hvd.rank() + 1), op=hvd.Sum)
    y.sum().backward()
    # d(sum over ranks of (r+1) x_r)/dx on rank r: (r+1) * size (the
    # gradient allreduce sums every rank's ones)
    assert torch.allclose(x.grad, torch.full((3,), float((hvd.rank() + 1) *
                                                         hvd.size())))


def test_allreduce_fp16_compression():
    x = torch.full((8,), 0.25 * (hvd.rank() + 1), dtype=torch.float32)
    out = hvd.allreduce(x, compression=hvd.Compression.fp16, op=hvd.Sum)
    assert out.dtype == torch.float32
    assert torch.allclose(out, torch.full((8,), 0.25 * sum(range(1, hvd.size() + 1))))


def test_grouped_allreduce():
    a = all_inputs((3,), torch.float32)
    b = all_inputs((2, 2), torch.float32)
    outs = hvd.grouped_allreduce([a[hvd.rank()], b[hvd.rank()].t()], op=hvd.Sum)
    assert torch.equal(outs[0], reference(hvd.Sum, a).float())
    assert torch.equal(outs[1], reference(hvd.Sum, b).float().t())
    xs = [a[hvd.rank()].clone(), b[hvd.rank()].clone().t()]
    h = hvd.grouped_allreduce_async_(xs, op=hvd.Max)
    res = hvd.synchronize(h)
    assert res[0] is xs[0] and res[1] is xs[1]
    assert torch.equal(xs[0], reference(hvd.Max, a).float())
    assert torch.equal(xs[1], reference(hvd.Max, b).float().t())
    avg = hvd.grouped_allreduce([a[hvd.rank()]], name="grouped.avg")
    assert torch.allclose(avg[0], reference(hvd.Average, a).float())
    with pytest.raises(kolo.InvalidArgumentError):
        hvd.grouped_allreduce([torch.ones(2), torch.ones(2, dtype=torch.int32)])


@pytest.mark.parametrize("dtype", ALL_DTYPES + BYTE_DTYPES, ids=str)
def test_allgather_uneven(dtype):
    # rank r contributes r rows (rank 0: none)
    def rows(r):
        return rank_input(r, (r, 2, 3), torch.int64).to(dtype)
    out = hvd.allgather(rows(hvd.rank()))
    expected = torch.cat([rows(r) for r in range(hvd.size())])
    assert out.dtype == dtype
    assert torch.equal(out, expected)


def test_allgather_non_contiguous_and_scalar():
    base = rank_input(hvd.rank(), (3, 4), torch.float32)
    out = hvd.allgather(base.t())
    expected = torch.cat([rank_input(r, (3, 4), torch.float32).t()
                          for r in range(hvd.size())])
    assert torch.equal(out, expected)
    s = hvd.allgather(torch.tensor(float(hvd.rank())))
    assert torch.equal(s, torch.arange(hvd.size(), dtype=torch.float32))


def test_allgather_autograd():
    x = torch.full((2, 2), float(hvd.rank()), requires_grad=True)
    y = hvd.allgather(x)
    weights = torch.arange(y.shape[0], dtype=torch.float32).unsqueeze(1)
    (y * weights).sum().backward()
    # rows 2r, 2r+1 are this rank's; every rank's loss weighs them the same,
    # and the gradient is their average over ranks (Horovod's)
    mine = weights[2 * hvd.rank():2 * hvd.rank() + 2].expand(2, 2)
    assert torch.allclose(x.grad, mine)


@pytest.mark.parametrize("dtype", ALL_DTYPES + BYTE_DTYPES, ids=str)
def test_broadcast_every_root(dtype):
    for root in range(hvd.size()):
        mine = rank_input(hvd.rank(), (4, 3), torch.int64).to(dtype)
        out = hvd.broadcast(mine, root_rank=root)
        assert torch.equal(out, rank_input(root, (4, 3), torch.int64).to(dtype))
        assert torch.equal(mine, rank_input(hvd.rank(), (4, 3), torch.int64).to(dtype))
        inplace = mine.clone()
        assert hvd.broadcast_(inplace, root) is inplace
        assert torch.equal(inplace, out)


def test_broadcast_non_contiguous_inplace():
    big = torch.full((3, 8), float(hvd.rank()))
    view = big[:, 1::2]
    hvd.broadcast_(view, root_rank=hvd.size() - 1)
    assert torch.equal(big[:, 1::2], torch.full((3, 4), float(hvd.size() - 1)))
    assert torch.equal(big[:, ::2], torch.full((3, 4), float(hvd.rank())))
    h = hvd.broadcast_async(torch.full((2,), float(hvd.rank())), 0)
    assert torch.equal(hvd.synchronize(h), torch.zeros(2))


def test_alltoall_equal_and_splits():
    n = hvd.size()
    r = hvd.rank()
    # equal split: rank r sends row 10r + j to rank j
    send = torch.tensor([[10.0 * r + j] for j in range(n)])
    out = hvd.alltoall(send)
    assert torch.equal(out, torch.tensor([[10.0 * s + r] for s in range(n)]))
    # splits: rank r sends j+1+r rows to rank j, each row holding (r, j)
    splits = [j + 1 + r for j in range(n)]
    rows = torch.cat([torch.tensor([[r, j]] * splits[j], dtype=torch.int32)
                      for j in range(n)])
    out, received = hvd.alltoall(rows.t().contiguous().t(), splits=splits)
    expected = torch.cat([torch.tensor([[s, r]] * (r + 1 + s), dtype=torch.int32)
                          for s in range(n)])
    assert torch.equal(out, expected)
    assert received.tolist() == [r + 1 + s for s in range(n)]
    # a dtype sent as bytes
    flags = torch.tensor([[(r + j) % 2 == 0, True] for j in range(n)])
    got = hvd.alltoall(flags)
    assert got.dtype == torch.bool
    assert torch.equal(got, torch.tensor([[(s + r) % 2 == 0, True] for s in range(n)]))


def test_reducescatter():
    n = hvd.size()
    inputs = all_inputs((2 * n, 3), torch.float32)
    total = reference(hvd.Sum, inputs).float()
    out = hvd.reducescatter(inputs[hvd.rank()], op=hvd.Sum)
    assert torch.equal(out, total[2 * hvd.rank():2 * hvd.rank() + 2])
    avg = hvd.reducescatter(inputs[hvd.rank()].t().contiguous().t())
    assert torch.allclose(avg, total[2 * hvd.rank():2 * hvd.rank() + 2] / n)


def test_barrier_and_join():
    hvd.barrier()
    x = torch.full((5,), float(hvd.rank() + 1))
    if hvd.rank() == 0:
        last = hvd.join()
    else:
        out = hvd.allreduce(x, name="join.allreduce", op=hvd.Average)
        # rank 0 joined: it contributes zeros and, as in Horovod, counts in
        # the average
        others = [r + 1.0 for r in range(1, hvd.size())]
        assert torch.allclose(out, torch.full((5,), sum(others) / hvd.size()))
        last = hvd.join()
    assert last != 0 and hvd.allgather_object(last) == [last] * hvd.size()
    hvd.barrier()


def test_errors_are_kolo_errors():
    with pytest.raises(NotImplementedError) as info:
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)
    assert isinstance(info.value, kolo.KoloError)
    assert "Adasum" in str(info.value)
    with pytest.raises(kolo.InvalidArgumentError, match="bool"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool))
    # Neither CPU nor CUDA: refused by name (kolo.torch.device).
    with pytest.raises(kolo.InvalidArgumentError) as info:
        hvd.allreduce(torch.ones(2, device="meta"), name="on.meta")
    assert "'on.meta'" in str(info.value) and "tensor is on meta" in str(info.value)
    with pytest.raises(kolo.InvalidArgumentError, match="rs.scalar"):
        hvd.reducescatter(torch.tensor(1.0), name="rs.scalar")


def test_mismatch_names_tensor_and_runtime_goes_on():
    x = torch.ones(2 + hvd.rank())
    if hvd.size() > 1:
        with pytest.raises(kolo.MismatchError, match="mismatch.shape"):
            hvd.allreduce(x, name="mismatch.shape")
    out = hvd.allreduce(torch.ones(3), name="after.mismatch", op=hvd.Sum)
    assert torch.equal(out, torch.full((3,), float(hvd.size())))


def test_process_sets():
    evens = hvd.add_process_set(list(range(0, hvd.size(), 2)))
    x = torch.full((2,), float(hvd.rank()))
    if hvd.rank() % 2 == 0:
        assert evens.included() and evens.rank() == hvd.rank() // 2
        # Named: only the even ranks issue these; unnamed, they would
        # advance the even ranks' counter of generated names.
        out = hvd.allreduce(x, op=hvd.Sum, process_set=evens, name="evens.sum")
        assert torch.equal(out, torch.full((2,), float(sum(range(0, hvd.size(), 2)))))
        g = hvd.allgather(x, process_set=evens, name="evens.gather")
        assert g.shape[0] == 2 * evens.size()
    else:
        assert not evens.included()
        with pytest.raises(kolo.InvalidArgumentError, match="not a member"):
            hvd.allreduce(x, process_set=evens)
    assert hvd.remove_process_set(evens) == (hvd.rank() % 2 == 0)
    everyone = hvd.add_process_set(hvd.ProcessSet(range(hvd.size())))
    assert everyone.size() == hvd.size()
    out = hvd.allreduce(x, op=hvd.Max, process_set=everyone)
    assert torch.equal(out, torch.full((2,), float(hvd.size() - 1)))
    hvd.remove_process_set(everyone)


def test_objects():
    obj = {"rank": hvd.rank(), "t": torch.arange(3) * hvd.rank(), "s": "x" * hvd.rank()}
    got = hvd.broadcast_object(obj, root_rank=hvd.size() - 1)
    assert got["rank"] == hvd.size() - 1 and got["s"] == "x" * (hvd.size() - 1)
    assert torch.equal(got["t"], torch.arange(3) * (hvd.size() - 1))
    everyone = hvd.allgather_object(obj)
    assert [o["rank"] for o in everyone] == list(range(hvd.size()))
    assert all(torch.equal(o["t"], torch.arange(3) * i) for i, o in enumerate(everyone))


def test_metric_average():
    v = hvd.metric_average(float(hvd.rank()), name="test")
    assert v == pytest.approx(sum(range(hvd.size())) / hvd.size())
    v = hvd.metric_average(torch.tensor(2.0 * hvd.rank()))
    assert v == pytest.approx(2 * sum(range(hvd.size())) / hvd.size())


def test_unnamed_operations_in_sequence():
    handles = [hvd.allreduce_async(torch.full((3,), float(i)), op=hvd.Sum)
               for i in range(20)]
    for i, h in enumerate(handles):
        assert torch.equal(hvd.synchronize(h), torch.full((3,), float(i * hvd.size())))


def test_large_outputs_reuse_memory_only_after_every_user_let_go():
    """Outputs of 1 MiB and more come from kolo.torch.output_cache: memory is
    handed out again once no tensor uses it, never while a view still does."""
    from kolo.torch import output_cache
    n = (4 << 20) // 4  # 4 MiB of float32
    size = hvd.size()
    x = torch.full((n,), 1.0 + hvd.rank())
    expected = sum(1.0 + r for r in range(size))

    first = hvd.allreduce(x, op=hvd.Sum, name="cache.first")
    assert torch.all(first == expected)
    address = first.data_ptr()
    kept = first[10:20]        # a view keeps the memory in use
    del first
    second = hvd.allreduce(x * 2, op=hvd.Sum, name="cache.second")
    assert second.data_ptr() != address
    assert torch.all(kept == expected), "a view's memory was handed out again"
    assert torch.all(second == 2 * expected)

    del kept                   # the last user lets go: the block is idle
    assert output_cache.cache().idle_bytes() >= 4 << 20
    third = hvd.allreduce(x * 3, op=hvd.Sum, name="cache.third")
    assert third.data_ptr() == address
    assert torch.all(third == 3 * expected) and third.shape == (n,)

    # Other shapes and dtypes view the same blocks correctly.
    g = hvd.allgather(torch.full((256, 1024), float(hvd.rank()), dtype=torch.float64),
                      name="cache.gather")
    assert g.shape == (256 * size, 1024) and g.dtype == torch.float64
    for r in range(size):
        assert torch.all(g[256 * r:256 * (r + 1)] == r)
    h = x.to(torch.bfloat16)
    outs = hvd.grouped_allreduce([h, h[: n // 2]], op=hvd.Sum, name="cache.group")
    assert outs[0].dtype == torch.bfloat16 and outs[1].shape == (n // 2,)
    assert torch.all(outs[0].float() == expected) and torch.all(outs[1].float() == expected)


def test_output_cache_bound_and_bad_setting(monkeypatch):
    from kolo.torch import output_cache
    cache = output_cache.OutputCache(limit_bytes=3 << 20)
    a = cache.empty((2 << 20,), torch.uint8)
    b = cache.empty((2 << 20,), torch.uint8)
    small = cache.empty((10,), torch.float32)   # below min_bytes: plain torch.empty
    assert small.shape == (10,)
    del a, b
    assert cache.idle_bytes() == 2 << 20  # the second block is over the bound
    off = output_cache.OutputCache(limit_bytes=0)
    t = off.empty((1 << 20,), torch.float32)
    del t
    assert off.idle_bytes() == 0
    monkeypatch.setenv("KOLO_TORCH_OUTPUT_CACHE_MB", "lots")
    with pytest.raises(kolo.InvalidArgumentError, match="KOLO_TORCH_OUTPUT_CACHE_MB='lots'"):
        output_cache._limit_bytes()

"""kolo.numpy on every rank of a kolorun job: every operation and dtype,
async + poll, non-contiguous and byte-swapped arrays, generated names,
unsupported dtypes, typed errors naming the tensor, process sets, join with
uneven steps.

Run: build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_numpy.py
(PYTHONPATH=build/python). Every rank runs the same tests in the same order.
"""

import numpy as np
import pytest

import kolo
import kolo.numpy as kn

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8]


@pytest.fixture(scope="module", autouse=True)
def job():
    kolo.init()
    yield
    kn.barrier()


def rank():
    return kolo.rank()


def size():
    return kolo.size()


def reference(op, arrays):
    stack = np.stack([a.astype(np.float64) for a in arrays])
    if op == kn.Sum:
        return stack.sum(0)
    if op == kn.Average:
        return stack.sum(0) / len(arrays)
    if op == kn.Min:
        return stack.min(0)
    if op == kn.Max:
        return stack.max(0)
    return stack.prod(0)


def rank_input(r, dtype, shape=(3, 4)):
    n = int(np.prod(shape))
    return ((np.arange(n) % 3) + r + 1).astype(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [kn.Sum, kn.Average, kn.Min, kn.Max, kn.Product])
def test_allreduce(dtype, op):
    x = rank_input(rank(), dtype)
    before = x.copy()
    out = kn.allreduce(x, op=op, name=f"np.ar.{np.dtype(dtype)}.{op}")
    assert out.dtype == np.dtype(dtype) and out.shape == x.shape
    np.testing.assert_array_equal(x, before)  # input untouched
    want = reference(op, [rank_input(r, dtype) for r in range(size())])
    if np.issubdtype(dtype, np.integer):
        want = np.trunc(want)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_in_place_and_scalars(dtype):
    x = rank_input(rank(), dtype)
    assert kn.allreduce_(x, op=kn.Sum) is x
    want = reference(kn.Sum, [rank_input(r, dtype) for r in range(size())])
    np.testing.assert_allclose(x.astype(np.float64), want, rtol=1e-3)
    s = kn.allreduce(np.array(rank() + 1, dtype), op=kn.Max)
    assert s.shape == () and s == size()


def test_non_contiguous_arrays_are_copied_not_misread():
    r, n = rank(), size()
    base = np.arange(48, dtype=np.float64).reshape(6, 8) * (r + 1)
    view = base[::2, 1::3]  # strided view
    assert not view.flags.c_contiguous
    out = kn.allreduce(view, op=kn.Sum)
    np.testing.assert_allclose(out, np.arange(48.0).reshape(6, 8)[::2, 1::3]
                               * (n * (n + 1) / 2))
    # In place on a strided view writes back only the view's elements.
    kn.allreduce_(view, op=kn.Sum)
    np.testing.assert_allclose(base[::2, 1::3], out)
    np.testing.assert_allclose(base[1::2], np.arange(48.0).reshape(6, 8)[1::2] * (r + 1))
    # Fortran order and a byte-swapped dtype.
    f = np.asfortranarray(rank_input(r, np.float32, (4, 5)))
    np.testing.assert_allclose(kn.allreduce(f, op=kn.Sum),
                               reference(kn.Sum, [rank_input(q, np.float32, (4, 5))
                                                  for q in range(n)]))
    be = rank_input(r, np.dtype(">i4"))
    got = kn.allreduce(be, op=kn.Sum)
    np.testing.assert_array_equal(got, reference(kn.Sum, [rank_input(q, np.int32)
                                                          for q in range(n)]))
    t = rank_input(r, np.float32, (4, 6)).T
    kn.broadcast_(t, 0)
    np.testing.assert_array_equal(t, rank_input(0, np.float32, (4, 6)).T)


def test_async_poll_synchronize():
    handles = [kn.allreduce_async(np.full(100, rank() + i, np.float32), op=kn.Sum,
                                  name=f"async.{i}") for i in range(5)]
    while not all(kn.poll(h) for h in handles):
        pass
    n = size()
    for i, h in enumerate(handles):
        out = kn.synchronize(h)
        assert out[0] == n * (n - 1) / 2 + n * i
        assert kn.synchronize(h) is out  # again: the same result
    # Dropping a pending handle is safe: its arrays stay alive until done.
    kn.allreduce_async(np.ones(10, np.float32), name="dropped")
    kn.barrier()


def test_grouped_allreduce():
    outs = kn.grouped_allreduce([np.full(3, rank() + 1.0, np.float32),
                                 np.full((2, 2), 2.0 * (rank() + 1), np.float32)],
                                op=kn.Average, name="grp")
    n = size()
    assert outs[0][0] == pytest.approx((n + 1) / 2)
    assert outs[1][1, 1] == pytest.approx(n + 1)
    with pytest.raises(kolo.InvalidArgumentError, match="same dtype"):
        kn.grouped_allreduce([np.ones(2, np.float32), np.ones(2, np.float64)], name="mixed")


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_uneven_first_dims(dtype):
    r, n = rank(), size()
    out = kn.allgather(np.full((r + 1, 3), r, dtype))
    assert out.shape == (n * (n + 1) // 2, 3) and out.dtype == np.dtype(dtype)
    assert list(out[:, 2]) == [q for q in range(n) for _ in range(q + 1)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(dtype):
    root = size() - 1
    x = np.full((2, 3), rank() + 1, dtype)
    out = kn.broadcast(x, root)
    assert (out == root + 1).all() and (x == rank() + 1).all()
    kn.broadcast_(x, 0)
    assert (x == 1).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_alltoall(dtype):
    r, n = rank(), size()
    equal = np.repeat(np.arange(n) + 10 * r, 2).astype(dtype)  # 2 rows to each rank
    out = kn.alltoall(equal)
    assert list(out) == [10 * q + r for q in range(n) for _ in range(2)]
    rows = np.array([10 * r + j for j in range(n) for _ in range(j + 1)], dtype)
    out = kn.alltoall(rows, splits=[j + 1 for j in range(n)])
    assert list(out) == [10 * q + r for q in range(n) for _ in range(r + 1)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_reducescatter(dtype):
    r, n = rank(), size()
    x = (np.arange(4 * n).reshape(2 * n, 2) + r).astype(dtype)
    out = kn.reducescatter(x, op=kn.Sum)
    full = sum((np.arange(4 * n).reshape(2 * n, 2) + q) for q in range(n))
    np.testing.assert_array_equal(out.astype(np.int64), full[2 * r:2 * r + 2])


def test_generated_names_match_across_ranks():
    a = kn.allreduce(np.full(2, 1.0), op=kn.Sum)
    b = kn.allreduce(np.full(3, 2.0), op=kn.Sum)
    assert a[0] == size() and b[0] == 2 * size()


def test_unsupported_dtypes_are_clear_errors():
    for bad in (np.int16, np.bool_, np.complex64, np.uint32):
        with pytest.raises(kn.UnsupportedDtypeError) as info:
            kn.allreduce(np.zeros(3, bad), name="odd.dtype")
        assert isinstance(info.value, TypeError)
        assert isinstance(info.value, kolo.InvalidArgumentError)
        assert "'odd.dtype'" in str(info.value) and "bfloat16" in str(info.value)


def test_errors_name_the_tensor():
    with pytest.raises(kolo.MismatchError, match="'layer3.bias'"):
        kn.allreduce(np.zeros(2 + rank(), np.float32), name="layer3.bias")
    with pytest.raises(kolo.MismatchError, match="dtype"):
        kn.allreduce(np.zeros(4, np.float32 if rank() == 0 else np.float64), name="dt")
    with pytest.raises(kolo.InvalidArgumentError, match="'bad.root'"):
        kn.broadcast(np.zeros(2), size() + 1, name="bad.root")
    with pytest.raises(kolo.InvalidArgumentError, match="'rs.odd'"):
        kn.reducescatter(np.zeros(2 * size() + 1), name="rs.odd")
    with pytest.raises(kolo.InvalidArgumentError, match="read-only"):
        ro = np.zeros(3)
        ro.flags.writeable = False
        kn.allreduce_(ro)
    kn.barrier()


def test_process_set():
    n = size()
    ps = kolo.process_set_create(list(range(n)))
    out = kn.allreduce(np.full(4, rank() + 1, np.int64), op=kn.Sum, name="ps.x",
                       process_set=ps)
    assert out[0] == n * (n + 1) // 2
    out = kn.allgather(np.array([rank()], np.int32), process_set=ps)
    assert list(out) == list(range(n))

    class Holder:  # objects carrying process_set_id are accepted
        process_set_id = ps

    kn.barrier(process_set=Holder())
    solo = kolo.process_set_create([rank()])
    assert list(kn.allreduce(np.array([7]), op=kn.Sum, name="ps.x", process_set=solo)) == [7]
    kolo.process_set_destroy(solo)
    kolo.process_set_destroy(ps)


def test_join_with_uneven_steps():
    r, n = rank(), size()
    for s in range(1 + 2 * r):
        out = kn.allreduce(np.ones(8, np.float32), op=kn.Average, name=f"np.step.{s}")
        live = sum(1 for q in range(n) if 1 + 2 * q > s)
        # Joined ranks contribute zeros (Horovod's join, KOLO_JOIN_MODE's
        # default): the average is over every rank.
        assert out[0] == pytest.approx(live / n)
        if live == n:
            g = kn.allgather(np.array([r], np.int64), name=f"np.gather.{s}")
            assert list(g) == list(range(n))
        else:  # an allgather with a joined rank fails, naming it
            with pytest.raises(kolo.InvalidArgumentError, match="rank 0 has joined"):
                kn.allgather(np.array([r], np.int64), name=f"np.gather.{s}")
    kn.join()
    assert kn.allreduce(np.ones(1), op=kn.Sum, name="after.join")[0] == n

"""kolo.torch's in-place allreduce in C (python/native/tensor_handles.cc)
against its Python implementation: which calls take the C path, that every
other call gets the Python path's result and error messages, and the C
handle's contract (synchronize again, poll, name, repr, a handle dropped
while pending, a handle from before shutdown).

Run on 2 ranks:
  build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_fast_path.py
"""

import gc
import time
import weakref

import pytest
import torch

import kolo
import kolo.torch as hvd
from kolo import _native, _ops
from kolo.torch import collectives

PYTHON_ALLREDUCE_ = collectives._allreduce_async_py


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    hvd.init()
    yield


def rank_values(shape, dtype=torch.float32):
    return torch.arange(1, 1 + torch.Size(shape).numel()).reshape(shape).to(dtype) * \
        (hvd.rank() + 1)


def expected(shape, dtype, op):
    ranks = range(1, hvd.size() + 1)
    base = torch.arange(1, 1 + torch.Size(shape).numel()).reshape(shape).double()
    total = base * sum(ranks)
    if op == hvd.Average:
        return (total / hvd.size()).to(dtype)
    if op == hvd.Max:
        return (base * hvd.size()).to(dtype)
    return total.to(dtype)


# (keyword arguments, op): calls the C path takes.
FAST_CALLS = [
    ({}, hvd.Average),
    ({"op": hvd.Sum}, hvd.Sum),
    ({"op": hvd.Max, "process_set": hvd.global_process_set}, hvd.Max),
    ({"op": hvd.Average, "prescale_factor": 1.0, "postscale_factor": 1.0}, hvd.Average),
    ({"op": None, "average": None}, hvd.Average),
    ({"op": hvd.Sum, "process_set": None}, hvd.Sum),  # None: the global set
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("case", range(len(FAST_CALLS)))
def test_common_calls_take_the_c_path(case, dtype):
    kwargs, op = FAST_CALLS[case]
    x = rank_values((3, 5), dtype)
    h = hvd.allreduce_async_(x, name="fast.%d.%s" % (case, dtype), **kwargs)
    assert type(h) is _native.TensorHandle
    assert h.name == "fast.%d.%s" % (case, dtype)
    assert hvd.synchronize(h) is x
    assert torch.equal(x, expected((3, 5), dtype, op))


def test_positional_arguments_and_parameter_subclass():
    p = torch.nn.Parameter(rank_values((4,)))
    h = hvd.allreduce_async_(p, None, "fast.positional", hvd.Sum, 1.0, 1.0,
                             hvd.global_process_set)
    assert type(h) is _native.TensorHandle
    assert hvd.synchronize(h) is p
    assert torch.equal(p.detach(), expected((4,), torch.float32, hvd.Sum))


def test_empty_and_scalar_tensors():
    e = torch.empty(0)
    h = hvd.allreduce_async_(e, name="fast.empty", op=hvd.Sum)
    assert type(h) is _native.TensorHandle
    assert hvd.synchronize(h) is e
    s = torch.tensor(float(hvd.rank() + 1))
    h = hvd.allreduce_async_(s, name="fast.scalar", op=hvd.Sum)
    assert hvd.synchronize(h) is s
    assert s.item() == sum(range(1, hvd.size() + 1))


# Calls the C path hands to the Python implementation, with the result
# expected of them.
PYTHON_CALLS = [
    ({"average": True}, hvd.Average),
    ({"average": False}, hvd.Sum),
    ({"op": hvd.Sum, "prescale_factor": 2, "postscale_factor": 0.5}, hvd.Sum),
]


@pytest.mark.parametrize("case", range(len(PYTHON_CALLS)))
def test_other_calls_take_the_python_path(case):
    kwargs, op = PYTHON_CALLS[case]
    x = rank_values((6,))
    h = hvd.allreduce_async_(x, name="python.%d" % case, **kwargs)
    assert type(h) is _ops.Handle
    assert hvd.synchronize(h) is x
    assert torch.equal(x, expected((6,), torch.float32, op))


def test_non_contiguous_and_unnamed_take_the_python_path():
    big = torch.zeros(4, 6)
    view = big[:, ::2]
    view.copy_(rank_values((4, 3)))
    h = hvd.allreduce_async_(view, name="python.strided", op=hvd.Sum)
    assert type(h) is _ops.Handle
    assert hvd.synchronize(h) is view
    assert torch.equal(big[:, ::2], expected((4, 3), torch.float32, hvd.Sum))
    before = _ops.unnamed_count()
    x = rank_values((2,))
    h = hvd.allreduce_async_(x, op=hvd.Sum)
    assert type(h) is _ops.Handle
    assert h.name == "allreduce.noname.%d" % (before + 1)
    assert hvd.synchronize(h) is x


def bad_calls():
    t = torch.ones(3)
    return [
        ("bool dtype", (torch.ones(2, dtype=torch.bool),), {"name": "bad.bool"}),
        ("not a tensor", ([1.0, 2.0],), {"name": "bad.list"}),
        ("sparse", (torch.ones(2, 2).to_sparse(),), {"name": "bad.sparse"}),
        ("meta device", (torch.ones(2, device="meta"),), {"name": "bad.meta"}),
        ("empty name", (t,), {"name": ""}),
        ("name not a str", (t,), {"name": 5}),
        ("NUL in the name", (t,), {"name": "bad\0name"}),
        ("unknown op", (t,), {"name": "bad.op", "op": 99}),
        ("Adasum", (t,), {"name": "bad.adasum", "op": hvd.Adasum}),
        ("op and average", (t,), {"name": "bad.both", "op": hvd.Sum, "average": True}),
        ("prescale not a number", (t,), {"name": "bad.scale", "prescale_factor": "x"}),
        ("process_set a str", (t,), {"name": "bad.set", "process_set": "x"}),
        ("unknown keyword", (t,), {"name": "bad.kw", "nme": 1}),
        ("tensor twice", (t,), {"tensor": t}),
        ("too many arguments", (t, None, "bad.many", None, 1.0, 1.0, None, 1), {}),
        ("no tensor", (), {"name": "bad.none"}),
    ]


@pytest.mark.parametrize("index", range(len(bad_calls())))
def test_errors_are_the_python_implementations(index):
    what, args, kwargs = bad_calls()[index]
    with pytest.raises(Exception) as c_error:
        hvd.allreduce_async_(*args, **kwargs)
    with pytest.raises(Exception) as python_error:
        PYTHON_ALLREDUCE_(*args, **kwargs)
    assert type(c_error.value) is type(python_error.value), what
    assert str(c_error.value) == str(python_error.value), what


def test_handle_contract():
    x = rank_values((10,))
    h = hvd.allreduce_async_(x, name="contract", op=hvd.Sum)
    assert repr(h) == "<kolo handle 'contract'>"
    while not hvd.poll(h):
        time.sleep(0.001)
    assert h.poll()
    assert h.wait() is x
    assert hvd.synchronize(h) is x  # again: the same tensor
    assert repr(h) == "<kolo handle 'contract' done>"
    assert torch.equal(x, expected((10,), torch.float32, hvd.Sum))
    with pytest.raises(AttributeError):
        h.name = "other"


def test_failure_is_kept_by_the_c_handle():
    x = torch.zeros(2 + hvd.rank())
    h = hvd.allreduce_async_(x, name="fast.mismatch", op=hvd.Sum)
    assert type(h) is _native.TensorHandle
    with pytest.raises(kolo.MismatchError) as first:
        hvd.synchronize(h)
    assert "'fast.mismatch'" in str(first.value)
    with pytest.raises(kolo.MismatchError) as second:
        h.wait()
    assert second.value is first.value
    assert h.poll()


def test_dropped_pending_handle_keeps_its_tensor_until_done():
    # Rank 0 submits 'orphan' and drops handle and tensor; rank 1 submits
    # 'orphan' only after the blocking 'orphan.gate', which rank 0 joins
    # after the drop, so the operation is pending when the handle goes.
    if hvd.rank() == 0:
        x = rank_values((256,))
        alive = weakref.ref(x)
        h = hvd.allreduce_async_(x, name="orphan", op=hvd.Sum)
        del h, x
        gc.collect()
        assert alive() is not None, "the runtime's buffer was freed while pending"
        hvd.allreduce(torch.ones(1), name="orphan.gate")
    else:
        alive = None
        hvd.allreduce(torch.ones(1), name="orphan.gate")
        y = rank_values((256,))
        assert hvd.synchronize(hvd.allreduce_async_(y, name="orphan", op=hvd.Sum)) is y
    # Later submissions reap the orphan once its operation has finished.
    deadline = time.monotonic() + 60
    for i in range(10000):
        z = torch.ones(1)
        hvd.synchronize(hvd.allreduce_async_(z, name="orphan.reap.%d" % i, op=hvd.Sum))
        done = alive is None or alive() is None
        flags = hvd.allreduce(torch.tensor([1.0 if done else 0.0]), op=hvd.Min,
                              name="orphan.done.%d" % i)
        if flags.item() == 1.0:
            break
        assert time.monotonic() < deadline, "the orphan was never reaped"


def test_handle_from_before_shutdown_is_refused():
    # Runs last: it shuts kolo down and starts it again.
    x = rank_values((5,))
    h = hvd.allreduce_async_(x, name="stale", op=hvd.Sum)
    while not hvd.poll(h):
        time.sleep(0.001)
    hvd.shutdown()
    with pytest.raises(kolo.InvalidArgumentError) as error:
        hvd.synchronize(h)
    assert str(error.value) == ("handle of 'stale' was created before kolo was shut "
                                "down; its operation no longer exists")
    with pytest.raises(kolo.InvalidArgumentError):
        h.poll()
    hvd.init()
    del h  # a stale handle dropped: nothing to release
    gc.collect()
    y = rank_values((5,))
    assert hvd.synchronize(hvd.allreduce_async_(y, name="stale.after", op=hvd.Sum)) is y
    assert torch.equal(y, expected((5,), torch.float32, hvd.Sum))

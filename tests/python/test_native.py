"""kolo._native on every rank of a kolorun job (tests/python/CMakeLists.txt):
every operation and dtype through the C API's runtime, async + poll, the
exception classes, process sets, join with uneven steps, timeline, straggler
report, the synchronous helpers, and the hot path's allreduce_submit and
wait_release (results, errors, the GIL).

Run: build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_native.py
(PYTHONPATH=build/python). Every rank runs the same tests in the same order.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import kolo
from kolo import _native as nat


@pytest.fixture(scope="module", autouse=True)
def job():
    kolo.init()
    yield
    nat.barrier()


def rank():
    return nat.rank()


def size():
    return nat.size()


DTYPES = [
    (np.float32, nat.FLOAT32),
    (np.float64, nat.FLOAT64),
    (np.float16, nat.FLOAT16),
    (np.int32, nat.INT32),
    (np.int64, nat.INT64),
    (np.uint8, nat.UINT8),
]


def test_layout_and_codes():
    assert kolo.is_initialized()
    assert 0 <= rank() < size()
    assert size() == int(os.environ["KOLO_SIZE"])
    assert nat.local_size() >= 1 and 0 <= nat.local_rank() < nat.local_size()
    assert nat.cross_size() >= 1 and 0 <= nat.cross_rank() < nat.cross_size()
    # The C enums' values.
    assert [nat.FLOAT32, nat.FLOAT64, nat.FLOAT16, nat.BFLOAT16, nat.INT32, nat.INT64,
            nat.UINT8] == list(range(7))
    assert [nat.SUM, nat.AVG, nat.MIN, nat.MAX, nat.PROD] == list(range(5))
    assert nat.dtype_size(nat.BFLOAT16) == 2
    init_again = nat.init  # idempotent
    init_again()


def expected(op, values):
    if op == nat.SUM:
        return sum(values)
    if op == nat.AVG:
        return sum(values) / len(values)
    if op == nat.MIN:
        return min(values)
    if op == nat.MAX:
        return max(values)
    p = 1
    for v in values:
        p *= v
    return p


def expected_nccl(cuda_built):
    if not cuda_built:
        return 0
    import ctypes
    try:
        lib = ctypes.CDLL("libnccl.so.2")
    except OSError:
        return 0
    version = ctypes.c_int(0)
    if lib.ncclGetVersion(ctypes.byref(version)) != 0:
        return 0
    return version.value if version.value >= 21403 else 0


def test_build_queries_answer_from_the_c_abi():
    # KOLO_TEST_CUDA_BUILT: the build's KOLO_HAVE_CUDA (tests/python/CMakeLists.txt).
    built = os.environ["KOLO_TEST_CUDA_BUILT"] == "1"
    assert nat.cuda_built() is built
    # NCCL's version when it is usable as a backend: a build with CUDA where
    # libnccl.so.2 (2.14.3 or later) loads, asked here of the library itself.
    assert nat.nccl_built() == expected_nccl(built)
    count, reason = nat.cuda_devices()
    assert count >= 0
    assert (count == 0) == (reason != ""), reason
    if not built:
        assert "no CUDA support" in reason
    pytest.importorskip("torch")
    import kolo.torch as hvd
    assert hvd.cuda_built() is built
    assert hvd.nccl_built() == expected_nccl(built)


@pytest.mark.parametrize("np_dtype,code", DTYPES)
@pytest.mark.parametrize("op", [nat.SUM, nat.AVG, nat.MIN, nat.MAX, nat.PROD])
def test_allreduce_every_dtype_and_op(np_dtype, code, op):
    n = size()
    send = (np.arange(12) % 3 + rank() + 1).astype(np_dtype).reshape(3, 4)
    recv = np.zeros_like(send)
    h = nat.allreduce_async(f"ar.{code}.{op}", send.ctypes.data, recv.ctypes.data,
                            [3, 4], code, op)
    nat.wait(h)
    assert nat.poll(h)
    nat.release(h)
    for i in range(12):
        base = i % 3
        want = expected(op, [base + r + 1 for r in range(n)])
        if np.issubdtype(np_dtype, np.integer):
            want = int(want)  # the average of integers truncates
        assert recv.reshape(-1)[i] == pytest.approx(want, rel=1e-3), (i, recv)


def to_bf16(a):
    return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def test_bfloat16_through_raw_pointers():
    send = to_bf16(np.full(8, rank() + 0.5, np.float32))
    recv = np.zeros_like(send)
    h = nat.allreduce_async("ar.bf16", send.ctypes.data, recv.ctypes.data, [8], nat.BFLOAT16,
                            nat.SUM)
    nat.wait(h)
    nat.release(h)
    want = sum(r + 0.5 for r in range(size()))
    assert from_bf16(recv) == pytest.approx(np.full(8, want), rel=1e-2)


def test_scales_async_poll_and_buffers():
    x = np.full(1000, float(rank() + 1), np.float64)
    out = np.zeros_like(x)
    # Objects with the buffer protocol work as well as addresses.
    h = nat.allreduce_async("scaled", x, out, [1000], nat.FLOAT64, nat.SUM, prescale=2.0,
                            postscale=0.25)
    polls = 0
    while not nat.poll(h):
        polls += 1
    nat.wait(h)
    nat.wait(h)  # any number of times
    nat.release(h)
    n = size()
    assert out[0] == pytest.approx(2.0 * n * (n + 1) / 2 * 0.25)
    assert polls >= 0


def test_grouped_allreduce():
    a = np.full(3, rank() + 1, np.float32)
    b = np.full((2, 2), 10 * (rank() + 1), np.float32)
    hs = nat.grouped_allreduce_async(["g.a", "g.b"], [a.ctypes.data, b.ctypes.data],
                                     [a.ctypes.data, b.ctypes.data], [[3], [2, 2]],
                                     nat.FLOAT32, nat.AVG)
    assert len(hs) == 2
    for h in hs:
        nat.wait(h)
        nat.release(h)
    n = size()
    assert a[0] == pytest.approx((n + 1) / 2)
    assert b[1, 1] == pytest.approx(10 * (n + 1) / 2)


@pytest.mark.parametrize("np_dtype,code", DTYPES)
def test_allgather_alltoall_reducescatter_outputs(np_dtype, code):
    r, n = rank(), size()
    # allgather: rank r sends r+1 rows of value r.
    send = np.full((r + 1, 2), r, np_dtype)
    h = nat.allgather_async(f"ag.{code}", send.ctypes.data, [r + 1, 2], code)
    nat.wait(h)
    data, shape = nat.output(h)
    nat.release(h)
    got = np.frombuffer(data, np_dtype).reshape(shape)
    assert shape == [n * (n + 1) // 2, 2]
    assert list(got[:, 0]) == [v for v in range(n) for _ in range(v + 1)]
    # alltoall with splits: j+1 rows to rank j, worth 10r+j.
    rows = [10 * r + j for j in range(n) for _ in range(j + 1)]
    send = np.array(rows, np_dtype)
    h = nat.alltoall_async(f"a2a.{code}", send.ctypes.data, [len(rows)], code,
                           splits=[j + 1 for j in range(n)])
    nat.wait(h)
    data, shape = nat.output(h)
    nat.release(h)
    got = np.frombuffer(data, np_dtype)
    assert shape == [n * (r + 1)]
    assert list(got) == [10 * s + r for s in range(n) for _ in range(r + 1)]
    # alltoall, equal split.
    send = np.arange(2 * n, dtype=np_dtype) + 3 * r
    h = nat.alltoall_async(f"a2a.eq.{code}", send.ctypes.data, [2 * n], code)
    nat.wait(h)
    data, shape = nat.output(h)
    nat.release(h)
    assert list(np.frombuffer(data, np_dtype)) == [2 * r + k + 3 * s for s in range(n)
                                                   for k in range(2)]
    # reducescatter: block r of the sum.
    send = (np.arange(2 * n).reshape(n, 2) + r).astype(np_dtype)
    h = nat.reducescatter_async(f"rs.{code}", send.ctypes.data, [n, 2], code, nat.SUM)
    nat.wait(h)
    shape = nat.output_shape(h)
    out = np.zeros(shape, np_dtype)
    assert nat.output_into(h, out.ctypes.data, out.nbytes) == out.nbytes
    nat.release(h)
    assert shape == [1, 2]
    assert list(out[0]) == [n * (2 * r + c) + n * (n - 1) // 2 for c in range(2)]


@pytest.mark.parametrize("np_dtype,code", DTYPES)
def test_broadcast(np_dtype, code):
    root = size() - 1
    buf = np.full(5, 7 if rank() == root else 0, np_dtype)
    h = nat.broadcast_async(f"bc.{code}", buf.ctypes.data, [5], code, root)
    nat.wait(h)
    nat.release(h)
    assert list(buf) == [7] * 5


def test_errors_are_typed_and_name_the_tensor():
    r = rank()
    x = np.zeros(8, np.float32)
    # A mismatch: ranks give different shapes.
    h = nat.allreduce_async("fc1.weight", x.ctypes.data, x.ctypes.data, [4 + r], nat.FLOAT32,
                            nat.SUM)
    with pytest.raises(kolo.MismatchError) as info:
        nat.wait(h)
    nat.release(h)
    e = info.value
    assert isinstance(e, kolo.KoloError)
    assert e.code == nat.ERR_MISMATCH
    assert "'fc1.weight'" in str(e) and "shape" in str(e), str(e)
    # Bad arguments: raised by the submitting call, naming the tensor.
    with pytest.raises(kolo.InvalidArgumentError) as info:
        nat.broadcast_async("bad.root", x.ctypes.data, [8], nat.FLOAT32, size() + 3)
    assert "'bad.root'" in str(info.value) and info.value.code == nat.ERR_INVALID_ARGUMENT
    assert isinstance(info.value, ValueError)
    with pytest.raises(kolo.InvalidArgumentError, match="'bad.dtype': unknown dtype value 42"):
        nat.allreduce_async("bad.dtype", x.ctypes.data, x.ctypes.data, [8], 42, nat.SUM)
    with pytest.raises(kolo.InvalidArgumentError, match="'bad.rs'"):
        nat.reducescatter_async("bad.rs", x.ctypes.data, [size() * 2 + 1], nat.FLOAT32,
                                nat.SUM)
    with pytest.raises(kolo.InvalidArgumentError, match="unknown handle"):
        nat.wait(987654321)
    with pytest.raises(kolo.InvalidArgumentError, match="process set 99"):
        nat.barrier_async(99)
    h = nat.allreduce_async("no.output", x.ctypes.data, x.ctypes.data, [8], nat.FLOAT32,
                            nat.SUM)
    nat.wait(h)
    with pytest.raises(kolo.InvalidArgumentError, match="no output"):
        nat.output(h)
    nat.release(h)
    with pytest.raises(kolo.InvalidArgumentError):
        nat.release(h)
    assert issubclass(kolo.KoloTimeoutError, TimeoutError)
    assert issubclass(kolo.PeerLostError, kolo.KoloError)


def test_allreduce_submit_and_wait_release():
    """The hot path's entry points: the same results as allreduce_async +
    wait + release, with the shape as a tuple, a list or another sequence."""
    r, n = rank(), size()
    a = np.full((3, 4), r + 1.0, np.float32)
    b = np.full(6, r + 1, np.int64)
    c = np.full(5, r + 1.0, np.float64)
    out = np.zeros_like(c)
    hs = [
        nat.allreduce_submit("fast.tuple", a.ctypes.data, a.ctypes.data, (3, 4), nat.FLOAT32,
                             nat.SUM),
        nat.allreduce_submit("fast.list", b.ctypes.data, b.ctypes.data, [6], nat.INT64,
                             nat.MAX),
        # A numpy array as shape (a sequence of numpy ints), buffers as
        # objects, and every optional argument.
        nat.allreduce_submit("fast.scaled", c, out, np.array([5]), nat.FLOAT64, nat.SUM,
                             2.0, 0.25, 0),
    ]
    assert all(isinstance(h, int) and h > 0 for h in hs)
    for h in hs:
        assert nat.wait_release(h) is None
    assert a[2, 3] == pytest.approx(n * (n + 1) / 2)
    assert list(b) == [n] * 6
    assert out[0] == pytest.approx(2.0 * n * (n + 1) / 2 * 0.25)
    # Released: the handle is unknown to every call.
    for call in (nat.wait, nat.release, nat.wait_release):
        with pytest.raises(kolo.InvalidArgumentError, match="unknown handle") as info:
            call(hs[0])
        assert info.value.code == nat.ERR_INVALID_ARGUMENT
    # A scalar (empty shape) and a shape of many dimensions.
    s = np.full(1, r + 1.0, np.float32)
    h = nat.allreduce_submit("fast.scalar", s.ctypes.data, s.ctypes.data, (), nat.FLOAT32,
                             nat.SUM)
    nat.wait_release(h)
    assert s[0] == pytest.approx(n * (n + 1) / 2)
    m = np.full(2 ** 10, r + 1.0, np.float32)
    h = nat.allreduce_submit("fast.10d", m.ctypes.data, m.ctypes.data, (2,) * 10,
                             nat.FLOAT32, nat.AVG)
    nat.wait_release(h)
    assert m[-1] == pytest.approx((n + 1) / 2)


def test_wait_release_raises_after_releasing():
    r = rank()
    x = np.zeros(8, np.float32)
    h = nat.allreduce_submit("fast.mismatch", x.ctypes.data, x.ctypes.data, (4 + r,),
                             nat.FLOAT32, nat.SUM)
    with pytest.raises(kolo.MismatchError) as info:
        nat.wait_release(h)
    e = info.value
    assert e.code == nat.ERR_MISMATCH and e.code_name == nat.error_name(nat.ERR_MISMATCH)
    assert "'fast.mismatch'" in str(e) and "shape" in str(e), str(e)
    # Released although it failed; a second use says so.
    with pytest.raises(kolo.InvalidArgumentError,
                       match=r"release: unknown handle %d \(already released\)" % h):
        nat.release(h)
    with pytest.raises(kolo.InvalidArgumentError, match="unknown handle") as info:
        nat.wait_release(987654321)
    assert info.value.code == nat.ERR_INVALID_ARGUMENT
    for bad in ("1", None, 2 ** 70):
        with pytest.raises(kolo.InvalidArgumentError, match="wait_release: expected a handle"):
            nat.wait_release(bad)


def test_wait_release_waits_without_the_gil():
    """A pending operation's wait lets other Python threads run."""
    import threading
    import time

    x = np.ones(4, np.float32)
    counted = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    worker = threading.Thread(target=count)
    worker.start()
    try:
        if rank() == 0:
            h = nat.allreduce_submit("fast.gil", x.ctypes.data, x.ctypes.data, (4,),
                                     nat.FLOAT32, nat.SUM)
            before = counted[0]
            nat.wait_release(h)  # rank 1 submits 0.5 s later
            during = counted[0] - before
        else:
            time.sleep(0.5)
            h = nat.allreduce_submit("fast.gil", x.ctypes.data, x.ctypes.data, (4,),
                                     nat.FLOAT32, nat.SUM)
            nat.wait_release(h)
            during = None
    finally:
        stop.set()
        worker.join()
    assert x[0] == size()
    if during is not None:
        assert during > 1000, during


def test_allreduce_submit_bad_arguments():
    x = np.zeros(8, np.float32)
    p = x.ctypes.data
    F, S = nat.FLOAT32, nat.SUM
    cases = [
        (("b.neg", -8, p, (8,), F, S), "'b.neg': send_ptr: not an address"),
        (("b.big", p, 2 ** 70, (8,), F, S), "'b.big': recv_ptr: not an address"),
        (("b.obj", "x", p, (8,), F, S), "'b.obj': send_ptr: expected a data address"),
        ((7, p, p, (8,), F, S), "name must be a str, got int"),
        ((b"b.bytes", p, p, (8,), F, S), "name must be a str, got bytes"),
        (("b.nul\0x", p, p, (8,), F, S), r"'b.nul\\0\.\.\.': name contains a NUL"),
        (("b.shape", p, p, 8, F, S), "'b.shape': shape must be a sequence of ints, got int"),
        (("b.item", p, p, (8, "1"), F, S), r"'b.item': shape\[1\] must be an int, got str"),
        (("b.huge", p, p, (2 ** 64,), F, S), r"shape\[0\] must be an int"),
        (("b.negdim", p, p, (-8,), F, S), "'b.negdim'"),
        (("b.dtype", p, p, (8,), 42, S), "'b.dtype': unknown dtype value 42"),
        (("b.dtype2", p, p, (8,), "float32", S), "'b.dtype2': dtype must be an int"),
        (("b.op", p, p, (8,), F, 9), "'b.op': unknown op value 9"),
        (("b.op2", p, p, (8,), F, 2 ** 40), "'b.op2': op must be an int"),
        (("b.scale", p, p, (8,), F, S, "2"), "'b.scale': prescale must be a float"),
        (("b.set", p, p, (8,), F, S, 1.0, 1.0, 99), "process set 99"),
        (("", p, p, (8,), F, S), "name"),
        (("b.null", 0, p, (8,), F, S), "'b.null'"),
    ]
    for args, message in cases:
        with pytest.raises(kolo.InvalidArgumentError, match=message) as info:
            nat.allreduce_submit(*args)
        assert info.value.code == nat.ERR_INVALID_ARGUMENT, args
        assert isinstance(info.value, ValueError)
    with pytest.raises(TypeError, match="6 to 9 positional arguments"):
        nat.allreduce_submit("b.few", p, p, (8,), F)
    with pytest.raises(TypeError, match="6 to 9 positional arguments"):
        nat.allreduce_submit("b.many", p, p, (8,), F, S, 1.0, 1.0, 0, 0)
    with pytest.raises(TypeError, match="keyword"):
        nat.allreduce_submit("b.kw", p, p, (8,), F, S, prescale=2.0)
    # A name pending twice: the second submission fails, the first runs.
    # Rank 0 submits the name only once the others have tried it twice
    # (after "b.sync"), so it cannot complete in between.
    if size() == 1:
        return
    y = np.zeros(1, np.float32)
    if rank() != 0:
        h = nat.allreduce_submit("b.twice", p, p, (8,), F, S)
        with pytest.raises(kolo.InvalidArgumentError, match="already pending"):
            nat.allreduce_submit("b.twice", p, p, (8,), F, S)
    nat.wait_release(nat.allreduce_submit("b.sync", y.ctypes.data, y.ctypes.data, (1,),
                                          F, S))
    if rank() == 0:
        h = nat.allreduce_submit("b.twice", p, p, (8,), F, S)
    nat.wait_release(h)


def test_not_initialized_in_a_fresh_process():
    code = ("import kolo, kolo._native as n\n"
            "try:\n    n.rank()\nexcept kolo.NotInitializedError as e:\n"
            "    print('NI', e.code, e)\n"
            "try:\n    n.allreduce_async('x', 0, 0, [0], n.FLOAT32, n.SUM)\n"
            "except kolo.NotInitializedError as e:\n    print('NI2', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "NI 2" in out and "NI2" in out and "before kolo_init" in out, out
    code = ("import kolo, kolo._native as n\n"
            "try:\n    n.allreduce_submit('x', 8, 8, (1,), n.FLOAT32, n.SUM)\n"
            "except kolo.NotInitializedError as e:\n    print('NI3', e.code, e)\n"
            "try:\n    n.wait_release(1)\n"
            "except kolo.NotInitializedError as e:\n    print('NI4', e.code, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "NI3 2" in out and "NI4 2" in out and "before kolo_init" in out, out


def test_process_sets():
    r, n = rank(), size()
    everyone = nat.process_set_create(list(reversed(range(n))))
    assert nat.process_set_size(everyone) == n
    assert nat.process_set_rank(everyone) == n - 1 - r
    # The id is the same on every member.
    ids = np.array([everyone, -everyone], np.int64)
    nat.allreduce(ids.ctypes.data, ids.ctypes.data, 2, nat.INT64, nat.MAX)
    assert ids[0] == everyone and -ids[1] == everyone
    # A set of one rank per rank: the same tensor name in each is separate.
    mine = nat.process_set_create([r])
    assert nat.process_set_size(mine) == 1 and nat.process_set_rank(mine) == 0
    x = np.full(4, r + 1, np.int32)
    h1 = nat.allreduce_async("same.name", x.ctypes.data, x.ctypes.data, [4], nat.INT32,
                             nat.SUM, process_set=everyone)
    nat.wait(h1)
    nat.release(h1)
    assert x[0] == n * (n + 1) // 2
    y = np.full(2, 5, np.int32)
    h2 = nat.allreduce_async("same.name", y.ctypes.data, y.ctypes.data, [2], nat.INT32,
                             nat.SUM, process_set=mine)
    nat.wait(h2)
    nat.release(h2)
    assert y[0] == 5
    report = nat.straggler_report(everyone)
    assert len(report) == n and report[0]["operations"] >= 1
    nat.process_set_destroy(mine)
    nat.process_set_destroy(everyone)
    assert nat.process_set_rank(everyone) == -1
    with pytest.raises(kolo.InvalidArgumentError):
        nat.process_set_size(everyone)
    with pytest.raises(kolo.InvalidArgumentError):
        nat.process_set_destroy(0)


def test_join_with_uneven_steps():
    r, n = rank(), size()
    steps = 2 + r
    for s in range(steps):
        v = np.ones(16, np.float32)
        h = nat.allreduce_async(f"join.step.{s}", v.ctypes.data, v.ctypes.data, [16],
                                nat.FLOAT32, nat.SUM)
        nat.wait(h)
        nat.release(h)
        live = sum(1 for q in range(n) if 2 + q > s)
        assert v[0] == live, (s, v[0])
    h = nat.join_async()
    nat.wait(h)
    nat.release(h)
    h = nat.barrier_async()
    nat.wait(h)
    nat.release(h)


def test_timeline_and_straggler_report(tmp_path):
    path = str(tmp_path / f"timeline.{rank()}.json")
    nat.start_timeline(path)
    x = np.ones(4, np.float32)
    h = nat.allreduce_async("traced.tensor", x.ctypes.data, x.ctypes.data, [4], nat.FLOAT32,
                            nat.SUM)
    nat.wait(h)
    nat.release(h)
    nat.stop_timeline()
    with open(path) as f:
        text = f.read()
    assert "traced.tensor" in text
    assert text.lstrip().startswith("[")
    report = nat.straggler_report()
    assert len(report) == size()
    assert set(report[0]) == {"operations", "times_last", "mean_lag_seconds",
                              "max_lag_seconds"}
    assert all(e["operations"] >= 1 for e in report)


def test_synchronous_helpers():
    x = np.full(5, rank() + 1.0, np.float64)
    nat.allreduce(x.ctypes.data, x.ctypes.data, 5, nat.FLOAT64, nat.SUM)
    assert x[4] == size() * (size() + 1) / 2
    b = np.full(3, rank(), np.int64)
    nat.broadcast(b, 3, nat.INT64, 0)
    assert list(b) == [0, 0, 0]
    nat.barrier()
    with pytest.raises(kolo.InvalidArgumentError, match="dtype value 9"):
        nat.allreduce(x.ctypes.data, x.ctypes.data, 5, 9, nat.SUM)

"""kolo.torch._tensor_reader (python/native/torch_tensor_reader.cc): the C
fast path of allreduce_async_ reading tensors through torch's C++ headers
against reading them through their Python attributes. The same tensors take
the fast path, with the same results, either way; the reader's dtype codes
are kolo.torch's; it is installed in a build that has it, and only for the
torch it was built for.

Run on 2 ranks:
  build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_tensor_reader.py
KOLO_TEST_TENSOR_READER_BUILT=1 (set by CTest when the build made the
module) makes a missing or inactive reader a failure.
"""

import os
import subprocess
import sys

import pytest
import torch

import kolo.torch as hvd
from kolo import _native, _ops
from kolo.torch import collectives
from test_torch_fast_path import expected, rank_values

try:
    from kolo.torch import _tensor_reader
except ImportError:
    _tensor_reader = None

BUILT = os.environ.get("KOLO_TEST_TENSOR_READER_BUILT") == "1"
needs_reader = pytest.mark.skipif(_tensor_reader is None and not BUILT,
                                  reason="this build has no kolo.torch._tensor_reader")
DTYPES = list(collectives._NATIVE_DTYPES)


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    hvd.init()
    yield


@pytest.fixture(params=["native", "attributes"])
def reader(request):
    """Runs a test with the native reader installed, and again without it;
    restores kolo.torch's own choice after."""
    was_active = hvd._native_reader_active()
    if request.param == "native":
        if _tensor_reader is None:
            pytest.skip("this build has no kolo.torch._tensor_reader")
        _native.set_tensor_reader(_tensor_reader.reader)
    else:
        _native.set_tensor_reader(None)
    yield request.param
    _native.set_tensor_reader(_tensor_reader.reader if was_active else None)


def test_reader_is_active_in_this_build():
    if not BUILT and _tensor_reader is None:
        assert not hvd._native_reader_active()
        pytest.skip("this build has no kolo.torch._tensor_reader")
    assert _tensor_reader is not None, "the build made kolo.torch._tensor_reader"
    assert _tensor_reader.TORCH_VERSION == torch.__version__
    assert hvd._native_reader_active(), collectives._tensor_reader_state
    assert collectives._tensor_reader_state.startswith("on:")


def all_dtypes():
    return sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)


@needs_reader
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", all_dtypes(), ids=str)
def test_dtype_codes_are_kolo_torchs(dtype):
    try:
        t = torch.zeros(2, 3, dtype=dtype)
    except (RuntimeError, TypeError):
        t = torch._empty_affine_quantized([2, 3], scale=1.0, zero_point=0, dtype=dtype)
    code = collectives._NATIVE_DTYPES.get(dtype)
    want = None if code is None else (code, t.data_ptr(), (2, 3))
    assert _tensor_reader.read(t) == want


@needs_reader
def test_what_the_reader_leaves_to_the_attributes():
    class Sub(torch.Tensor):
        pass

    base = torch.zeros(4, 6)
    big = torch.zeros(1, 1, 1, 1, 1, 1, 1, 1, 2)
    for what, obj in [
        ("non-contiguous", base[:, ::2]),
        ("subclass", torch.zeros(3).as_subclass(Sub)),
        ("9 dimensions", big),
        ("sparse", torch.zeros(2, 2).to_sparse()),
        ("meta device", torch.zeros(2, device="meta")),
        ("bool", torch.zeros(2, dtype=torch.bool)),
        ("not a tensor", [1.0]),
        ("None", None),
        ("the type itself", torch.Tensor),
    ]:
        assert _tensor_reader.read(obj) is None, what
    eight = big[..., 0]
    assert _tensor_reader.read(eight) == (collectives._NATIVE_DTYPES[torch.float32],
                                          eight.data_ptr(), (1,) * 8)
    p = torch.nn.Parameter(torch.zeros(5))
    assert _tensor_reader.read(p) == (collectives._NATIVE_DTYPES[torch.float32],
                                      p.data_ptr(), (5,))
    e = torch.empty(0, 3)
    assert _tensor_reader.read(e) == (collectives._NATIVE_DTYPES[torch.float32], 0, (0, 3))


def submit(x, name, fast, op=hvd.Sum):
    h = hvd.allreduce_async_(x, name=name, op=op)
    assert type(h) is (_native.TensorHandle if fast else _ops.Handle), name
    assert hvd.synchronize(h) is x
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_and_shape(reader, dtype):
    for shape in [(), (0,), (7,), (2, 3, 4), (1,) * 8]:
        x = rank_values(shape, dtype)
        submit(x, "reader.%s.%s.%s" % (reader, dtype, shape), True)
        assert x.dtype is dtype
        assert torch.equal(x, expected(shape, dtype, hvd.Sum)), shape


def test_average_and_max(reader):
    for op in (hvd.Average, hvd.Max):
        x = rank_values((3, 3), torch.float64)
        submit(x, "reader.%s.op%d" % (reader, op), True, op)
        assert torch.equal(x, expected((3, 3), torch.float64, op))


def test_views_at_an_offset_and_strided(reader):
    big = torch.zeros(3, 8)
    row = big[1]  # contiguous, at an offset in its storage
    row.copy_(rank_values((8,)))
    submit(row, "reader.%s.row" % reader, True)
    assert torch.equal(big[1], expected((8,), torch.float32, hvd.Sum))
    assert torch.equal(big[0], torch.zeros(8)) and torch.equal(big[2], torch.zeros(8))
    strided = big[:, ::2]  # falls back to the Python implementation, works
    strided.copy_(rank_values((3, 4)))
    submit(strided, "reader.%s.strided" % reader, False)
    assert torch.equal(big[:, ::2], expected((3, 4), torch.float32, hvd.Sum))
    nine = rank_values((1,) * 8 + (2,))
    submit(nine, "reader.%s.nine" % reader, False)
    assert torch.equal(nine, expected((1,) * 8 + (2,), torch.float32, hvd.Sum))


def test_parameter_and_autograd_tensors(reader):
    p = torch.nn.Parameter(rank_values((2, 2)))
    submit(p, "reader.%s.parameter" % reader, True)
    assert torch.equal(p.detach(), expected((2, 2), torch.float32, hvd.Sum))
    leaf = rank_values((5,)).requires_grad_()
    submit(leaf, "reader.%s.leaf" % reader, True)
    assert leaf.requires_grad and leaf.is_leaf
    assert torch.equal(leaf.detach(), expected((5,), torch.float32, hvd.Sum))
    frozen = torch.nn.Parameter(rank_values((3,)), requires_grad=False)
    submit(frozen, "reader.%s.frozen" % reader, True)
    assert torch.equal(frozen.detach(), expected((3,), torch.float32, hvd.Sum))


def test_subclass_is_read_through_its_attributes(reader):
    # A subclass's __torch_function__ sees the attribute reads whether or not
    # the native reader is installed: the reader leaves subclasses alone.
    seen = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    x = rank_values((4,)).as_subclass(Logged)
    seen.clear()
    submit(x, "reader.%s.subclass" % reader, True)
    assert "data_ptr" in seen and "is_contiguous" in seen, seen
    assert torch.equal(x.as_subclass(torch.Tensor), expected((4,), torch.float32, hvd.Sum))


def import_state(env, before=""):
    """kolo.torch's reader state in a fresh interpreter (no init)."""
    code = (before + "import kolo.torch as hvd; from kolo.torch import collectives as c; "
            "print(hvd._native_reader_active(), c._tensor_reader_state)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, **env), timeout=120)
    return run.returncode, (run.stdout + run.stderr).strip().splitlines()[-1]


@needs_reader
def test_the_environment_and_the_torch_version_decide():
    assert import_state({"KOLO_TORCH_NATIVE_READER": "0"}) == (
        0, "False off: KOLO_TORCH_NATIVE_READER=0")
    rc, line = import_state({"KOLO_TORCH_NATIVE_READER": "1"})
    assert (rc, line.split(":")[0]) == (0, "True on")
    rc, line = import_state({"KOLO_TORCH_NATIVE_READER": "yes"})
    assert rc != 0 and "KOLO_TORCH_NATIVE_READER='yes': expected 0" in line, line
    rc, line = import_state({}, "import torch; torch.__version__ = '0.0.1'; ")
    assert (rc, line) == (0, "False off: kolo.torch._tensor_reader was built for torch "
                          "%s, this is torch 0.0.1" % torch.__version__)


def test_set_tensor_reader_refuses_anything_but_its_capsule():
    import datetime  # a module with a capsule of another name
    was_active = hvd._native_reader_active()
    try:
        for bad in (5, "reader", datetime.datetime_CAPI):
            with pytest.raises(TypeError) as error:
                _native.set_tensor_reader(bad)
            assert str(error.value).startswith(
                "set_tensor_reader: expected None or a capsule named "
                "'kolo.torch._tensor_reader.read_v1', got "), error.value
            assert hvd._native_reader_active() == was_active  # unchanged
        _native.set_tensor_reader(None)
        assert not hvd._native_reader_active()
    finally:
        _native.set_tensor_reader(_tensor_reader.reader if was_active else None)
    assert hvd._native_reader_active() == was_active

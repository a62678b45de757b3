"""kolo.torch on CUDA tensors (docs/gpu.md, "kolo.torch").

Run on 2 or more ranks:
  build/bin/kolorun -np 2 /usr/bin/python3 -m pytest tests/python/test_torch_cuda.py

The first group runs everywhere: the rules that decide where a call's
tensors live (kolo.torch.device) and the errors of a build or machine that
cannot take CUDA tensors. The second group needs a GPU and a kolo built
with CUDA (it skips, saying which is missing, elsewhere; scripts/gpu-check.sh
runs it on 2 and 3 ranks sharing one GPU): every collective, dtype and op
on CUDA tensors against the same call on CPU tensors, element by element;
DistributedOptimizer, fp16 compression, SyncBatchNorm and the broadcasts of
a model on the GPU against the same on the CPU.
"""

import pytest
import torch

import kolo
import kolo.torch as hvd
from kolo import _native
from kolo.torch import device as kdevice

ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
              torch.int32, torch.int64, torch.uint8]
OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]
CPU, CUDA0, CUDA1 = torch.device("cpu"), torch.device("cuda", 0), torch.device("cuda", 1)


@pytest.fixture(scope="module", autouse=True)
def kolo_init():
    hvd.init()
    yield


def _gpu_missing():
    if not hvd.cuda_built():
        return "kolo built without CUDA"
    if not torch.cuda.is_available():
        return "no CUDA device for torch"
    return None


needs_gpu = pytest.mark.skipif(_gpu_missing() is not None,
                               reason=str(_gpu_missing()))


# --- everywhere: the device rules ------------------------------------------------

def test_cpu_calls_have_no_device():
    assert kdevice.common_device([("a", CPU), ("b", CPU)], "x") is None
    assert kdevice.common_device([], "x") is None


def test_a_mix_names_the_tensor_that_differs():
    with pytest.raises(kolo.InvalidArgumentError) as info:
        kdevice.common_device([("g_1of3", CUDA0), ("g_2of3", CUDA0), ("g_3of3", CPU)],
                              "grouped_allreduce")
    msg = str(info.value)
    assert "grouped_allreduce 'g_3of3': tensor is on cpu, but 'g_1of3' is on cuda:0" \
        in msg, msg
    with pytest.raises(kolo.InvalidArgumentError) as info:
        kdevice.common_device([("a", CUDA0), ("b", CUDA1)], "grouped_allgather")
    assert "'b': tensor is on cuda:1, but 'a' is on cuda:0" in str(info.value)
    # cuda and cuda:0 are one device: no error about the mix.
    named = [("a", torch.device("cuda")), ("b", CUDA0)]
    if kdevice.missing_device_path() is None:
        assert kdevice.common_device(named, "x").type == "cuda"
    else:
        with pytest.raises(kolo.InvalidArgumentError, match="'a': tensor is on cuda:0, but"):
            kdevice.common_device(named, "x")


def test_other_devices_are_refused_by_name():
    with pytest.raises(kolo.InvalidArgumentError,
                       match="allgather 'm': tensor is on meta; kolo's collectives take"):
        kdevice.common_device([("m", torch.device("meta"))], "allgather")


def test_cuda_without_a_device_path_says_why():
    why = kdevice.missing_device_path()
    if why is None:
        pytest.skip("this build has the device path")
    with pytest.raises(kolo.InvalidArgumentError) as info:
        kdevice.common_device([("w", CUDA0)], "allreduce")
    msg = str(info.value)
    assert "allreduce 'w': tensor is on cuda:0" in msg and why in msg and ".cpu()" in msg
    assert "no CUDA support" in why


def test_grouped_mix_is_refused_before_anything_runs():
    # A meta tensor in a group of CPU tensors: refused by name before any
    # member is submitted, so the next named operation pairs up as usual.
    with pytest.raises(kolo.InvalidArgumentError, match="'mix_2of2': tensor is on meta"):
        hvd.grouped_allgather([torch.ones(2), torch.ones(2, device="meta")], name="mix")
    with pytest.raises(kolo.InvalidArgumentError, match="'gmix_2of2'"):
        hvd.grouped_allreduce([torch.ones(2), torch.ones(2, device="meta")], name="gmix")
    out = hvd.allreduce(torch.ones(3), name="after.mix", op=hvd.Sum)
    assert torch.equal(out, torch.full((3,), float(hvd.size())))


def test_native_device_call_without_a_device_fails_by_name():
    # The binding's _cuda submission reaches libkolo (or says it cannot):
    # on a machine without a usable GPU it is refused, no handle made.
    if _gpu_missing() is None:
        pytest.skip("a GPU is there: test_every_collective_on_cuda covers the call")
    with pytest.raises(kolo.InvalidArgumentError) as info:
        _native.allreduce_async_cuda("nodev", 0x1000, 0x1000, [4], _native.FLOAT32,
                                     _native.SUM, 1.0, 1.0, 0, 0, 0)
    msg = str(info.value)
    assert "allreduce" in msg and ("CUDA" in msg or "device" in msg), msg
    out = hvd.allreduce(torch.ones(2), name="after.nodev", op=hvd.Sum)
    assert torch.equal(out, torch.full((2,), float(hvd.size())))


# --- with a GPU: CUDA tensors against CPU tensors ---------------------------------

def rank_input(r, shape, dtype, low=1, high=4):
    g = torch.Generator().manual_seed(2000 + r)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def _same(gpu, cpu, what):
    assert gpu.is_cuda, what
    got = gpu.cpu()
    assert got.dtype == cpu.dtype and got.shape == cpu.shape, what
    if got.dtype.is_floating_point:
        assert torch.equal(got.isnan(), cpu.isnan()), what
        got, cpu = torch.nan_to_num(got), torch.nan_to_num(cpu)
    assert torch.equal(got, cpu), "%s: %s vs %s" % (what, got, cpu)


@needs_gpu
def test_cuda_built_and_device_count():
    assert hvd.cuda_built() is True
    count, reason = _native.cuda_devices()
    assert count == torch.cuda.device_count() and reason == ""


@needs_gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_collective_on_cuda(dtype):
    r, n = hvd.rank(), hvd.size()
    dev = torch.device("cuda", 0)
    tag = str(dtype).split(".")[1]
    x = rank_input(r, (2 * n + 1, 3), dtype)
    for op in OPS:
        if op == hvd.Average and dtype in (torch.int32, torch.int64, torch.uint8):
            continue
        name = "cu.ar.%s.%d" % (tag, op)
        want = hvd.allreduce(x, op=op, name=name + ".cpu")
        _same(hvd.allreduce(x.to(dev), op=op, name=name), want, name)
        y = x.to(dev)
        hvd.allreduce_(y, op=op, name=name + ".inplace")
        _same(y, want, name + " in place")
        # Non-contiguous input: through a contiguous copy, written back.
        z = x.t().contiguous().to(dev).t()
        hvd.allreduce_(z, op=op, name=name + ".strided")
        _same(z, want, name + " strided")
        parts = [x[:2], x[2:]]
        wants = hvd.grouped_allreduce(parts, op=op, name=name + ".gcpu")
        gots = hvd.grouped_allreduce([p.to(dev) for p in parts], op=op, name=name + ".g")
        for g, w in zip(gots, wants):
            _same(g, w, name + " grouped")
        rows = x[:n + 1]  # uneven: Horovod's split
        _same(hvd.reducescatter(rows.to(dev), op=op, name=name + ".rs"),
              hvd.reducescatter(rows, op=op, name=name + ".rscpu"), name + " rs")
    scaled = hvd.allreduce(x.to(dev), op=hvd.Sum, prescale_factor=2.0,
                           postscale_factor=0.5, name="cu.scale." + tag)
    _same(scaled, hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5,
                                name="cu.scale.cpu." + tag), "scaled")
    mine = rank_input(r, (r + 1, 2), dtype)  # first dimension differs per rank
    _same(hvd.allgather(mine.to(dev), name="cu.ag." + tag),
          hvd.allgather(mine, name="cu.ag.cpu." + tag), "allgather")
    ga = hvd.grouped_allgather([mine.to(dev), x.to(dev)], name="cu.gag." + tag)
    for g, w in zip(ga, hvd.grouped_allgather([mine, x], name="cu.gag.cpu." + tag)):
        _same(g, w, "grouped allgather")
    _same(hvd.broadcast(x.to(dev), root_rank=n - 1, name="cu.bc." + tag),
          hvd.broadcast(x, root_rank=n - 1, name="cu.bc.cpu." + tag), "broadcast")
    b = x.to(dev)
    hvd.broadcast_(b, root_rank=0, name="cu.bc_." + tag)
    _same(b, hvd.broadcast(x, root_rank=0, name="cu.bc_.cpu." + tag), "broadcast_")
    splits = [(i + r) % 3 for i in range(n)]
    src = rank_input(r, (sum(splits), 2), dtype)
    got, got_splits = hvd.alltoall(src.to(dev), splits=splits, name="cu.a2a." + tag)
    want, want_splits = hvd.alltoall(src, splits=splits, name="cu.a2a.cpu." + tag)
    _same(got, want, "alltoall")
    assert torch.equal(got_splits.cpu(), want_splits)
    for g, w in zip(hvd.grouped_reducescatter([x.to(dev)], op=hvd.Sum,
                                              name="cu.grs." + tag),
                    hvd.grouped_reducescatter([x], op=hvd.Sum, name="cu.grs.cpu." + tag)):
        _same(g, w, "grouped reducescatter")


@needs_gpu
def test_byte_dtypes_and_empty_tensors_on_cuda():
    dev = torch.device("cuda", 0)
    for dtype in (torch.bool, torch.int8, torch.complex64):
        x = rank_input(hvd.rank(), (2, 3), torch.int64).to(dtype)
        tag = str(dtype).split(".")[1]
        _same(hvd.allgather(x.to(dev), name="cu.bytes.ag." + tag),
              hvd.allgather(x, name="cu.bytes.ag.cpu." + tag), "bytes allgather")
        _same(hvd.broadcast(x.to(dev), 0, name="cu.bytes.bc." + tag),
              hvd.broadcast(x, 0, name="cu.bytes.bc.cpu." + tag), "bytes broadcast")
    e = torch.empty(0, 4, device=dev)
    assert hvd.allreduce(e, name="cu.empty").shape == (0, 4)
    assert hvd.allgather(e, name="cu.empty.ag").shape == (0, 4)


@needs_gpu
def test_results_follow_the_callers_stream():
    # Inputs written by a kernel still running on a side stream must be
    # read after it: kolo records an event on the current stream.
    dev = torch.device("cuda", 0)
    side = torch.cuda.Stream(dev)
    with torch.cuda.stream(side):
        big = torch.ones(4096, 4096, device=dev)
        for _ in range(20):
            big = big * 1.0001  # keeps the stream busy
        x = torch.full((1000,), float(hvd.rank() + 1), device=dev) + big[0, 0] * 0
        out = hvd.allreduce(x, op=hvd.Sum, name="cu.stream")
    n = hvd.size()
    assert torch.equal(out.cpu(), torch.full((1000,), float(n * (n + 1) // 2)))


@needs_gpu
def test_the_timeline_names_the_device_path(tmp_path):
    # The runtime's COLLECTIVE spans of device operations say which path ran
    # ("ipc", "nccl", "hier" or "staged"); KOLO_DEVICE_PATH, when it forces
    # one, is the one named.
    import json
    import os
    dev = torch.device("cuda", 0)
    path = str(tmp_path / f"timeline_{hvd.rank()}.json")
    hvd.start_timeline(path)
    x = torch.full((4096,), float(hvd.rank() + 1), device=dev)
    out = hvd.allreduce(x, op=hvd.Sum, name="cu.timeline.ar")
    b = hvd.broadcast(torch.full((16,), float(hvd.rank()), device=dev), root_rank=0,
                      name="cu.timeline.bc")
    hvd.stop_timeline()
    n = hvd.size()
    assert torch.equal(out.cpu(), torch.full((4096,), float(n * (n + 1) // 2)))
    assert torch.equal(b.cpu(), torch.zeros(16))
    if not os.path.exists(path):
        return  # this rank writes no timeline
    text = open(path).read()
    paths = set()
    for line in text.splitlines():
        if '"path":"' in line:
            paths.add(line.split('"path":"', 1)[1].split('"', 1)[0])
    assert paths, "no COLLECTIVE span names a path: " + text[:2000]
    assert paths <= {"ipc", "nccl", "hier", "staged"}, paths
    forced = os.environ.get("KOLO_DEVICE_PATH", "auto")
    if forced in ("ipc", "nccl", "hier", "staged"):
        assert paths == {forced}, (forced, paths)


@needs_gpu
def test_real_mixes_are_refused():
    dev = torch.device("cuda", 0)
    with pytest.raises(kolo.InvalidArgumentError,
                       match="'mixed_2of2': tensor is on cpu, but 'mixed_1of2' is on cuda:0"):
        hvd.grouped_allreduce([torch.ones(2, device=dev), torch.ones(2)], name="mixed")
    with pytest.raises(kolo.InvalidArgumentError, match="'mixedg_2of2'"):
        hvd.grouped_allgather([torch.ones(2, device=dev), torch.ones(2)], name="mixedg")


def _model(dev):
    torch.manual_seed(7)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), hvd.SyncBatchNorm(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5)).to(dev).double()


def _train(dev, compression, steps=3):
    model = _model(dev)
    if hvd.rank() != 0:  # broadcast_parameters must undo this
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    g = torch.Generator().manual_seed(100 + hvd.rank())
    for _ in range(steps):
        x = torch.randn(4, 3, 8, 8, generator=g, dtype=torch.float64).to(dev)
        y = torch.randint(0, 5, (4,), generator=g).to(dev)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return {k: v.cpu() for k, v in model.state_dict().items()}


@needs_gpu
@pytest.mark.parametrize("compression", ["none", "fp16"])
def test_distributed_optimizer_and_sync_batch_norm_on_cuda(compression):
    comp = getattr(hvd.Compression, compression)
    gpu = _train(torch.device("cuda", 0), comp)
    cpu = _train(CPU, comp)
    # Same data, same reductions; the GPU's float64 convolutions round a
    # little otherwise, which float16 compression can turn into one float16
    # step of a gradient.
    rtol, atol = (1e-6, 1e-8) if compression == "none" else (2e-3, 1e-4)
    for k in cpu:
        assert torch.allclose(gpu[k].double(), cpu[k].double(), rtol=rtol, atol=atol), k
    # Every rank ends with the same model.
    for k, v in gpu.items():
        _same(hvd.broadcast(v.cuda(), 0, name="cu.final." + compression + k), v, k)

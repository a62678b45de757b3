"""Where the tensors of one kolo.torch collective live: the CPU, or one CUDA
device and the caller's stream (docs/gpu.md, "kolo.torch").

Rules, checked before anything is submitted:

- Every tensor of one call is on the CPU, or every one is a CUDA tensor of
  the same device. A mix (CPU and CUDA, or two CUDA devices) raises
  InvalidArgumentError naming the tensor that differs, its device and the
  device of the call's first tensor.
- Other devices (meta, mps, xpu, ...) are refused by name.
- A CUDA tensor needs a kolo built with CUDA; else the error says so and
  to move the tensor with .cpu(). (No usable device, or a device that does
  not exist: libkolo's error, naming the operation and the cause.)

A call on CUDA tensors goes to the runtime's ``*_async_cuda`` form with
(device index, the address of ``torch.cuda.current_stream(device)``): kolo
reads the inputs after the work already enqueued on that stream and its
results are ordered before the work enqueued on it after the call (the
core's contract, include/kolo/runtime.h). A backward hook sees the stream
autograd runs that gradient's backward on, so gradients are read after the
kernels that produced them.
"""

import torch

from kolo import _native
from kolo.torch import errors

_CPU = torch.device("cpu")


def missing_device_path():
    """Why this build cannot take CUDA tensors, or None when it can (a
    machine without a usable device is libkolo's to report, by name)."""
    if not _native.cuda_built():
        return "this kolo build has no CUDA support (KOLO_WITH_CUDA was off)"
    return None


def common_device(named_devices, what):
    """The one device of a call: ``named_devices`` is a list of (tensor
    name, torch.device), the call's tensors in order. Returns None when all
    are CPU devices, else the CUDA device shared by all; raises
    InvalidArgumentError naming the first tensor that breaks the rules
    (module docstring)."""
    first_name, first = None, None
    for name, dev in named_devices:
        if dev.type not in ("cpu", "cuda"):
            raise errors.invalid_argument(
                "%s '%s': tensor is on %s; kolo's collectives take CPU tensors "
                "and CUDA tensors" % (what, name, dev))
        if first is None:
            first_name, first = name, dev
            continue
        if dev.type != first.type or (dev.type == "cuda" and _index(dev) != _index(first)):
            raise errors.invalid_argument(
                "%s '%s': tensor is on %s, but '%s' is on %s; every tensor of one "
                "call must be on the same device (all on the CPU, or all on one "
                "CUDA device)" % (what, name, _show(dev), first_name, _show(first)))
    if first is None or first.type == "cpu":
        return None
    why = missing_device_path()
    if why is not None:
        raise errors.invalid_argument(
            "%s '%s': tensor is on %s, but %s; move it to the CPU with .cpu()" %
            (what, first_name, _show(first), why))
    return first


def _index(dev):
    return dev.index if dev.index is not None else 0


def _show(dev):
    return "cuda:%d" % _index(dev) if dev.type == "cuda" else str(dev)


def memory(dev):
    """(device index, current stream address) for the ``_cuda`` calls."""
    index = _index(dev)
    return index, torch.cuda.current_stream(index).cuda_stream


def memory_of(tensor, name, what):
    """None for a CPU tensor; (device, stream) for a CUDA tensor (the call's
    only tensor); raises as common_device does."""
    if tensor.is_cpu:
        return None
    return memory(common_device([(name, tensor.device)], what))


def memory_of_all(tensors, names, what):
    """memory_of for the tensors of one grouped call."""
    dev = common_device([(n, t.device) for t, n in zip(tensors, names)], what)
    return None if dev is None else memory(dev)


_empty = {}


def empty_pointer(index):
    """A valid device address for an empty CUDA tensor (torch gives those a
    null pointer, which the runtime refuses; zero bytes are read or
    written through it)."""
    buf = _empty.get(index)
    if buf is None:
        buf = _empty[index] = torch.zeros(8, dtype=torch.float64,
                                          device=torch.device("cuda", index))
    return buf.data_ptr()


def output_tensor(native_handle, shape, dtype, index):
    """The output of a finished ``_cuda`` allgather, alltoall or
    reducescatter (host memory that kolo allocated, include/kolo/runtime.h)
    as a new CUDA tensor of ``shape`` and ``dtype`` on device ``index``:
    copied into pinned memory, then to the device on the current stream
    (torch's pinned-memory cache keeps that block until the copy has run)."""
    host = torch.empty(shape, dtype=dtype, pin_memory=True)
    nbytes = host.numel() * host.element_size()
    if nbytes:
        _native.output_into(native_handle, host.data_ptr(), nbytes)
    return host.to(torch.device("cuda", index), non_blocking=True)

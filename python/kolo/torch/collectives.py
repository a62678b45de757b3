"""Horovod's collective operations on torch tensors, through kolo's runtime.

Every operation is submitted to the native runtime (``kolo._native``) by name
and returns a handle at once; ``synchronize(handle)`` waits and returns the
result, ``poll(handle)`` says whether it is done. The blocking forms
(``allreduce``, ``allgather``, ...) are submit-then-synchronize.

Tensors reach the runtime as data pointers. This module guarantees what the
runtime asks of its callers: every buffer handed over stays referenced (so
alive) until the operation is synchronized, and nothing in this module writes
to it meanwhile. Non-contiguous tensors are copied into a contiguous buffer;
in-place operations copy the result back into the caller's tensor after the
wait. Empty tensors pass a pointer to a small private buffer (torch gives
them a null pointer, which the runtime rejects; nothing is read or written
through it).

Dtypes: float32, float64, float16, bfloat16, int32, int64 and uint8 go to the
runtime as such. Operations that only move bytes (allgather, broadcast,
alltoall) also take every other dtype (bool, int8, int16, complex), sent as
their raw bytes; reductions on those raise InvalidArgumentError.

Names: an operation without a name gets ``<kind>.noname.<n>``, n counting
calls on this rank, as Horovod does; ranks must issue unnamed operations in
the same order. Pending names must be unique (the runtime rejects a second
pending operation of the same name).

Thread-safety: submission, poll and synchronize may be called from any
thread (autograd hooks call them from the backward pass); one handle must be
synchronized by one thread.
"""

import collections
import itertools
import threading
import time

import torch

from kolo import _native

from kolo.torch import errors
from kolo.torch.process_sets import _native_id, global_process_set
from kolo.torch.compression import Compression

# Reductions: Horovod's names, kolo's codes. Adasum has no native code.
Sum = _native.SUM
Average = _native.AVG
Min = _native.MIN
Max = _native.MAX
Product = _native.PROD
Adasum = -100  # any value distinct from the native codes

_REDUCE_OPS = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max",
               Product: "Product"}

_NATIVE_DTYPES = {
    torch.float32: _native.FLOAT32,
    torch.float64: _native.FLOAT64,
    torch.float16: _native.FLOAT16,
    torch.bfloat16: _native.BFLOAT16,
    torch.int32: _native.INT32,
    torch.int64: _native.INT64,
    torch.uint8: _native.UINT8,
}

# Pointer for empty tensors (never read or written: zero bytes).
_EMPTY_BUFFER = torch.zeros(8, dtype=torch.float64)

_name_counters = collections.defaultdict(itertools.count)  # per process set
_handle_counter = itertools.count(1)
_lock = threading.Lock()
_operations = {}  # Python handle -> _Operation


class _Operation:
    """One submitted operation: its native handles, the tensors that must
    stay alive until it completes, and how to build its result."""

    __slots__ = ("native_handles", "keep_alive", "finish")

    def __init__(self, native_handles, keep_alive, finish):
        self.native_handles = native_handles
        self.keep_alive = keep_alive
        self.finish = finish


def _auto_name(kind, name, ps_id):
    """``name``, or ``<kind>.noname.<n>`` with n counting this rank's unnamed
    operations on the process set (per set, so that operations on a set
    some ranks do not belong to leave the others' counts alone)."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise errors.invalid_argument(
                "%s: name must be a non-empty string, got %r" % (kind, name))
        return name
    return "%s.noname.%d" % (kind, next(_name_counters[ps_id]))


def _register(native_handles, keep_alive, finish):
    handle = next(_handle_counter)
    with _lock:
        _operations[handle] = _Operation(native_handles, keep_alive, finish)
    return handle


def _check_tensor(tensor, what, name):
    if not isinstance(tensor, torch.Tensor):
        raise errors.invalid_argument(
            "%s '%s': expected a torch.Tensor, got %s" %
            (what, name, type(tensor).__name__))
    if tensor.device.type != "cpu":
        raise errors.invalid_argument(
            "%s '%s': tensor is on %s, but this kolo build has no CUDA "
            "support; move it to the CPU with .cpu()" %
            (what, name, tensor.device))
    if tensor.layout != torch.strided:
        raise errors.invalid_argument(
            "%s '%s': %s tensors are not supported; convert with .to_dense()" %
            (what, name, tensor.layout))


def _reduce_dtype(tensor, what, name):
    code = _NATIVE_DTYPES.get(tensor.dtype)
    if code is None:
        raise errors.invalid_argument(
            "%s '%s': dtype %s cannot be reduced by kolo (supported: %s)" %
            (what, name, tensor.dtype,
             ", ".join(str(d) for d in _NATIVE_DTYPES)))
    return code


def _ptr(tensor):
    return tensor.data_ptr() if tensor.numel() > 0 else _EMPTY_BUFFER.data_ptr()


def _contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _resolve_op(average, op, what):
    if average is not None:
        if op is not None:
            raise errors.invalid_argument(
                "%s: give either op or the deprecated average, not both" % what)
        op = Average if average else Sum
    if op is None:
        op = Average
    if op == Adasum:
        raise errors.adasum_not_supported(what)
    if op not in _REDUCE_OPS:
        raise errors.invalid_argument("%s: unknown op %r" % (what, op))
    return op


def _fill_from_output(native_handle, target):
    """Copies an operation's native output into the contiguous ``target``."""
    nbytes = target.numel() * target.element_size()
    if nbytes:
        _native.output_into(native_handle, target.data_ptr(), nbytes)
    return target


def _byte_rows(tensor):
    """A contiguous tensor as uint8 rows [d0, bytes per row], sharing memory."""
    rows = tensor.shape[0]
    row_bytes = int(torch.Size(tensor.shape[1:]).numel()) * tensor.element_size()
    flat = tensor.reshape(-1)
    if tensor.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return flat.reshape(rows, row_bytes)


def _output_tensor(native_handle, dtype, row_shape=None):
    """The native output of an operation as a new tensor of ``dtype``. With
    ``row_shape`` the output is byte rows [rows, bytes per row] (a dtype sent
    as bytes) and becomes [rows, *row_shape]."""
    shape = list(_native.output_shape(native_handle))
    if row_shape is None:
        return _fill_from_output(native_handle, torch.empty(shape, dtype=dtype))
    out = torch.empty([shape[0]] + list(row_shape), dtype=dtype)
    return _fill_from_output(native_handle, out)


# --- completion --------------------------------------------------------------

def poll(handle):
    """True when the operation behind ``handle`` has finished (successfully
    or not); synchronize() then returns at once."""
    with _lock:
        op = _operations.get(handle)
    if op is None:
        raise errors.invalid_argument("poll: unknown handle %r" % (handle,))
    return all(_native.poll(h) for h in op.native_handles)


def synchronize(handle):
    """Waits for the operation and returns its result (the output tensor, or
    a list for grouped operations). Raises the runtime's error (a
    kolo.KoloError subclass) if the operation failed."""
    with _lock:
        op = _operations.pop(handle, None)
    if op is None:
        raise errors.invalid_argument(
            "synchronize: unknown handle %r (already synchronized?)" % (handle,))
    try:
        for h in op.native_handles:
            _native.wait(h)
        return op.finish()
    finally:
        for h in op.native_handles:
            _native.release(h)


# --- allreduce ---------------------------------------------------------------

def _allreduce_submit(tensor, output, name, op, prescale, postscale, ps_id, what):
    code = _reduce_dtype(tensor, what, name)
    return _native.allreduce_async(name, _ptr(tensor), _ptr(output),
                                   list(tensor.shape), code, op,
                                   float(prescale), float(postscale), ps_id)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce into a new tensor; returns a handle for
    synchronize() / poll()."""
    what = "allreduce"
    op = _resolve_op(average, op, what)
    ps_id = _native_id(process_set, what)
    name = _auto_name(what, name, ps_id)
    _check_tensor(tensor, what, name)
    src = _contiguous(tensor.detach())
    out = torch.empty(src.shape, dtype=src.dtype)
    h = _allreduce_submit(src, out, name, op, prescale_factor,
                          postscale_factor, ps_id, what)
    return _register([h], (src, out), lambda: out)


def _inplace_target(tensor):
    """What an in-place operation on ``tensor`` writes: the tensor's own
    storage when it is contiguous, else a contiguous copy; and the function
    that finishes it (copies the copy back) and returns ``tensor``."""
    buf = tensor.detach()
    if buf.is_contiguous():
        return buf, lambda: tensor

    buf = buf.contiguous()

    def finish():
        with torch.no_grad():
            tensor.copy_(buf)
        return tensor

    return buf, finish


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of ``tensor``; synchronize() returns the
    same tensor holding the result."""
    what = "allreduce"
    op = _resolve_op(average, op, what)
    ps_id = _native_id(process_set, what)
    name = _auto_name(what, name, ps_id)
    _check_tensor(tensor, what, name)
    buf, finish = _inplace_target(tensor)
    h = _allreduce_submit(buf, buf, name, op, prescale_factor,
                          postscale_factor, ps_id, what)
    return _register([h], (tensor, buf), finish)


class _AllreduceFunction(torch.autograd.Function):
    """Differentiable allreduce: the gradient is the allreduce (same op and
    scaling) of the output's gradient, as in Horovod."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(allreduce_async(tensor, name=name, op=op,
                                           prescale_factor=prescale,
                                           postscale_factor=postscale,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, prescale, postscale, process_set = ctx.args
        if op not in (Sum, Average):
            raise errors.invalid_argument(
                "allreduce: the gradient of %s is not defined" % _REDUCE_OPS[op])
        grad = synchronize(allreduce_async(grad_output, op=op,
                                           prescale_factor=prescale,
                                           postscale_factor=postscale,
                                           process_set=process_set))
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Reduces ``tensor`` over the ranks of ``process_set`` (Average by
    default) and returns the result as a new tensor. Differentiable for Sum
    and Average."""
    op = _resolve_op(average, op, "allreduce")
    compressed, ctx = compression.compress(tensor)
    if torch.is_grad_enabled() and compressed.requires_grad:
        out = _AllreduceFunction.apply(compressed, name, op, prescale_factor,
                                       postscale_factor, process_set)
    else:
        out = synchronize(allreduce_async(
            compressed, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns ``tensor``."""
    return synchronize(allreduce_async_(
        tensor, average=average, name=name, op=op,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        process_set=process_set))


def _grouped_submit(tensors, outputs, average, name, op, prescale, postscale,
                    process_set, finish_results):
    what = "grouped_allreduce"
    op = _resolve_op(average, op, what)
    ps_id = _native_id(process_set, what)
    base = _auto_name(what, name, ps_id)
    if not tensors:
        raise errors.invalid_argument("%s '%s': no tensors" % (what, base))
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    for t, n in zip(tensors, names):
        _check_tensor(t, what, n)
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise errors.invalid_argument(
            "%s '%s': all tensors of a group must have one dtype, got %s" %
            (what, base, sorted(str(d) for d in dtypes)))
    code = _reduce_dtype(tensors[0], what, base)
    hs = _native.grouped_allreduce_async(
        names, [_ptr(s) for s in tensors], [_ptr(o) for o in outputs],
        [list(s.shape) for s in tensors], code, op, float(prescale),
        float(postscale), ps_id)
    return _register(list(hs), (list(tensors), list(outputs)), finish_results)


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts allreduces of a list of tensors (one dtype) that run together;
    synchronize() returns the list of results."""
    srcs = [_contiguous(t.detach()) if isinstance(t, torch.Tensor) else t
            for t in tensors]
    outs = [torch.empty(s.shape, dtype=s.dtype) if isinstance(s, torch.Tensor)
            else s for s in srcs]
    return _grouped_submit(srcs, outs, average, name, op, prescale_factor,
                           postscale_factor, process_set, lambda: list(outs))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place form of grouped_allreduce_async."""
    tensors = list(tensors)
    bufs = [t.detach() if isinstance(t, torch.Tensor) else t for t in tensors]
    bufs = [b if not isinstance(b, torch.Tensor) or b.is_contiguous()
            else b.contiguous() for b in bufs]

    def finish():
        with torch.no_grad():
            for t, b in zip(tensors, bufs):
                if b.data_ptr() != t.data_ptr() or not t.is_contiguous():
                    t.copy_(b)
        return tensors

    handle = _grouped_submit(bufs, bufs, average, name, op, prescale_factor,
                             postscale_factor, process_set, finish)
    with _lock:
        _operations[handle].keep_alive = (tensors, bufs)
    return handle


def grouped_allreduce(tensors, average=None, name=None,
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Allreduce of a list of tensors in one group; returns new tensors."""
    pairs = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_allreduce_async(
        [p[0] for p in pairs], average=average, name=name, op=op,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        process_set=process_set))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the tensors."""
    return synchronize(grouped_allreduce_async_(
        tensors, average=average, name=name, op=op,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        process_set=process_set))


# --- allgather ---------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: the ranks' tensors concatenated along the first
    dimension (which may differ across ranks). A 0-d tensor counts as [1]."""
    what = "allgather"
    ps_id = _native_id(process_set, what)
    name = _auto_name(what, name, ps_id)
    _check_tensor(tensor, what, name)
    src = _contiguous(tensor.detach())
    if src.dim() == 0:
        src = src.reshape(1)
    dtype = src.dtype
    code = _NATIVE_DTYPES.get(dtype)
    if code is not None:
        h = _native.allgather_async(name, _ptr(src), list(src.shape), code, ps_id)
        return _register([h], src, lambda: _output_tensor(h, dtype))
    rows = _byte_rows(src)
    row_shape = list(src.shape[1:])
    h = _native.allgather_async(name, _ptr(rows), list(rows.shape),
                                _native.UINT8, ps_id)

    def finish():
        return _output_tensor(h, dtype, row_shape)

    return _register([h], (src, rows), finish)


class _AllgatherFunction(torch.autograd.Function):
    """Differentiable allgather: each rank's gradient is its own rows of the
    sum over ranks of the output's gradient."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.process_set = process_set
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        return synchronize(allgather_async(tensor, name=name,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        summed = synchronize(allreduce_async(grad_output, op=Sum, process_set=ps))
        counts = synchronize(allgather_async(
            torch.tensor([ctx.rows], dtype=torch.int64), process_set=ps))
        me = ps.rank() if ps is not None else 0
        offset = int(counts[:me].sum())
        return summed.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's ``tensor`` along dimension 0.
    Differentiable."""
    if torch.is_grad_enabled() and isinstance(tensor, torch.Tensor) \
            and tensor.requires_grad:
        return _AllgatherFunction.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name=name, process_set=process_set))


# --- broadcast ---------------------------------------------------------------

def _broadcast_submit(buf, root_rank, name, ps_id):
    code = _NATIVE_DTYPES.get(buf.dtype)
    if code is not None:
        return _native.broadcast_async(name, _ptr(buf), list(buf.shape), code,
                                       int(root_rank), ps_id), buf
    flat = buf.reshape(-1)
    flat = flat.view(torch.uint8) if buf.dtype != torch.uint8 else flat
    return _native.broadcast_async(name, _ptr(flat), list(flat.shape),
                                   _native.UINT8, int(root_rank), ps_id), flat


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast from ``root_rank`` into a new tensor."""
    what = "broadcast"
    ps_id = _native_id(process_set, what)
    name = _auto_name(what, name, ps_id)
    _check_tensor(tensor, what, name)
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    h, view = _broadcast_submit(out, root_rank, name, ps_id)
    return _register([h], (out, view), lambda: out)


def broadcast_async_(tensor, root_rank, name=None,
                     process_set=global_process_set):
    """Starts an in-place broadcast of ``tensor`` from ``root_rank``."""
    what = "broadcast"
    ps_id = _native_id(process_set, what)
    name = _auto_name(what, name, ps_id)
    _check_tensor(tensor, what, name)
    buf, finish = _inplace_target(tensor)
    h, view = _broadcast_submit(buf, root_rank, name, ps_id)
    return _register([h], (tensor, buf, view), finish)


class _BroadcastFunction(torch.autograd.Function):
    """Differentiable broadcast: the root's gradient is the sum of every
    rank's output gradient; the others get zeros."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name=name,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        summed = synchronize(allreduce_async(grad_output, op=Sum, process_set=ps))
        if ps.rank() != ctx.root_rank:
            summed.zero_()
        return summed, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """``root_rank``'s tensor on every rank, as a new tensor. Differentiable."""
    if torch.is_grad_enabled() and isinstance(tensor, torch.Tensor) \
            and tensor.requires_grad:
        return _BroadcastFunction.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name=name,
                                       process_set=process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name=name,
                                        process_set=process_set))


# --- alltoall ----------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None,
                   process_set=global_process_set):
    """Starts an alltoall. ``splits`` (list or 1-d tensor, one entry per rank
    of the set) says how many rows of dimension 0 go to each rank; None splits
    equally. synchronize() returns the received rows in rank order, and with
    ``splits`` given, also how many rows came from each rank."""
    what = "alltoall"
    ps_id = _native_id(process_set, what)
    name = _auto_name(what, name, ps_id)
    _check_tensor(tensor, what, name)
    src = _contiguous(tensor.detach())
    if src.dim() == 0:
        raise errors.invalid_argument(
            "%s '%s': needs a tensor of at least one dimension" % (what, name))
    split_list = None
    if splits is not None:
        if isinstance(splits, torch.Tensor):
            splits = splits.reshape(-1).tolist()
        split_list = [int(s) for s in splits]
    dtype = src.dtype
    code = _NATIVE_DTYPES.get(dtype)
    row_shape = list(src.shape[1:])
    if code is not None:
        send, shape = src, list(src.shape)
    else:
        send = _byte_rows(src)
        shape, code = list(send.shape), _native.UINT8
    h = _native.alltoall_async(name, _ptr(send), shape, code, split_list, ps_id)
    handles, keep = [h], [src, send]
    if split_list is not None:
        # Received splits: an equal-split alltoall of the send splits.
        sizes = torch.tensor(split_list, dtype=torch.int64)
        try:
            hs = _native.alltoall_async(name + ".splits", _ptr(sizes),
                                        list(sizes.shape), _native.INT64, None,
                                        ps_id)
        except Exception:
            _native.release(h)
            raise
        handles.append(hs)
        keep.append(sizes)

    def finish():
        if code == _native.UINT8 and dtype != torch.uint8:
            out = _output_tensor(h, dtype, row_shape)
        else:
            out = _output_tensor(h, dtype)
        if split_list is None:
            return out
        received = _output_tensor(handles[1], torch.int64).to(torch.int32)
        return out, received

    return _register(handles, keep, finish)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of ``tensor`` to the ranks and gathers theirs: returns
    the received tensor, and with ``splits`` given, (tensor, received_splits)."""
    return synchronize(alltoall_async(tensor, splits=splits, name=name,
                                      process_set=process_set))


# --- reducescatter -----------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average,
                        process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter: reduces ``tensor`` over the ranks and returns
    to each its block of dimension 0 (which must divide by the set size)."""
    what = "reducescatter"
    op = _resolve_op(None, op, what)
    ps_id = _native_id(process_set, what)
    name = _auto_name(what, name, ps_id)
    _check_tensor(tensor, what, name)
    code = _reduce_dtype(tensor, what, name)
    src = _contiguous(tensor.detach())
    if prescale_factor != 1.0:
        src = src * prescale_factor
    if src.dim() == 0:
        raise errors.invalid_argument(
            "%s '%s': needs a tensor of at least one dimension" % (what, name))
    h = _native.reducescatter_async(name, _ptr(src), list(src.shape), code, op,
                                    ps_id)
    dtype = src.dtype

    def finish():
        out = _output_tensor(h, dtype)
        if postscale_factor != 1.0:
            out.mul_(postscale_factor)
        return out

    return _register([h], src, finish)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reducescatter of ``tensor``; returns this rank's reduced block."""
    compressed, ctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(
        compressed, name=name, op=op, process_set=process_set,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor))
    return compression.decompress(out, ctx)


# --- barrier and join --------------------------------------------------------

def barrier(process_set=global_process_set):
    """Blocks until every rank of the set has called barrier()."""
    h = _native.barrier_async(_native_id(process_set, "barrier"))
    try:
        _native.wait(h)
    finally:
        _native.release(h)


def join(device=-1, process_set=global_process_set):
    """This rank has no more data: it contributes neutral values to the other
    ranks' collectives until every rank has joined. Returns the rank that
    joined last (by the ranks' clocks, so approximate across hosts).
    ``device`` is accepted for Horovod compatibility (CPU only here)."""
    del device
    ps_id = _native_id(process_set, "join")
    joined_at = time.time()
    h = _native.join_async(ps_id)
    try:
        _native.wait(h)
    finally:
        _native.release(h)
    times = synchronize(allgather_async(
        torch.tensor([joined_at], dtype=torch.float64), name="join.last_rank",
        process_set=process_set))
    return int(torch.argmax(times).item())


def _pending_count():
    with _lock:
        return len(_operations)


def _forget_all():
    with _lock:
        _operations.clear()

"""Horovod's asynchronous collectives on torch tensors, through kolo's runtime.

Every ``*_async`` function submits to the native runtime (``kolo._native``)
by name and returns a handle at once (kolo._ops: Horovod's naming rule, one
handle table for kolo.torch and kolo.numpy); ``synchronize(handle)`` waits
and returns the result, ``poll(handle)`` says whether it is done. The
differentiable blocking forms (``allreduce``, ``allgather``, ...) are in
kolo.torch.differentiable.

Tensors reach the runtime as data pointers. This module guarantees what the
runtime asks of its callers: every buffer handed over stays referenced (so
alive) until the operation is synchronized, and nothing in this module writes
to it meanwhile. Non-contiguous tensors are copied into a contiguous buffer;
in-place operations copy the result back into the caller's tensor after the
wait. Empty tensors pass a pointer to a small private buffer (torch gives
them a null pointer, which the runtime rejects; nothing is read or written
through it).

Devices (kolo.torch.device): CPU tensors, or CUDA tensors of one device
per call, which go to the runtime's ``*_async_cuda`` calls with the device
and the caller's current stream (kolo stages them through pinned host
memory, docs/gpu.md); the results are ordered on that stream. Outputs of a
call on CUDA tensors are CUDA tensors of the same device.

Dtypes: float32, float64, float16, bfloat16, int32, int64 and uint8 go to the
runtime as such. Operations that only move bytes (allgather, broadcast,
alltoall) also take every other dtype (bool, int8, int16, complex), sent as
their raw bytes; reductions on those raise InvalidArgumentError.

Horovod's conventions, kept here: ``root_rank`` is a global rank, also with a
process set (it must be a member); a reducescatter whose first dimension does
not divide by the set's size gives the first ``rows % size`` ranks one row
more; scaling factors apply to integer tensors in float64 (truncated), to
float16 in float32; ``synchronize`` of an alltoall handle returns
``(output, received_splits)``.

Thread-safety: submission, poll and synchronize may be called from any
thread (autograd hooks call them from the backward pass); one handle must be
synchronized by one thread.
"""

import os
import time

import torch

from kolo import _native, _ops
from kolo._ops import synchronize, poll  # noqa: F401  (re-exported)

from kolo.torch import device as _device
from kolo.torch import errors, output_cache
from kolo.torch.process_sets import _native_id, global_process_set

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
_INTEGER_DTYPES = (torch.int32, torch.int64, torch.uint8)
_STRIDED = torch.strided

# Pointer for empty tensors (never read or written: zero bytes).
_EMPTY_BUFFER = torch.zeros(8, dtype=torch.float64)
_EMPTY_PTR = _EMPTY_BUFFER.data_ptr()

_op_name = _ops.op_name
_submitted = _ops.submitted
_allreduce_submit = _native.allreduce_submit
_Handle = _ops.Handle


# --- checks and small helpers --------------------------------------------------

def _raise_bad_tensor(tensor, what, name, reduce):
    if not isinstance(tensor, torch.Tensor):
        raise errors.invalid_argument(
            "%s '%s': expected a torch.Tensor, got %s" %
            (what, name, type(tensor).__name__))
    if not (tensor.is_cpu or tensor.is_cuda):
        _device.common_device([(name, tensor.device)], what)  # raises
    if tensor.layout is not _STRIDED:
        raise errors.invalid_argument(
            "%s '%s': %s tensors are not supported; convert with .to_dense()" %
            (what, name, tensor.layout))
    if reduce:
        raise errors.invalid_argument(
            "%s '%s': dtype %s cannot be reduced by kolo (supported: %s)" %
            (what, name, tensor.dtype, ", ".join(str(d) for d in _NATIVE_DTYPES)))


def _reduce_code(tensor, what, name):
    """The native dtype code of a tensor that a reduction takes; raises a
    clear error for anything else (not a tensor, neither on the CPU nor on
    a CUDA device, sparse, a dtype kolo cannot reduce)."""
    try:
        code = _NATIVE_DTYPES.get(tensor.dtype)
        if code is not None and tensor.layout is _STRIDED and \
                (tensor.is_cpu or tensor.is_cuda):
            return code
    except AttributeError:
        pass
    _raise_bad_tensor(tensor, what, name, True)


def _check_movable(tensor, what, name):
    """Checks a tensor that an operation only moves (any dtype)."""
    try:
        if tensor.layout is _STRIDED and (tensor.is_cpu or tensor.is_cuda):
            return
    except AttributeError:
        pass
    _raise_bad_tensor(tensor, what, name, False)


def _ptr(tensor):
    p = tensor.data_ptr()  # 0 only for an empty tensor
    if p:
        return p
    return _EMPTY_PTR if tensor.is_cpu else _device.empty_pointer(tensor.device.index)


def _contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _ps_id(process_set, what):
    return 0 if process_set is global_process_set else _native_id(process_set, what)


def _set_size(process_set):
    return _native.size() if process_set is global_process_set else process_set.size()


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


def _root_index(process_set, root_rank, what, name):
    """A global root rank as its index in ``process_set`` (Horovod's
    root_rank is global, also with a process set)."""
    try:
        root = int(root_rank)
    except (TypeError, ValueError):
        raise errors.invalid_argument(
            "%s '%s': root_rank must be an integer, got %r" % (what, name, root_rank))
    if process_set is global_process_set:
        return root
    ranks = process_set.ranks
    if root not in ranks:
        raise errors.invalid_argument(
            "%s '%s': root_rank %d is not a member of process set %s" %
            (what, name, root, ranks))
    return ranks.index(root)


def _scaled(tensor, factor):
    """``tensor * factor`` as Horovod scales: integers in float64 (truncated
    toward zero), float16 in float32, other floats in their own type."""
    if factor == 1.0:
        return tensor
    dtype = tensor.dtype
    if dtype in _INTEGER_DTYPES:
        return (tensor.double() * factor).to(dtype)
    if dtype is torch.float16:
        return (tensor.float() * factor).to(dtype)
    return tensor * factor


def _second(keep, ids):
    return keep[1]


def _byte_rows(tensor):
    """A contiguous tensor as uint8 rows [d0, bytes per row], sharing memory."""
    rows = tensor.shape[0]
    row_bytes = int(torch.Size(tensor.shape[1:]).numel()) * tensor.element_size()
    flat = tensor.reshape(-1)
    if tensor.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return flat.reshape(rows, row_bytes)


# The gathered indices come from other ranks: have torch check them against
# the size (torch 2.x also warns unless told either way; torch 1.13 neither
# checks by default nor takes the argument).
_SPARSE_CHECKS = ({"check_invariants": True}
                  if "check_invariants" in (torch.sparse_coo_tensor.__doc__ or "") else {})


def _output_tensor(native_handle, dtype, row_shape=None, mem=None):
    """The native output of an operation as a new tensor of ``dtype``. With
    ``row_shape`` the output is byte rows [rows, bytes per row] (a dtype sent
    as bytes) and becomes [rows, *row_shape]. ``mem``: the (device, stream)
    of a call on CUDA tensors, whose output is a CUDA tensor."""
    shape = list(_native.output_shape(native_handle))
    if row_shape is not None:
        shape = [shape[0]] + list(row_shape)
    if mem is not None:
        return _device.output_tensor(native_handle, shape, dtype, mem[0])
    out = output_cache.empty(shape, dtype)
    nbytes = out.numel() * out.element_size()
    if nbytes:
        _native.output_into(native_handle, out.data_ptr(), nbytes)
    return out


# --- allreduce -----------------------------------------------------------------

def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce into a new tensor; returns a handle for
    synchronize() / poll()."""
    op = Average if average is None and op is None else \
        _resolve_op(average, op, "allreduce")
    ps_id = 0 if process_set is global_process_set else \
        _native_id(process_set, "allreduce")
    name = _op_name("allreduce", name)
    code = _reduce_code(tensor, "allreduce", name)
    mem = _device.memory_of(tensor, name, "allreduce")
    src = tensor if tensor.is_contiguous() else tensor.contiguous()
    if mem is None:
        out = output_cache.empty(src.shape, src.dtype)
        h = _native.allreduce_async(name, _ptr(src), _ptr(out), src.shape, code, op,
                                    prescale_factor, postscale_factor, ps_id)
    else:
        out = torch.empty_like(src, memory_format=torch.contiguous_format)
        h = _native.allreduce_async_cuda(name, _ptr(src), _ptr(out), list(src.shape),
                                         code, op, prescale_factor, postscale_factor,
                                         ps_id, *mem)
    return _submitted((h,), name, (src, out), _second)


def _copy_back(keep, ids):
    tensor, buf = keep
    with torch.no_grad():
        tensor.copy_(buf)
    return tensor


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of ``tensor``; synchronize() returns the
    same tensor holding the result."""
    # The hot path of DistributedOptimizer (one call per gradient): the
    # common case (default op, global set, a named contiguous CPU tensor of
    # a native dtype) costs one dict lookup and four attribute reads before
    # the native call; everything else takes the general checks.
    if average is None and op is None:
        op = Average
    else:
        op = _resolve_op(average, op, "allreduce")
    ps_id = 0 if process_set is global_process_set else \
        _native_id(process_set, "allreduce")
    if type(name) is not str or not name:
        name = _op_name("allreduce", name)
    try:
        code = _NATIVE_DTYPES[tensor.dtype]
        fast = tensor.is_cpu and tensor.layout is _STRIDED and tensor.is_contiguous()
    except (KeyError, AttributeError):
        fast = False
    if fast:
        p = tensor.data_ptr() or _EMPTY_PTR
        h = _allreduce_submit(name, p, p, tensor.shape, code, op, prescale_factor,
                              postscale_factor, ps_id)
        if _ops._orphans:
            _ops.reap_orphans()
        return _Handle(h, name, tensor, None)
    code = _reduce_code(tensor, "allreduce", name)
    mem = _device.memory_of(tensor, name, "allreduce")
    buf = tensor.contiguous()
    p = _ptr(buf)
    if mem is None:
        h = _native.allreduce_async(name, p, p, buf.shape, code, op, prescale_factor,
                                    postscale_factor, ps_id)
    else:
        h = _native.allreduce_async_cuda(name, p, p, list(buf.shape), code, op,
                                         prescale_factor, postscale_factor, ps_id, *mem)
    return _submitted((h,), name, (tensor, buf), _copy_back)


# The common case of allreduce_async_ runs in C (kolo._native,
# python/native/tensor_handles.cc: the same checks, no bytecode, a C handle
# without __del__); it calls the function above, with the same arguments,
# for every other case, so behaviour and errors are the same.
_allreduce_async_py = allreduce_async_
_native.setup_torch_allreduce(_allreduce_async_py, torch.Tensor, _NATIVE_DTYPES,
                              _STRIDED, global_process_set, _ops._orphans,
                              _ops.reap_orphans, _EMPTY_PTR)
allreduce_async_ = _native.torch_allreduce_async_


def _install_tensor_reader():
    """Lets the C fast path read tensors in C++ (kolo.torch._tensor_reader,
    built against one torch's C++ headers) instead of through their Python
    attributes, when that module was built, for this very torch version, and
    KOLO_TORCH_NATIVE_READER is not 0 (docs/env.md). Returns why it is or is
    not in use (_tensor_reader_state). Either way the same calls take the
    fast path with the same results; only the cost differs."""
    _native.set_tensor_reader(None)
    setting = os.environ.get("KOLO_TORCH_NATIVE_READER", "")
    if setting not in ("", "0", "1"):
        raise errors.invalid_argument(
            "KOLO_TORCH_NATIVE_READER=%r: expected 0 (read tensors through their "
            "Python attributes) or 1 (natively when kolo.torch._tensor_reader "
            "was built for this torch; the default)" % setting)
    if setting == "0":
        return "off: KOLO_TORCH_NATIVE_READER=0"
    try:
        from kolo.torch import _tensor_reader
    except ImportError as e:
        return "off: kolo.torch._tensor_reader not available (%s)" % e
    if _tensor_reader.TORCH_VERSION != torch.__version__:
        return ("off: kolo.torch._tensor_reader was built for torch %s, this is "
                "torch %s" % (_tensor_reader.TORCH_VERSION, torch.__version__))
    _native.set_tensor_reader(_tensor_reader.reader)
    return "on: kolo.torch._tensor_reader (torch %s)" % torch.__version__


_tensor_reader_state = _install_tensor_reader()


def _native_reader_active():
    """True when allreduce_async_'s fast path reads tensors natively
    (kolo.torch._tensor_reader); _tensor_reader_state says why or why not."""
    return _native.tensor_reader_set()


def _grouped_allreduce_submit(srcs, outs, average, name, op, prescale, postscale,
                              process_set, keep, finish):
    what = "grouped_allreduce"
    op = _resolve_op(average, op, what)
    ps_id = _ps_id(process_set, what)
    base = _op_name(what, name)
    count = len(srcs)
    if not count:
        raise errors.invalid_argument("%s '%s': no tensors" % (what, base))
    names = ["%s_%dof%d" % (base, i + 1, count) for i in range(count)]
    for t, n in zip(srcs, names):
        code = _reduce_code(t, what, n)
    dtypes = {t.dtype for t in srcs}
    if len(dtypes) != 1:
        raise errors.invalid_argument(
            "%s '%s': all tensors of a group must have one dtype, got %s" %
            (what, base, sorted(str(d) for d in dtypes)))
    mem = _device.memory_of_all(srcs, names, what)
    args = (names, [_ptr(s) for s in srcs], [_ptr(o) for o in outs],
            [list(s.shape) for s in srcs], code, op, float(prescale), float(postscale),
            ps_id)
    hs = _native.grouped_allreduce_async(*args) if mem is None else \
        _native.grouped_allreduce_async_cuda(*args, *mem)
    return _submitted(tuple(hs), base, keep, finish)


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts allreduces of a list of tensors (one dtype) that run together
    (one fusion bucket); synchronize() returns the list of results. Member
    names are ``<name>_<i>of<n>``, as in Horovod."""
    srcs = [_contiguous(t) if isinstance(t, torch.Tensor) else t for t in tensors]
    outs = [_empty_like(s) if isinstance(s, torch.Tensor) else s for s in srcs]
    return _grouped_allreduce_submit(srcs, outs, average, name, op, prescale_factor,
                                     postscale_factor, process_set, (srcs, outs),
                                     lambda keep, ids: list(keep[1]))


def _empty_like(src):
    """A new contiguous output for ``src`` (from the output cache on the CPU)."""
    if src.is_cpu:
        return output_cache.empty(src.shape, src.dtype)
    return torch.empty_like(src, memory_format=torch.contiguous_format)


def _copy_back_all(keep, ids):
    tensors, bufs = keep
    with torch.no_grad():
        for t, b in zip(tensors, bufs):
            if b is not t:
                t.copy_(b)
    return tensors


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    """In-place form of grouped_allreduce_async."""
    tensors = list(tensors)
    bufs = [_contiguous(t) if isinstance(t, torch.Tensor) else t for t in tensors]
    return _grouped_allreduce_submit(bufs, bufs, average, name, op, prescale_factor,
                                     postscale_factor, process_set, (tensors, bufs),
                                     _copy_back_all)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce: allgathers the indices and values of a
    sparse tensor. Returns a function that waits and returns the reduced
    sparse tensor (duplicate indices stand for their sum, as in torch)."""
    if op not in (Sum, Average):
        raise errors.invalid_argument(
            "sparse_allreduce '%s': op must be Sum or Average, got %s" %
            (name, _REDUCE_OPS.get(op, op)))
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(),
                              name="%s.indices" % name, process_set=process_set)
    values = allgather_async(t._values(), name="%s.values" % name,
                             process_set=process_set)

    def handle():
        v = synchronize(values)
        i = synchronize(indices)
        if op == Average:
            v = v / _set_size(process_set)
        if i.dim() == 0 or v.dim() == 0:
            return t.new().resize_as_(t)
        return torch.sparse_coo_tensor(i.transpose(0, 1), v, t.size(), **_SPARSE_CHECKS)

    return handle


# --- allgather -----------------------------------------------------------------

def _allgather_submit(tensor, name, ps_id, what):
    """(native handle, what to keep alive, finish(native handle) -> result)."""
    _check_movable(tensor, what, name)
    mem = _device.memory_of(tensor, name, what)
    src = _contiguous(tensor)
    if src.dim() == 0:
        src = src.reshape(1)
    dtype = src.dtype
    code = _NATIVE_DTYPES.get(dtype)
    if code is not None:
        h = _allgather_native(name, _ptr(src), list(src.shape), code, ps_id, mem)
        return h, src, lambda nh: _output_tensor(nh, dtype, None, mem)
    rows = _byte_rows(src)
    row_shape = list(src.shape[1:])
    h = _allgather_native(name, _ptr(rows), list(rows.shape), _native.UINT8, ps_id, mem)
    return h, (src, rows), lambda nh: _output_tensor(nh, dtype, row_shape, mem)


def _allgather_native(name, ptr, shape, code, ps_id, mem):
    if mem is None:
        return _native.allgather_async(name, ptr, shape, code, ps_id)
    return _native.allgather_async_cuda(name, ptr, shape, code, ps_id, *mem)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: the ranks' tensors concatenated along the first
    dimension (which may differ across ranks). A 0-d tensor counts as [1]."""
    what = "allgather"
    ps_id = _ps_id(process_set, what)
    name = _op_name(what, name)
    h, keep, finish = _allgather_submit(tensor, name, ps_id, what)
    return _submitted((h,), name, keep, lambda keep, ids: finish(ids[0]))


def _submit_each(what, tensors, name, process_set, submit_one):
    """Grouped operations the runtime runs one by one: submits every member
    (named ``<name>_<i>of<n>``) and returns one handle whose result is the
    list of results. ``submit_one(tensor, name, ps_id)`` returns (native
    handle, keep, finish(native handle))."""
    ps_id = _ps_id(process_set, what)
    base = _op_name(what, name)
    tensors = list(tensors)
    count = len(tensors)
    if not count:
        raise errors.invalid_argument("%s '%s': no tensors" % (what, base))
    names = ["%s_%dof%d" % (base, i + 1, count) for i in range(count)]
    # One device for the whole group, checked before anything is submitted.
    _device.common_device([(n, t.device) for t, n in zip(tensors, names)
                           if isinstance(t, torch.Tensor)], what)
    ids, keeps, finishes = [], [], []
    try:
        for i, t in enumerate(tensors):
            h, keep, finish = submit_one(t, names[i], ps_id)
            ids.append(h)
            keeps.append(keep)
            finishes.append(finish)
    except Exception:
        # Those already submitted still run: hand them to a handle that is
        # dropped at once (their buffers stay alive until they finish).
        _submitted(tuple(ids), base, keeps, None)
        raise
    return _submitted(tuple(ids), base, keeps,
                      lambda keep, ids: [f(h) for f, h in zip(finishes, ids)])


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Allgathers of a list of tensors under one handle; synchronize()
    returns the list of gathered tensors."""
    return _submit_each("grouped_allgather", tensors, name, process_set,
                        lambda t, n, ps: _allgather_submit(t, n, ps, "grouped_allgather"))


# --- broadcast -----------------------------------------------------------------

def _broadcast_submit(buf, root, name, ps_id, mem):
    code = _NATIVE_DTYPES.get(buf.dtype)
    view = buf
    if code is None:
        view = buf.reshape(-1)
        view = view.view(torch.uint8) if buf.dtype != torch.uint8 else view
        code = _native.UINT8
    if mem is None:
        return _native.broadcast_async(name, _ptr(view), view.shape, code, root,
                                       ps_id), view
    return _native.broadcast_async_cuda(name, _ptr(view), list(view.shape), code, root,
                                        ps_id, *mem), view


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast from ``root_rank`` (a global rank) into a new tensor."""
    what = "broadcast"
    ps_id = _ps_id(process_set, what)
    name = _op_name(what, name)
    _check_movable(tensor, what, name)
    mem = _device.memory_of(tensor, name, what)
    root = _root_index(process_set, root_rank, what, name)
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    h, view = _broadcast_submit(out, root, name, ps_id, mem)
    return _submitted((h,), name, (view, out), _second)


def broadcast_async_(tensor, root_rank, name=None,
                     process_set=global_process_set):
    """Starts an in-place broadcast of ``tensor`` from ``root_rank`` (global)."""
    what = "broadcast"
    ps_id = _ps_id(process_set, what)
    name = _op_name(what, name)
    _check_movable(tensor, what, name)
    mem = _device.memory_of(tensor, name, what)
    root = _root_index(process_set, root_rank, what, name)
    if tensor.is_contiguous():
        h, view = _broadcast_submit(tensor, root, name, ps_id, mem)
        return _submitted((h,), name, (view, tensor), _second)
    buf = tensor.contiguous()
    h, view = _broadcast_submit(buf, root, name, ps_id, mem)
    return _submitted((h,), name, (tensor, buf, view),
                      lambda keep, ids: _copy_back(keep[:2], ids))


# --- alltoall ------------------------------------------------------------------

def _split_list(splits, rows, count, what, name):
    """The rows each rank gets: ``splits`` as ints, or equal parts."""
    if splits is None:
        if rows % count:
            raise errors.invalid_argument(
                "%s '%s': the first dimension %d does not divide by the %d ranks; "
                "give splits" % (what, name, rows, count))
        return [rows // count] * count
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.is_complex():
            raise errors.invalid_argument(
                "%s '%s': splits must be integers, got dtype %s" %
                (what, name, splits.dtype))
        splits = splits.reshape(-1).tolist()
    try:
        split_list = [int(s) for s in splits]
    except (TypeError, ValueError):
        raise errors.invalid_argument(
            "%s '%s': splits must be a list or tensor of integers, got %r" %
            (what, name, splits))
    if len(split_list) != count:
        raise errors.invalid_argument(
            "%s '%s': %d splits for %d ranks" % (what, name, len(split_list), count))
    if any(s < 0 for s in split_list) or sum(split_list) != rows:
        raise errors.invalid_argument(
            "%s '%s': splits %s must be non-negative and add up to the first "
            "dimension %d" % (what, name, split_list, rows))
    return split_list


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall. ``splits`` (list or 1-d tensor, one entry per rank
    of the set) says how many rows of dimension 0 go to each rank; None splits
    equally. synchronize() returns (received rows in rank order, rows
    received from each rank), as Horovod's does."""
    what = "alltoall"
    ps_id = _ps_id(process_set, what)
    name = _op_name(what, name)
    _check_movable(tensor, what, name)
    mem = _device.memory_of(tensor, name, what)
    src = _contiguous(tensor)
    if src.dim() == 0:
        raise errors.invalid_argument(
            "%s '%s': needs a tensor of at least one dimension" % (what, name))
    splits_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    split_list = _split_list(splits, src.shape[0], _set_size(process_set), what, name)
    dtype = src.dtype
    code = _NATIVE_DTYPES.get(dtype)
    row_shape = list(src.shape[1:])
    send = src if code is not None else _byte_rows(src)
    args = (name, _ptr(send), list(send.shape),
            code if code is not None else _native.UINT8, split_list, ps_id)
    h = _native.alltoall_async(*args) if mem is None else \
        _native.alltoall_async_cuda(*args, *mem)
    # Received splits: an equal-split alltoall of the send splits.
    sizes = torch.tensor(split_list, dtype=torch.int64)
    try:
        hs = _native.alltoall_async(name + ".splits", _ptr(sizes), list(sizes.shape),
                                    _native.INT64, None, ps_id)
    except Exception:
        _submitted((h,), name, (src, send), None)  # dropped: runs to its end
        raise

    def finish(keep, ids):
        out = _output_tensor(ids[0], dtype, row_shape if code is None else None, mem)
        received = _output_tensor(ids[1], torch.int64).to(splits_dtype)
        return out, received

    return _submitted((h, hs), name, (src, send, sizes), finish)


# --- reducescatter -------------------------------------------------------------

def _reducescatter_submit(tensor, name, op, ps_id, count, me, prescale, postscale,
                          what):
    """(native handle, keep, finish(native handle)) of one reducescatter.
    Rows split as Horovod splits them: the first ``rows % count`` ranks get
    one row more. An uneven split runs as an even one over a copy padded with
    zero rows, each rank's block starting at a multiple of the larger block."""
    code = _reduce_code(tensor, what, name)
    mem = _device.memory_of(tensor, name, what)
    if tensor.dim() == 0:
        raise errors.invalid_argument(
            "%s '%s': needs a tensor of at least one dimension" % (what, name))
    src = _scaled(_contiguous(tensor), prescale)
    rows = src.shape[0]
    small, extra = divmod(rows, count)
    mine = small + (1 if me < extra else 0)
    if extra:
        big = small + 1
        padded = src.new_zeros([big * count] + list(src.shape[1:]))
        offset = 0
        for r in range(count):
            n = small + (1 if r < extra else 0)
            padded[r * big:r * big + n] = src[offset:offset + n]
            offset += n
        src = padded
    args = (name, _ptr(src), list(src.shape), code, op, ps_id)
    h = _native.reducescatter_async(*args) if mem is None else \
        _native.reducescatter_async_cuda(*args, *mem)
    dtype = src.dtype

    def finish(nh):
        out = _output_tensor(nh, dtype, None, mem)
        if extra:
            out = out[:mine]
        return _scaled(out, postscale)

    return h, src, finish


def reducescatter_async(tensor, name=None, op=Average,
                        process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter: reduces ``tensor`` over the ranks and returns
    to each its block of dimension 0 (Horovod's split when uneven)."""
    what = "reducescatter"
    op = _resolve_op(None, op, what)
    ps_id = _ps_id(process_set, what)
    name = _op_name(what, name)
    me = _native.rank() if process_set is global_process_set else process_set.rank()
    h, keep, finish = _reducescatter_submit(
        tensor, name, op, ps_id, _set_size(process_set), me, prescale_factor,
        postscale_factor, what)
    return _submitted((h,), name, keep, lambda keep, ids: finish(ids[0]))


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters of a list of tensors under one handle; synchronize()
    returns the list of this rank's blocks."""
    what = "grouped_reducescatter"
    op = _resolve_op(None, op, what)
    count = _set_size(process_set)
    me = _native.rank() if process_set is global_process_set else process_set.rank()
    return _submit_each(
        what, tensors, name, process_set,
        lambda t, n, ps: _reducescatter_submit(t, n, op, ps, count, me, prescale_factor,
                                               postscale_factor, what))


# --- barrier and join ----------------------------------------------------------

def barrier(process_set=global_process_set):
    """Blocks until every rank of the set has called barrier()."""
    h = _native.barrier_async(_ps_id(process_set, "barrier"))
    synchronize(_submitted((h,), "barrier", None, None))


def join(device=-1, process_set=global_process_set):
    """This rank has no more data: it takes part in the other ranks'
    collectives (zeros for allreduce; see docs/python.md for the rest) until
    every rank has joined. Returns the rank that joined last (by the ranks'
    clocks, so approximate across hosts). A join of the global set also
    re-aligns the ranks' generated names (kolo._ops). ``device`` is
    accepted for Horovod compatibility (CPU only here)."""
    del device
    joined_at = time.time()
    h = _native.join_async(_ps_id(process_set, "join"))
    synchronize(_submitted((h,), "join", None, None))
    # Each rank's join time and count of unnamed operations (kolo._ops).
    info = synchronize(allgather_async(
        torch.tensor([[joined_at, float(_ops.unnamed_count())]], dtype=torch.float64),
        name="join.last_rank", process_set=process_set))
    last = int(torch.argmax(info[:, 0]).item())
    if process_set is global_process_set:
        _ops.catch_up_unnamed(int(info[:, 1].max().item()))
        return last
    return process_set.ranks[last]

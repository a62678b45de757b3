"""kolo.numpy: kolo's collectives on NumPy arrays (framework-free).

Every operation goes through kolo's runtime (named, negotiated, fused; see
docs/runtime.md): ``op_async`` submits and returns a :class:`Handle` at once,
``synchronize(handle)`` waits and returns the result, ``poll(handle)`` says
whether it is done; ``op`` is ``synchronize(op_async(...))``.

Arrays: float32, float64, float16, int32, int64 and uint8 (bfloat16 is a
kolo dtype but NumPy has none: use kolo.torch for bfloat16 tensors). Other
dtypes raise :class:`UnsupportedDtypeError`. Anything ``numpy.asarray``
accepts may be passed; non-contiguous arrays (and non-native byte orders)
are copied first, and the in-place forms (``allreduce_``, ``broadcast_``)
copy the result back, so a strided view is never read or written wrongly.

Names: every rank must give the same name to the same operation. Without a
name, one is generated from a per-process counter per kind
(``allreduce.noname.3``), which matches across ranks when every rank calls
the unnamed operations in the same order.

Results are new arrays (except the in-place forms); inputs are left
unchanged.
"""

import itertools
import threading

import numpy as np

from kolo import _native
from kolo._native import InvalidArgumentError

__all__ = [
    "Sum",
    "Average",
    "Min",
    "Max",
    "Product",
    "Handle",
    "UnsupportedDtypeError",
    "allreduce",
    "allreduce_async",
    "allreduce_",
    "allreduce_async_",
    "grouped_allreduce",
    "grouped_allreduce_async",
    "allgather",
    "allgather_async",
    "broadcast",
    "broadcast_async",
    "broadcast_",
    "broadcast_async_",
    "alltoall",
    "alltoall_async",
    "reducescatter",
    "reducescatter_async",
    "barrier",
    "join",
    "synchronize",
    "poll",
]

# Reductions (the C API's kolo_op codes).
Sum = _native.SUM
Average = _native.AVG
Min = _native.MIN
Max = _native.MAX
Product = _native.PROD

_DTYPES = {
    np.dtype(np.float32): _native.FLOAT32,
    np.dtype(np.float64): _native.FLOAT64,
    np.dtype(np.float16): _native.FLOAT16,
    np.dtype(np.int32): _native.INT32,
    np.dtype(np.int64): _native.INT64,
    np.dtype(np.uint8): _native.UINT8,
}


class UnsupportedDtypeError(InvalidArgumentError, TypeError):
    """The array's dtype has no kolo equivalent."""

    code = _native.ERR_INVALID_ARGUMENT


def _dtype_code(dtype, name):
    dt = np.dtype(dtype)
    if not dt.isnative:
        dt = dt.newbyteorder("=")
    code = _DTYPES.get(dt)
    if code is None:
        raise UnsupportedDtypeError(
            f"kolo.numpy: dtype {dt} of '{name}' is not supported; kolo takes float32, "
            "float64, float16, int32, int64 and uint8 arrays (bfloat16 has no NumPy "
            "dtype: use kolo.torch for bfloat16 tensors)"
        )
    return code


def _native_contiguous(array, name):
    """(C-contiguous array in native byte order, kolo dtype code): the array
    itself when it already is one, else a copy."""
    a = np.asarray(array)
    code = _dtype_code(a.dtype, name)
    dt = a.dtype.newbyteorder("=") if not a.dtype.isnative else a.dtype
    if a.dtype == dt and a.flags.c_contiguous:
        return a, code
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one.)
    return np.array(a, dtype=dt, order="C"), code


def _process_set_id(process_set):
    """An int id, or an object with a `process_set_id` attribute."""
    if process_set is None:
        return 0
    if hasattr(process_set, "process_set_id"):
        return int(process_set.process_set_id)
    return int(process_set)


_counters = {}
_counters_lock = threading.Lock()


def _name(kind, name):
    if name is not None:
        return str(name)
    with _counters_lock:
        counter = _counters.setdefault(kind, itertools.count())
        return f"{kind}.noname.{next(counter)}"


# Handles dropped while pending keep their arrays here until they finish:
# the runtime may still read or write them.
_orphans = []
_orphans_lock = threading.Lock()


def _reap_orphans():
    with _orphans_lock:
        keep = []
        for handle_id, arrays in _orphans:
            try:
                if not _native.poll(handle_id):
                    keep.append((handle_id, arrays))
                    continue
                _native.release(handle_id)
            except Exception:  # noqa: BLE001 - kolo shut down: nothing pending
                pass
        _orphans[:] = keep


class Handle:
    """One submitted operation. Pass it to synchronize() (once) or poll()."""

    __slots__ = ("_id", "_name", "_keep", "_finish", "_done", "_result")

    def __init__(self, handle_id, name, keep, finish):
        self._id = handle_id
        self._name = name
        self._keep = keep  # arrays the runtime reads or writes
        self._finish = finish  # handle id -> result, after a successful wait
        self._done = False
        self._result = None

    @property
    def name(self):
        return self._name

    def poll(self):
        return self._done or _native.poll(self._id)

    def wait(self):
        if self._done:
            return self._result
        try:
            _native.wait(self._id)
            self._result = self._finish(self._id)
        finally:
            self._done = True
            self._keep = None
            try:
                _native.release(self._id)
            except Exception:  # noqa: BLE001 - after shutdown the table is gone
                pass
        return self._result

    def __del__(self):
        if self._done:
            return
        try:
            if _native.poll(self._id):
                _native.release(self._id)
            else:
                with _orphans_lock:
                    _orphans.append((self._id, self._keep))
        except Exception:  # noqa: BLE001 - kolo shut down
            pass


def synchronize(handle):
    """Waits for `handle` and returns its result (raises its error)."""
    return handle.wait()


def poll(handle):
    """True once `handle` has finished; synchronize() then returns at once."""
    return handle.poll()


def _submit(handle_id, name, keep, finish):
    _reap_orphans()
    return Handle(handle_id, name, keep, finish)


# ---- allreduce -------------------------------------------------------------


def allreduce_async(array, op=Average, name=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=0):
    """Reduces `array` across the ranks into a new array (op: Sum, Average,
    Min, Max, Product; Average divides by the ranks that contributed)."""
    name = _name("allreduce", name)
    send, code = _native_contiguous(array, name)
    recv = np.empty_like(send)
    h = _native.allreduce_async(name, send.ctypes.data, recv.ctypes.data, list(send.shape),
                                code, op, prescale_factor, postscale_factor,
                                _process_set_id(process_set))
    return _submit(h, name, (send, recv), lambda _h: recv)


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=0):
    return synchronize(allreduce_async(array, op, name, prescale_factor, postscale_factor,
                                       process_set))


def _in_place(array, name):
    """(buffer the runtime works on, write-back or None) for an in-place op."""
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError(f"kolo.numpy: in-place '{name}' needs a numpy.ndarray, "
                                   f"got {type(array).__name__}")
    if not array.flags.writeable:
        raise InvalidArgumentError(f"kolo.numpy: in-place '{name}': the array is read-only")
    buf, code = _native_contiguous(array, name)
    if buf is array:
        return buf, code, None

    def write_back():
        array[...] = buf

    return buf, code, write_back


def allreduce_async_(array, op=Average, name=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=0):
    """In-place allreduce: `array` holds the result after synchronize()."""
    name = _name("allreduce", name)
    buf, code, write_back = _in_place(array, name)
    h = _native.allreduce_async(name, buf.ctypes.data, buf.ctypes.data, list(buf.shape), code,
                                op, prescale_factor, postscale_factor,
                                _process_set_id(process_set))

    def finish(_h):
        if write_back:
            write_back()
        return array

    return _submit(h, name, (array, buf), finish)


def allreduce_(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=0):
    return synchronize(allreduce_async_(array, op, name, prescale_factor, postscale_factor,
                                        process_set))


class _GroupHandle:
    """The handles of one grouped allreduce; synchronize() gives the list."""

    def __init__(self, handles):
        self._handles = handles

    def poll(self):
        return all(h.poll() for h in self._handles)

    def wait(self):
        errors = []
        results = []
        for h in self._handles:
            try:
                results.append(h.wait())
            except Exception as e:  # noqa: BLE001 - wait for all, raise the first
                errors.append(e)
        if errors:
            raise errors[0]
        return results


def grouped_allreduce_async(arrays, op=Average, name=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=0):
    """Allreduces that run together in one fusion bucket (one dtype for all);
    names are `<name>.<i>`."""
    base = _name("grouped_allreduce", name)
    sends, recvs, names = [], [], []
    code = None
    for i, a in enumerate(arrays):
        n = f"{base}.{i}"
        s, c = _native_contiguous(a, n)
        if code is not None and c != code:
            raise InvalidArgumentError(
                f"kolo.numpy: grouped allreduce '{base}': every array needs the same dtype "
                f"({np.asarray(arrays[0]).dtype} and {s.dtype})")
        code = c
        sends.append(s)
        recvs.append(np.empty_like(s))
        names.append(n)
    if not sends:
        return _GroupHandle([])
    ids = _native.grouped_allreduce_async(names, [s.ctypes.data for s in sends],
                                          [r.ctypes.data for r in recvs],
                                          [list(s.shape) for s in sends], code, op,
                                          prescale_factor, postscale_factor,
                                          _process_set_id(process_set))
    return _GroupHandle([
        _submit(h, n, (s, r), (lambda r: lambda _h: r)(r))
        for h, n, s, r in zip(ids, names, sends, recvs)
    ])


def grouped_allreduce(arrays, op=Average, name=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=0):
    return synchronize(grouped_allreduce_async(arrays, op, name, prescale_factor,
                                               postscale_factor, process_set))


# ---- outputs allocated by kolo ----------------------------------------------


def _from_output(dtype):
    def finish(handle_id):
        out = np.empty(_native.output_shape(handle_id), dtype=dtype)
        _native.output_into(handle_id, out.ctypes.data, out.nbytes)
        return out

    return finish


def allgather_async(array, name=None, process_set=0):
    """The ranks' arrays concatenated along the first axis (first dimensions
    may differ between ranks; the others must agree)."""
    name = _name("allgather", name)
    send, code = _native_contiguous(array, name)
    h = _native.allgather_async(name, send.ctypes.data, list(send.shape), code,
                                _process_set_id(process_set))
    return _submit(h, name, (send,), _from_output(send.dtype))


def allgather(array, name=None, process_set=0):
    return synchronize(allgather_async(array, name, process_set))


def alltoall_async(array, splits=None, name=None, process_set=0):
    """Sends splits[j] rows (first axis) to rank j (None: equal parts);
    returns the rows received, in rank order."""
    name = _name("alltoall", name)
    send, code = _native_contiguous(array, name)
    s = None if splits is None else [int(v) for v in np.asarray(splits).reshape(-1)]
    h = _native.alltoall_async(name, send.ctypes.data, list(send.shape), code, s,
                               _process_set_id(process_set))
    return _submit(h, name, (send,), _from_output(send.dtype))


def alltoall(array, splits=None, name=None, process_set=0):
    return synchronize(alltoall_async(array, splits, name, process_set))


def reducescatter_async(array, op=Average, name=None, process_set=0):
    """Reduces across ranks and returns this rank's block of the first axis
    (which must divide by the number of ranks)."""
    name = _name("reducescatter", name)
    send, code = _native_contiguous(array, name)
    h = _native.reducescatter_async(name, send.ctypes.data, list(send.shape), code, op,
                                    _process_set_id(process_set))
    return _submit(h, name, (send,), _from_output(send.dtype))


def reducescatter(array, op=Average, name=None, process_set=0):
    return synchronize(reducescatter_async(array, op, name, process_set))


# ---- broadcast --------------------------------------------------------------


def broadcast_async(array, root_rank, name=None, process_set=0):
    """`root_rank`'s array on every rank, as a new array."""
    name = _name("broadcast", name)
    a = np.asarray(array)
    _dtype_code(a.dtype, name)
    buf = np.array(a, dtype=a.dtype.newbyteorder("=") if not a.dtype.isnative else a.dtype,
                   order="C", copy=True)
    h = _native.broadcast_async(name, buf.ctypes.data, list(buf.shape),
                                _DTYPES[buf.dtype], int(root_rank),
                                _process_set_id(process_set))
    return _submit(h, name, (buf,), lambda _h: buf)


def broadcast(array, root_rank, name=None, process_set=0):
    return synchronize(broadcast_async(array, root_rank, name, process_set))


def broadcast_async_(array, root_rank, name=None, process_set=0):
    """In-place broadcast: `array` holds root's values after synchronize()."""
    name = _name("broadcast", name)
    buf, code, write_back = _in_place(array, name)
    h = _native.broadcast_async(name, buf.ctypes.data, list(buf.shape), code, int(root_rank),
                                _process_set_id(process_set))

    def finish(_h):
        if write_back:
            write_back()
        return array

    return _submit(h, name, (array, buf), finish)


def broadcast_(array, root_rank, name=None, process_set=0):
    return synchronize(broadcast_async_(array, root_rank, name, process_set))


# ---- barrier and join --------------------------------------------------------


def barrier(process_set=0):
    """Returns once every rank of the set has called it (through the
    runtime, ordered with the set's other operations)."""
    h = _native.barrier_async(_process_set_id(process_set))
    synchronize(_submit(h, "barrier", (), lambda _h: None))


def join(process_set=0):
    """This rank has no more data: it takes part in the others' operations
    with zeros (no rows for allgather and alltoall) until every rank of the
    set has joined, then returns."""
    h = _native.join_async(_process_set_id(process_set))
    synchronize(_submit(h, "join", (), lambda _h: None))

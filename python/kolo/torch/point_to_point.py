"""Point-to-point messages between two ranks: ``send``, ``recv``, ``isend``,
``irecv`` on CPU tensors of any dtype and shape, contiguous or not.

Ranks are global ranks (as ``root_rank`` is in Horovod's API and ``dst`` in
torch.distributed), also with a process set, where both ranks must be
members; a set's messages never match another set's. Not collective: only
the two ranks take part.

Matching: messages from one rank to another with the same tag are received
in the order they were sent; the receive's element count and dtype must
equal the send's, else the receive raises MismatchError naming both ranks,
counts and dtypes (the tensor is left as it was). The shape is the
receiver's own: a message of as many elements is accepted in any shape.
A receive from a rank that died raises PeerLostError naming it (one from a
silent rank KoloTimeoutError, after KOLO_TIMEOUT).

``isend``/``irecv`` return a handle for ``synchronize`` (which returns the
tensor: for ``irecv`` holding the message) and ``poll``; the tensor must
not be changed (isend) or read (irecv) until then. Messages move while this
rank is inside a kolo call (a synchronize, a poll, another send or
receive).

Dtypes: float32, float64, float16, bfloat16, int32, int64 and uint8 travel
as such (their mismatches are caught); any other dtype (bool, int8, int16,
complex) travels as its bytes, so only its byte count is checked.
"""

import torch

from kolo import _native, _ops
from kolo.torch import errors
from kolo.torch.collectives import _NATIVE_DTYPES, _check_movable, _ptr
from kolo.torch.process_sets import _native_id, global_process_set


def _peer_index(process_set, peer, what):
    """(native set id, the peer's index in the set) for a global rank."""
    try:
        rank = int(peer)
    except (TypeError, ValueError):
        raise errors.invalid_argument(
            "%s: the peer must be an integer rank, got %r" % (what, peer))
    if process_set is global_process_set or process_set is None:
        return 0, rank
    ps_id = _native_id(process_set, what)
    ranks = process_set.ranks
    if rank not in ranks:
        raise errors.invalid_argument(
            "%s: rank %d is not a member of process set %s" % (what, rank, ranks))
    return ps_id, ranks.index(rank)


def _wire(tensor):
    """(contiguous buffer, element count, native dtype) as sent."""
    buf = tensor if tensor.is_contiguous() else tensor.contiguous()
    code = _NATIVE_DTYPES.get(buf.dtype)
    if code is None:  # moved as bytes
        return buf, buf.numel() * buf.element_size(), _native.UINT8
    return buf, buf.numel(), code


def _check_tag(tag, what):
    if type(tag) is not int or tag < 0 or tag >= 2 ** 31:
        raise errors.invalid_argument(
            "%s: tag must be an integer in [0, 2**31), got %r" % (what, tag))


def _first(keep, ids):
    return keep[0]


def _copy_back(keep, ids):
    tensor, buf = keep
    with torch.no_grad():
        tensor.copy_(buf)
    return tensor


def isend(tensor, dst, tag=0, process_set=global_process_set):
    """Starts sending ``tensor`` to global rank ``dst``; returns a handle
    (synchronize() returns ``tensor``)."""
    what = "isend to rank %r (tag %r)" % (dst, tag)
    _check_movable(tensor, "isend", what)
    _check_tag(tag, what)
    ps_id, peer = _peer_index(process_set, dst, what)
    buf, count, code = _wire(tensor.detach())
    h = _native.send_async(_ptr(buf), count, code, peer, tag, ps_id)
    return _ops.submitted((h,), what, (tensor, buf), _first)


def irecv(tensor, src, tag=0, process_set=global_process_set):
    """Starts receiving into ``tensor`` from global rank ``src``; returns a
    handle (synchronize() returns ``tensor`` holding the message)."""
    what = "irecv from rank %r (tag %r)" % (src, tag)
    _check_movable(tensor, "irecv", what)
    _check_tag(tag, what)
    ps_id, peer = _peer_index(process_set, src, what)
    target = tensor.detach()
    if target.is_contiguous():
        buf, finish = target, _first
    else:
        buf, finish = torch.empty_like(target, memory_format=torch.contiguous_format), \
            _copy_back
    buf, count, code = _wire(buf)
    h = _native.recv_async(_ptr(buf), count, code, peer, tag, ps_id)
    return _ops.submitted((h,), what, (tensor, buf), finish)


def send(tensor, dst, tag=0, process_set=global_process_set):
    """Sends ``tensor`` to global rank ``dst``; returns once its memory may
    be reused."""
    _ops.synchronize(isend(tensor, dst, tag, process_set))


def recv(tensor, src, tag=0, process_set=global_process_set):
    """Receives into ``tensor`` from global rank ``src``; returns ``tensor``."""
    return _ops.synchronize(irecv(tensor, src, tag, process_set))

"""The two collectives of sharded training, one bucket at a time.

- ``start_reduce_scatter(flat, ...)``: the average over the ranks of a
  bucket's padded flat gradient; rank r gets block r (``shard`` elements).
  Normally the runtime's reducescatter (a ring: each rank sends and
  receives (n-1)/n of the vector). With ``KOLO_DETERMINISTIC=1`` the
  runtime's allreduce sums each element in rank order 0..n-1 (the
  ``ordered`` algorithm) while the ring reducescatter starts each block's
  sum at a different rank, so there it runs as an alltoall (block j to rank
  j, the same bytes on the wire) followed by the same rank-order sum here:
  float32/float64 in their own type, float16/bfloat16 accumulated in float32
  and rounded once, then divided by n, as the ordered allreduce does. The
  result is then bit for bit the block of kolo.torch.DistributedOptimizer's
  averaged gradient.
- ``start_allgather(shard, ...)``: every rank's ``shard`` elements,
  concatenated in rank order (the padded flat vector);
  ``start_allgather_into(shard, dest, ...)`` writes them into ``dest``
  (stage 3's unit storage) instead of a new tensor.

Each returns a handle whose ``wait()`` gives the result tensor.
``sent_bytes[0]`` counts what this rank sends for them (the ring's and the
alltoall's (n-1)/n of the vector; bench/zero_speed.py reports it per step).
"""

import os

import torch

from kolo import _native
from kolo.torch import collectives as C
from kolo.torch import errors


def deterministic():
    """KOLO_DETERMINISTIC as the runtime reads it (an integer, 0 = off)."""
    value = os.environ.get("KOLO_DETERMINISTIC", "0").strip() or "0"
    try:
        return int(value) != 0
    except ValueError:
        return False


sent_bytes = [0]


def _count(tensor, size, fraction_of):
    sent_bytes[0] += tensor.numel() * tensor.element_size() * (size - 1) // fraction_of


class _Handle:
    __slots__ = ("_handle", "_finish")

    def __init__(self, handle, finish):
        self._handle = handle
        self._finish = finish

    def wait(self):
        return self._finish(C.synchronize(self._handle))


_WIDE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _rank_order_average(received, size):
    """received: [size * shard], rank j's block at j*shard. The average of
    the blocks summed in rank order."""
    shard = received.numel() // size
    wide = _WIDE.get(received.dtype)
    acc = received[:shard].clone() if wide is None else received[:shard].to(wide)
    for j in range(1, size):
        block = received[j * shard:(j + 1) * shard]
        acc.add_(block if wide is None else block.to(wide))
    if wide is not None:
        acc = acc.to(received.dtype)
    return acc.div_(size)


def start_reduce_scatter(flat, name, size, process_set, compression):
    """flat: the padded flat gradient (a multiple of ``size`` elements)."""
    compressed, ctx = compression.compress(flat)
    _count(compressed, size, size)
    if deterministic() and size > 1:
        h = C.alltoall_async(compressed, name=name, process_set=process_set)
        return _Handle(h, lambda out: compression.decompress(
            _rank_order_average(out[0], size), ctx))
    h = C.reducescatter_async(compressed, name=name, op=C.Average,
                              process_set=process_set)
    return _Handle(h, lambda out: compression.decompress(out, ctx))


def start_allgather(shard, name, process_set):
    _count(shard, process_set.size(), 1)
    h = C.allgather_async(shard, name=name, process_set=process_set)
    return _Handle(h, lambda out: out)


def start_allgather_into(shard, dest, name, process_set):
    """As start_allgather, the result written into the contiguous ``dest``
    (the runtime's output copied once, straight into place)."""
    _count(shard, process_set.size(), 1)
    what = "allgather"
    ps_id = C._ps_id(process_set, what)
    name = C._op_name(what, name)
    h, keep, _ = C._allgather_submit(shard, name, ps_id, what)
    nbytes = dest.numel() * dest.element_size()

    def finish(keep, ids):
        rows = list(_native.output_shape(ids[0]))[0]  # shard is 1-d: rows = elements
        if rows * shard.element_size() != nbytes:
            raise errors.invalid_argument(
                "allgather '%s': %d elements gathered, the destination holds %d" %
                (name, rows, dest.numel()))
        if nbytes:
            _native.output_into(ids[0], dest.data_ptr(), nbytes)
        return dest

    return _Handle(C._submitted((h,), name, keep, finish), lambda out: out)

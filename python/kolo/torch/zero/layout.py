"""How the parameters are split across the ranks (no communication here).

The parameters are grouped into buckets: consecutive parameters of one dtype
(stages 1 and 2: up to ``bucket_mb`` megabytes, filled in reverse order of
the model's parameters, roughly the order in which backward produces their
gradients; stage 3: one bucket per wrapped module). A bucket's parameters,
flattened and concatenated, form its flat vector of ``total`` elements,
padded with zeros to ``shard * size`` elements where ``shard =
ceil(total / size)``. Rank r owns elements ``[r * shard, (r + 1) * shard)``
of every bucket: its gradient shard (the reduce-scatter's block r) and the
parameters it updates. So every rank holds at most ``ceil(total / size)``
elements of each bucket, however unevenly the parameter sizes fall, and a
parameter may be split between ranks.

A *piece* is the part of one parameter inside this rank's range: the
wrapped optimizer updates pieces (1-d tensors), so an elementwise optimizer
(SGD, Adam, AdamW, RMSprop, Adagrad, ...) computes exactly what it would
compute on whole parameters.
"""

from kolo.torch import errors


class Piece:
    """The elements ``[begin, end)`` of parameter ``param`` (flattened),
    at ``[bucket_begin, ...)`` of the bucket's flat vector."""

    __slots__ = ("param", "name", "begin", "end", "bucket_begin")

    def __init__(self, param, name, begin, end, bucket_begin):
        self.param = param
        self.name = name
        self.begin = begin
        self.end = end
        self.bucket_begin = bucket_begin

    @property
    def numel(self):
        return self.end - self.begin


class Bucket:
    """Consecutive parameters of one dtype and this rank's share of them.

    ``params``: list of (name, parameter), in bucket order.
    ``size``, ``rank``: the process set's size and this rank's index in it.
    """

    def __init__(self, index, params, size, rank, numels=None):
        self.index = index
        self.names = [n for n, _ in params]
        self.params = [p for _, p in params]
        self.numels = list(numels) if numels is not None else [p.numel() for p in self.params]
        self.offsets = []
        at = 0
        for n in self.numels:
            self.offsets.append(at)
            at += n
        self.total = at
        self.dtype = self.params[0].dtype if self.params else None
        self.place(size, rank)

    def place(self, size, rank):
        """(Re)computes this rank's share for a world of ``size`` ranks: the
        shard length, ``[begin, end)`` and the pieces (elastic training calls
        it again when the world changes)."""
        self.size = size
        self.rank = rank
        self.shard = -(-self.total // size) if self.total else 0
        self.begin = min(rank * self.shard, self.total)
        self.end = min((rank + 1) * self.shard, self.total)
        self.pieces = []
        for name, p, off, n in zip(self.names, self.params, self.offsets, self.numels):
            lo, hi = max(off, self.begin), min(off + n, self.end)
            if lo < hi:
                self.pieces.append(Piece(p, name, lo - off, hi - off, lo))

    @property
    def padded(self):
        return self.shard * self.size

    @property
    def owned(self):
        """How many elements of the bucket this rank owns (<= shard)."""
        return self.end - self.begin

    def range_of(self, rank):
        """[begin, end) of ``rank``'s share in the flat vector."""
        return min(rank * self.shard, self.total), min((rank + 1) * self.shard, self.total)


def split_buckets(named, bucket_bytes, size, rank):
    """Stages 1 and 2: ``named`` (list of (name, parameter) in
    model order) into buckets of at most ``bucket_bytes`` bytes (a larger
    parameter gets a bucket of its own), one dtype each, filled from the
    last parameter backwards."""
    buckets, current, current_bytes = [], [], 0
    for item in reversed(named):
        p = item[1]
        nbytes = p.numel() * p.element_size()
        if current and (current[-1][1].dtype != p.dtype or
                        current_bytes + nbytes > bucket_bytes):
            buckets.append(Bucket(len(buckets), current, size, rank))
            current, current_bytes = [], 0
        current.append(item)
        current_bytes += nbytes
    if current:
        buckets.append(Bucket(len(buckets), current, size, rank))
    return buckets


def check_flat(p, name):
    """The pieces are views of the flattened parameter: it must be dense
    and contiguous."""
    if p.is_sparse or not p.is_contiguous():
        raise errors.invalid_argument(
            "kolo.torch.zero: parameter '%s' must be a dense contiguous tensor "
            "(shape %s, strides %s)" % (name, list(p.shape),
                                         list(p.stride()) if not p.is_sparse else "sparse"))


def resize_storage(tensor, numel):
    """Gives ``tensor``'s storage room for ``numel`` elements (0 frees it).
    torch 2.x resizes the untyped storage, in bytes (``Tensor.storage()``
    is deprecated there and warns); torch 1.13 the typed one, in elements."""
    untyped = getattr(tensor, "untyped_storage", None)
    if untyped is not None:
        untyped().resize_(numel * tensor.element_size())
    else:
        tensor.storage().resize_(numel)


def is_view_at(t, flat, offset):
    """Whether ``t`` is a dense, contiguous tensor whose data starts at
    element ``offset`` of ``flat`` (a gradient that is still a view of its
    bucket's flat vector)."""
    return (t is not None and not t.is_sparse and t.is_contiguous()
            and t.data_ptr() == flat.data_ptr() + offset * flat.element_size())

"""Large output tensors of kolo's collectives, from a cache of touched memory.

An out-of-place collective (``hvd.allreduce``, ``allgather``, ...) returns a
new tensor. For a large one, ``torch.empty`` gets fresh pages from the
kernel every call (glibc serves blocks above its mmap threshold, at most
32 MiB, with mmap and returns them with munmap when freed), and the first
write to each 4 KiB page faults: for 64 MiB that is 16,384 faults, about as
long as the allreduce itself on one host. A training loop asks for the same
sizes again and again, so kolo keeps the memory of outputs the program has
let go of and hands it out again, already touched.

Lifetime. A cached block is a NumPy uint8 array. Each output is a NumPy view
of a block, wrapped by ``torch.from_numpy``: the tensor's storage holds the
view, and so does every tensor viewing that storage (slices, ``.view``,
``.reshape``), so the view dies exactly when the last tensor using the
memory does. A ``weakref.finalize`` on the view then puts the block back.
A block is never handed out while any tensor can still read or write it.

Bounds. Only outputs of at least ``min_bytes`` (1 MiB) come from the cache,
and it keeps at most ``KOLO_TORCH_OUTPUT_CACHE_MB`` (default 256) of idle
blocks per process; a block let go of beyond that is freed. 0 turns the
cache off (every output from ``torch.empty``). Blocks are matched by exact
size: a loop's outputs repeat their sizes.

The tensors differ from ``torch.empty``'s in one way: their storage cannot
be resized (``resize_`` to a larger size fails, as for any tensor made by
``torch.from_numpy``).
"""

import os
import threading
import weakref

import numpy as np
import torch

from kolo import errors

_ENV = "KOLO_TORCH_OUTPUT_CACHE_MB"


def _limit_bytes():
    text = os.environ.get(_ENV, "256")
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise errors.invalid_argument(
            "%s=%r: expected a number of MiB >= 0 (0 turns the output cache off)"
            % (_ENV, text))
    return int(mb * (1 << 20))


_element_sizes = {}


def _element_size(dtype):
    size = _element_sizes.get(dtype)
    if size is None:
        size = _element_sizes[dtype] = torch.empty((), dtype=dtype).element_size()
    return size


class OutputCache:
    """Idle blocks by size; ``empty(shape, dtype)`` like ``torch.empty``."""

    min_bytes = 1 << 20

    def __init__(self, limit_bytes):
        self.limit_bytes = limit_bytes
        self._idle = {}        # nbytes -> [block, ...]
        self._idle_bytes = 0
        self._lock = threading.RLock()  # finalizers may run inside empty()

    def empty(self, shape, dtype):
        shape = torch.Size(shape)
        nbytes = shape.numel() * _element_size(dtype)
        if nbytes < self.min_bytes or nbytes > self.limit_bytes:
            return torch.empty(shape, dtype=dtype)
        block = self._take(nbytes)
        view = block[:]
        weakref.finalize(view, self._give_back, block)
        return torch.from_numpy(view).view(dtype).view(shape)

    def idle_bytes(self):
        return self._idle_bytes

    def _take(self, nbytes):
        with self._lock:
            blocks = self._idle.get(nbytes)
            if blocks:
                self._idle_bytes -= nbytes
                return blocks.pop()
        return np.empty(nbytes, dtype=np.uint8)

    def _give_back(self, block):
        with self._lock:
            if self._idle_bytes + block.nbytes > self.limit_bytes:
                return  # over the bound: let it be freed
            self._idle.setdefault(block.nbytes, []).append(block)
            self._idle_bytes += block.nbytes


_cache = OutputCache(_limit_bytes())


def empty(shape, dtype):
    """An uninitialised contiguous CPU tensor, from the cache when large."""
    return _cache.empty(shape, dtype)


def cache():
    """The process's cache (for tests and diagnostics)."""
    return _cache

"""Activation offload: the tensors autograd saves for backward, through
torch.autograd.graph.saved_tensors_hooks, placed by the planner.

- pack(t): parameters and other leaves that require grad, and views of
  them (Linear saves ``weight.t()``), are returned as they are (they live
  anyway; not counted). Any other tensor is recorded
  by its *storage* (several saved views of one activation, e.g. a ReLU's
  output saved by the ReLU and by the next Linear, are one planner entry:
  its bytes count once and it moves once) and the pack returns a Saved
  handle (storage, offset, sizes, strides). Storages smaller than
  ``min_bytes`` are not movable (a copy would cost more than it frees).
- unpack(h): the planner makes the storage resident (waiting for its
  prefetch, or fetching it), then the view is rebuilt on that storage
  with the original offset, sizes and strides, so the backward kernels
  see the layout they would have seen: gradients are bit for bit those
  without LMS.
- A handle that dies (autograd frees a node's saved tensors after running
  it) is queued; the queue is drained under the lock at the next pack,
  unpack or query, and an entry whose handles are all gone is released.
- The device is the model's at enable(): a model moved to a GPU after
  enable() is refused at its first saved tensor; on a GPU, tensors saved
  on the CPU (or another GPU) are left alone.
- A storage is matched while the planner holds it on the device, or,
  once it left, only for the very tensor object first saved (a freed
  storage's address can be reused by a new tensor; a live tensor's
  storage cannot be freed).
"""

import collections
import threading
import weakref

import torch

from kolo.torch import errors
from kolo.torch.lms.planner import OFFLOADED, Planner


def _storage(t):
    """The tensor's untyped storage (torch 2.x) or typed one (1.13)."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()


def _whole(t):
    """A 1-d tensor of t's dtype over t's whole storage."""
    st = _storage(t)
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    if hasattr(t, "untyped_storage"):
        return out.set_(st, 0, (st.nbytes() // t.element_size(),), (1,))
    return out.set_(st)


def _view(base, offset, size, stride):
    return torch.empty(0, dtype=base.dtype, device=base.device).set_(
        _storage(base), offset, size, stride)


class Storage:
    """A planner entry's payload: the device storage (``base``) or its host
    copy (``host``), and the live handle count."""

    __slots__ = ("key", "base", "host", "event", "handles", "entry", "origin",
                 "__weakref__")

    def __init__(self, key, base, origin):
        self.key, self.base, self.host, self.event = key, base, None, None
        self.handles, self.entry, self.origin = 0, None, origin

    def holds(self, t, key):
        """Whether saving ``t`` (storage ``key``) is saving this storage
        again: it is on the device at that address, or it left and ``t`` is
        the very tensor first saved (alive, so its storage was not freed)."""
        if self.base is not None:
            return _storage(self.base).data_ptr() == key[0]
        return self.origin() is t


class Saved:
    """What pack returns for a tracked tensor."""

    __slots__ = ("storage", "offset", "size", "stride", "owner", "__weakref__")

    def __init__(self, storage, t, owner):
        self.storage, self.owner = storage, owner
        self.offset, self.size, self.stride = t.storage_offset(), t.size(), t.stride()

    def __del__(self):
        self.owner._dead.append(self.storage)


class ActivationOffload:
    """The hooks of one kolo.torch.lms.enable(); ``hooks()`` is the context
    manager its model's forward runs under."""

    def __init__(self, limit, prefetch, mover, meter, min_bytes, device):
        self.planner = Planner(limit, prefetch, mover, meter)
        self.device = device
        self.mover = mover
        self.min_bytes = min_bytes
        self._lock = threading.Lock()
        self._dead = collections.deque()
        self._live = {}  # storage key -> Storage held on the device
        self._all = weakref.WeakSet()  # every Storage not yet freed

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def _drain(self):
        while self._dead:
            s = self._dead.popleft()
            s.handles -= 1
            if s.handles == 0 and s.entry is not None:
                if self._live.get(s.key) is s:
                    del self._live[s.key]
                self.planner.release(s.entry)
                s.base = None

    def pack(self, t):
        base = t._base if t._base is not None else t
        if base.is_leaf and base.requires_grad:  # a parameter or a view of one
            return t
        if t.device != self.device:
            if self.device.type == "cpu":
                raise errors.invalid_argument(
                    "kolo.torch.lms: enable() saw the model on the CPU, but forward "
                    "saved a tensor on %s; call enable() after model.to(device)"
                    % t.device)
            return t  # host (or another device's) memory: not this budget
        key = (_storage(t).data_ptr(), t.device, t.dtype)
        with self._lock:
            self._drain()
            s = self._live.get(key)
            if s is None or not s.holds(t, key):
                s = Storage(key, _whole(t), weakref.ref(t))
                self._all.add(s)
                nbytes = s.base.numel() * s.base.element_size()
                self._live[key] = s
                s.entry = self.planner.save(nbytes, nbytes >= self.min_bytes, s)
            s.handles += 1
            return Saved(s, t, self)

    def unpack(self, h):
        if isinstance(h, torch.Tensor):
            return h
        with self._lock:
            self._drain()
            s = h.storage
            self.planner.use(s.entry)
            if s.entry.state == OFFLOADED or s.base is None:
                raise RuntimeError("kolo.torch.lms: saved storage %d is not on the "
                                   "device after use()" % s.entry.index)
            base = s.base
        return _view(base, h.offset, h.size, h.stride)

    def drain(self):
        with self._lock:
            self._drain()

    def held_storages(self):
        """The distinct device storages the hooks hold now, {data_ptr:
        nbytes}, read from the tensors themselves (every Storage alive,
        not the planner's lists: the tests' cross-check of its count)."""
        with self._lock:
            self._drain()
            out = {}
            for s in list(self._all):
                base = s.base
                if base is not None:
                    st = _storage(base)
                    out[st.data_ptr()] = st.nbytes()
            return out

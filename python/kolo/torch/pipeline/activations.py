"""Bytes of activations a pipeline stage holds: ``ActivationMeter`` counts
the storage of every tensor autograd saves for the backward while its
``saving()`` context is on (torch.autograd.graph.saved_tensors_hooks), plus
the tensors the stage keeps itself (``hold``: its received inputs and its
outputs, until their micro-batch's backward).

Algorithm: a saved or held tensor is wrapped (as a detached alias) in a ``_Held`` whose
destruction (autograd freeing the graph after the backward, the stage
dropping its micro-batch) releases it. Bytes are counted per storage, once
however many tensors (views, the same tensor saved by two layers) share it:
a storage enters ``current`` with its first holder and leaves with its
last. ``peak`` is the most ``current`` reached since ``reset``.

Not counted: the stage's parameters and the storages named in
``exclude`` (the user's batch and targets, held by the caller anyway), and
what a checkpointed forward saves only while recomputing in the backward
(torch.utils.checkpoint's own hooks replace ours inside it).
"""

import torch


def _storage(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


class _Held:
    __slots__ = ("tensor", "key", "meter")

    def __init__(self, tensor, key, meter):
        self.tensor, self.key, self.meter = tensor, key, meter

    def __del__(self):
        self.meter._release(self.key)


class ActivationMeter:
    def __init__(self, parameters=()):
        self._params = {_storage(p)[0] for p in parameters}
        self._live = {}  # storage pointer -> [holders, bytes]
        self._exclude = set()
        self.current = self.peak = 0

    def reset(self, exclude=()):
        """At the start of a step; ``exclude``: tensors not to count."""
        self._exclude = {_storage(t)[0] for t in exclude if isinstance(t, torch.Tensor)}
        self.peak = self.current

    def hold(self, tensor):
        """A holder of ``tensor`` that counts it while it lives (None for a
        tensor not counted)."""
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            return None
        ptr, nbytes = _storage(tensor)
        if ptr == 0 or ptr in self._params or ptr in self._exclude:
            return None
        entry = self._live.get(ptr)
        if entry is None:
            self._live[ptr] = [1, nbytes]
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        else:
            entry[0] += 1
        # A detached alias: holding the tensor itself would tie a saved
        # output to its own grad_fn in a cycle that Python cannot collect.
        return _Held(tensor.detach(), ptr, self)

    def _release(self, ptr):
        entry = self._live[ptr]
        entry[0] -= 1
        if entry[0] == 0:
            del self._live[ptr]
            self.current -= entry[1]

    def _pack(self, tensor):
        held = self.hold(tensor)
        return tensor if held is None else held

    @staticmethod
    def _unpack(packed):
        return packed.tensor if isinstance(packed, _Held) else packed

    def saving(self):
        """Context in which autograd's saved tensors are counted."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

"""Stages 1 and 2 with ``overlap_params=True``: the parameters' allgather
after the step runs during the next forward instead of inside ``step()``.

``step()`` updates this rank's pieces, queues every bucket's allgather in
forward order (the reverse of the bucket order, since buckets are filled
from the last parameter), starts the first ``window`` of them and returns.
The forward pre-hook of a module whose own parameters lie in a queued or
running bucket waits for that bucket (starting it first if it is still
queued) and then starts queued buckets until ``window`` run again, so each
allgather overlaps the compute of the layers before it and at most
``window`` gathered vectors are staged at once.

Which modules hold the parameters is learned from the first forward after
the optimizer is built (a global forward pre-hook, removed when backward
first reaches one of the optimizer's parameters): each module owning some
of them (``parameters(recurse=False)``) gets a forward pre-hook waiting
for its buckets and state-dict hooks waiting for every bucket (so
``model.state_dict()`` and ``model.load_state_dict()`` see and keep the
updated values); the outermost module called that contains any of them
waits in its pre-hook for the buckets of parameters no called module owns
(used directly by a parent's forward). If that forward saw none of them,
overlapping is off and ``step()`` waits as without it.

Everything else waits for all buckets first: the optimizer's own calls
(``step``, ``synchronize``, ``state_dict``, ``gathered_state``, clipping,
checkpoints, elastic commits) and ``kolo.torch.zero.full_parameters``
(``wait_params()`` on each live optimizer). Parameters read or written in
place outside the model's forward between ``step()`` and the next forward
(weight clipping, printing) need ``opt.wait_params()`` first: a write
would be overwritten by the gather still in flight.
"""

import collections
import weakref

from torch.nn.modules.module import register_module_forward_pre_hook


# Optimizers with overlap_params (kolo.torch.zero.full_parameters waits for
# each).
live = weakref.WeakSet()


class ParamGathers:
    """The allgathers of one optimizer's parameters, started by step() and
    finished by the forward hooks (module docstring)."""

    def __init__(self, opt, window):
        self._opt = weakref.ref(opt)
        self.window = window
        self.bucket_of = {}
        for b in opt._buckets:
            for p in b.params:
                self.bucket_of[p] = b
        self.queued = collections.deque()          # buckets not started yet
        self.running = collections.OrderedDict()   # index -> handle
        self.enabled = False                       # learned, hooks installed
        self._seen = []                            # modules owning parameters
        self._root = None
        self._hooks = []
        self._learner = register_module_forward_pre_hook(self._learn)
        live.add(opt)

    # --- learning which modules hold the parameters -------------------------

    def _learn(self, module, inputs):
        own = [p for p in module._parameters.values() if p is not None and p in self.bucket_of]
        if own and module not in self._seen:
            self._seen.append(module)
        if self._root is None and any(p in self.bucket_of for p in module.parameters()):
            self._root = module

    @property
    def learned(self):
        return self._learner is None

    def end_learning(self):
        """Installs the per-module hooks (the first gradient hook calls it)."""
        if self._learner is None:
            return
        self._learner.remove()
        self._learner = None
        if not self._seen:
            return
        owned = set()
        for m in self._seen:
            buckets = []
            for p in m._parameters.values():
                b = self.bucket_of.get(p)
                if b is not None and b not in buckets:
                    buckets.append(b)
                owned.add(p)
            self._hooks.append(m.register_forward_pre_hook(
                lambda mod, inp, bs=tuple(buckets): self.wait_buckets(bs)))
            self._hooks.append(m._register_state_dict_hook(
                lambda *_: self.wait_all()))
            self._hooks.append(m._register_load_state_dict_pre_hook(
                lambda *_: self.wait_all()))
        orphans = []
        for p, b in self.bucket_of.items():
            if p not in owned and b not in orphans:
                orphans.append(b)
        if orphans and self._root is not None:
            self._hooks.append(self._root.register_forward_pre_hook(
                lambda mod, inp, bs=tuple(orphans): self.wait_buckets(bs)))
        elif orphans:
            return  # parameters no module call reaches: step() waits
        self.enabled = True

    # --- the gathers --------------------------------------------------------

    def start(self, buckets):
        """Queues the buckets' allgathers (in this order) and starts the
        first ``window``."""
        self.wait_all()
        self.queued.extend(buckets)
        self._top_up()

    def _start(self, b):
        self.running[b.index] = self._opt()._start_param_gather(b)

    def _top_up(self):
        while self.queued and len(self.running) < self.window:
            self._start(self.queued.popleft())

    def wait_buckets(self, buckets):
        for b in buckets:
            if b.index not in self.running and b in self.queued:
                # Needed before its turn: start everything queued before it
                # too (the ranks submit in the same order).
                while b.index not in self.running:
                    self._start(self.queued.popleft())
            handle = self.running.pop(b.index, None)
            if handle is not None:
                handle.wait()
        self._top_up()

    def wait_all(self):
        first_error = None
        while self.queued or self.running:
            if not self.running:
                self._start(self.queued.popleft())
            _, handle = self.running.popitem(last=False)
            try:
                handle.wait()
            except Exception as e:  # still wait for the others
                first_error = first_error or e
            self._top_up()
        if first_error is not None:
            raise first_error

    def drop(self):
        """Elastic training: forgets what the old world had queued or in
        flight (its runtime is gone)."""
        self.queued.clear()
        self.running.clear()

    def relayout(self, opt):
        self.drop()
        self.bucket_of = {p: b for b in opt._buckets for p in b.params}

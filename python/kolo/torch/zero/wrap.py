"""Stage 3: ``wrap(model)`` shards the parameters of a model and installs
the hooks that gather them around each module's forward and backward.

Every module that owns parameters directly (``parameters(recurse=False)``)
becomes a *unit*: its parameters form one bucket (layout.py), of which this
rank keeps its block (``shard_buf``, ``ceil(total / N)`` elements) and
nothing else. The parameters themselves stay the same objects (so
``model.parameters()``, optimizers built on them and ``named_parameters``
keep working) and their shapes, but their storage (the unit's flat vector)
is 0 bytes while released (see Unit).

The hooks:
- forward pre-hook of a unit: gather it (waiting for its prefetch if one is
  in flight), then start the allgather of the next unit in forward order
  (the order of the previous forward), overlapped with this one's compute;
- forward hook: register a hook on the outputs' gradients, then release;
- output-gradient hook (runs just before the unit's backward): make the
  parameters' gradients views of one zeroed flat vector that the optimizer
  reduce-scatters as it is (Unit.prepare_grads), gather the unit again,
  prefetch the previous unit in forward order, and queue one callback
  for the end of backward that releases whatever is still gathered;
- the optimizer (stage 3) releases a unit once backward has produced the
  gradients of all its trainable parameters and starts their
  reduce-scatter.

At most two units are gathered at once (the current and the prefetched one)
outside ``full_parameters(model)``, which gathers every unit for a block
(evaluation, checkpoints), optionally writing changes back to the shards.
"""

import contextlib

import torch

from kolo.torch import errors
from kolo.torch.process_sets import global_process_set
from kolo.torch.zero import comm
from kolo.torch.zero.layout import Bucket, check_flat, is_view_at, resize_storage

_units_made = [0]


class Unit:
    """One module's parameters, sharded.

    ``flat`` is the unit's padded flat vector; each parameter's data is a
    view of it, set once. Released, ``flat``'s storage is resized to 0
    bytes: the parameters keep their shapes (autograd's accumulators and
    saved views stay valid) but hold no memory, also where the autograd
    graph keeps views of them (a linear layer saves its weight's
    transpose). Gathered, the storage is allocated again and the
    allgather writes into it, so saved views see the values again."""

    def __init__(self, module, named, process_set, uid):
        self.module = module
        self.process_set = process_set
        self.uid = uid
        # Its allgathers' name; the stage-3 optimizer renames it with an id
        # the ranks agree on.
        self.name = "zero.unit.%d" % uid
        size, rank = process_set.size(), process_set.rank()
        self.bucket = Bucket(uid, named, size, rank)
        self.bucket.unit = self
        b = self.bucket
        self.shapes = {p: tuple(p.shape) for _, p in named}
        self.flat = torch.zeros(b.padded, dtype=b.dtype)
        with torch.no_grad():
            for p, off, n in zip(b.params, b.offsets, b.numels):
                self.flat[off:off + n].copy_(p.data.reshape(-1))
                p.data = self.flat[off:off + n].view(self.shapes[p])
                p._kolo_zero_unit = self
        self.shard_buf = self.flat[b.begin:b.begin + b.shard].clone()
        self.grad_flat = None
        # Set by the stage-3 optimizer: makes room for one more gradient
        # vector (finishes the oldest reduce-scatter when two are in flight);
        # a weakref.WeakMethod, so the unit does not keep the optimizer alive.
        self.before_grads = None
        self.gathered = True
        self.pending = None
        self.pinned = False
        self.release()

    def place(self, size, rank):
        """Elastic training: this unit's share of a world of ``size`` ranks.
        The shard is zeroed (the caller fills it); a gather of the old world
        in flight is dropped, not waited for (its runtime is gone)."""
        b = self.bucket
        b.place(size, rank)
        self.pending = None
        self.pinned = False
        resize_storage(self.flat, b.padded)
        self.flat = self.flat.as_strided((b.padded,), (1,), 0)
        self.shard_buf = torch.zeros(b.shard, dtype=b.dtype)
        self.grad_flat = None
        self.gathered = True
        self.release()

    def shape_of(self, p):
        return self.shapes[p]

    def start_gather(self):
        if self.gathered or self.pending is not None:
            return
        resize_storage(self.flat, self.bucket.padded)
        self.pending = comm.start_allgather_into(self.shard_buf, self.flat, self.name,
                                                 self.process_set)

    def gather(self):
        if self.gathered and self.pending is None:
            return
        self.start_gather()
        pending, self.pending = self.pending, None
        pending.wait()
        self.gathered = True

    def release(self):
        if self.pinned:
            return
        if self.pending is not None:  # never free memory the runtime writes into
            self.pending.wait()
            self.pending = None
        resize_storage(self.flat, 0)
        self.gathered = False

    def prepare_grads(self):
        """Before the unit's backward: if none of its parameters has a
        gradient yet, their ``grad`` become views of one zeroed padded flat
        vector ``grad_flat``, which autograd accumulates into in place, so
        the optimizer reduce-scatters it without flattening a copy (one
        buffer of the unit's size fewer alive in backward)."""
        b = self.bucket
        trainable = [(p, off) for p, off in zip(b.params, b.offsets) if p.requires_grad]
        if any(p.grad is not None for p, _ in trainable):
            return
        make_room = self.before_grads() if self.before_grads is not None else None
        if make_room is not None:
            make_room()
        self.grad_flat = torch.zeros(b.padded, dtype=b.dtype, device=self.flat.device)
        for p, off in trainable:
            p.grad = self.grad_flat[off:off + p.numel()].view(self.shapes[p])

    def take_grad_flat(self):
        """``grad_flat`` if every trainable parameter's gradient is still
        its view (the optimizer then owns it), else None."""
        flat, self.grad_flat = self.grad_flat, None
        if flat is None:
            return None
        b = self.bucket
        for p, off in zip(b.params, b.offsets):
            if p.requires_grad and not is_view_at(p.grad, flat, off):
                return None
        return flat

    def write_back(self):
        """The gathered parameters' owned elements into the shard."""
        b = self.bucket
        self.shard_buf[:b.owned].copy_(self.flat[b.begin:b.end])


class _Sharded:
    """The hooks' state of one wrapped model."""

    def __init__(self, units):
        self.units = units
        self.order = []          # units in the order of the last forward
        self.recording = []
        self.callback_queued = False

    def begin_forward(self, module, inputs):
        self.recording = []

    def end_forward(self, module, inputs, output):
        if self.recording:
            self.order = self.recording

    def _neighbour(self, unit, step):
        try:
            i = self.order.index(unit) + step
        except ValueError:
            return None
        return self.order[i] if 0 <= i < len(self.order) else None

    def pre_forward(self, unit):
        if unit not in self.recording:
            self.recording.append(unit)
        unit.gather()
        nxt = self._neighbour(unit, 1)
        if nxt is not None:
            nxt.start_gather()

    def post_forward(self, unit, output):
        if torch.is_grad_enabled():
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(lambda g, unit=unit: self.pre_backward(unit))
        unit.release()

    def pre_backward(self, unit):
        if not self.callback_queued:
            torch.autograd.Variable._execution_engine.queue_callback(self.end_backward)
            self.callback_queued = True
        unit.prepare_grads()
        unit.gather()
        prev = self._neighbour(unit, -1)
        if prev is not None:
            prev.start_gather()

    def end_backward(self):
        self.callback_queued = False
        for u in self.units:
            u.release()  # also waits for a prefetch backward did not use


def _tensors(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in _tensors(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in _tensors(o)]
    return []


def wrap(model, process_set=None):
    """Shards ``model``'s parameters across the ranks of ``process_set``
    (default: all) and installs the stage-3 hooks; returns ``model``.
    Every rank must hold the same parameters when it is called (broadcast
    them first). Build the optimizer afterwards, on ``model.parameters()``,
    and wrap it with ``DistributedOptimizer(..., stage=3)``."""
    if process_set is None:
        process_set = global_process_set
    if getattr(model, "_kolo_zero", None) is not None:
        raise errors.invalid_argument("kolo.torch.zero.wrap: the model is already wrapped")
    owner = {}
    plan = []
    for mname, module in model.named_modules():
        named = []
        for pname, p in module.named_parameters(recurse=False):
            full = "%s.%s" % (mname, pname) if mname else pname
            if p in owner:
                raise errors.invalid_argument(
                    "kolo.torch.zero.wrap: parameter '%s' is shared with '%s'; shared "
                    "parameters are not supported at stage 3" % (full, owner[p]))
            owner[p] = full
            check_flat(p, full)
            named.append((full, p))
        if named:
            dtypes = {p.dtype for _, p in named}
            if len(dtypes) > 1:
                raise errors.invalid_argument(
                    "kolo.torch.zero.wrap: module '%s' mixes parameter dtypes %s" %
                    (mname, sorted(str(d) for d in dtypes)))
            plan.append((module, named))
    units = []
    for module, named in plan:
        units.append(Unit(module, named, process_set, _units_made[0]))
        _units_made[0] += 1
    state = _Sharded(units)
    model.register_forward_pre_hook(state.begin_forward)
    for unit in units:
        unit.module.register_forward_pre_hook(lambda m, i, u=unit: state.pre_forward(u))
        unit.module.register_forward_hook(lambda m, i, o, u=unit: state.post_forward(u, o))
    model.register_forward_hook(state.end_forward)
    model._kolo_zero = state
    return model


@contextlib.contextmanager
def full_parameters(model, write_back=False):
    """Inside, every parameter of the wrapped ``model`` holds its full value
    (collective: each unit is allgathered). With ``write_back``, changes
    made inside are kept (each rank takes its own elements)."""
    from kolo.torch.zero.overlap import live
    for opt in list(live):
        opt.wait_params()  # stages 1 and 2 with overlap_params
    state = getattr(model, "_kolo_zero", None)
    if state is None:
        yield model
        return
    for u in state.units:
        u.gather()
        u.pinned = True
    try:
        yield model
        if write_back:
            for u in state.units:
                u.write_back()
    finally:
        for u in state.units:
            u.pinned = False
            u.release()

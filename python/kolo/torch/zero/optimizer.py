"""kolo.torch.zero.DistributedOptimizer: data parallelism with the training
state sharded across the ranks (ZeRO stages 1, 2 and 3).

Each rank owns 1/N of every bucket of parameters (layout.py) and keeps the
wrapped optimizer's state for those elements only: the wrapped optimizer's
param groups hold *pieces*, 1-d views of the owned elements, with the
groups' own hyperparameters, so LR schedulers keep working.

- Stage 1: backward fills ``p.grad``, which are views of one padded flat
  vector per bucket (from the first step on: _grad_views). A hook on each
  parameter's gradient accumulator counts the bucket's parameters; when
  backward has produced the last of them, the bucket's reduce-scatter
  (comm.py) of that vector starts while backward goes on. ``synchronize()``
  (called by ``step()``) writes each averaged block into the owned slice of
  ``p.grad`` (so no memory beyond the full gradients); the step updates the
  pieces and each bucket's updated elements are allgathered into every
  rank's parameters. Bytes per step: one reduce-scatter plus one
  allgather, one allreduce's worth.
- Stage 2: as 1, and ``p.grad`` is freed once flattened: each rank keeps
  only its block of the averaged gradient.
- Stage 3: as 2, and the parameters are sharded too: ``wrap(model)``
  (wrap.py) turns each module that owns parameters into a unit (a bucket)
  whose full parameters exist only between the allgather before its forward
  or backward and the release after; the pieces are views of the unit's
  owned shard, so the step needs no allgather.

With ``backward_passes_per_step = k`` the hooks count down as
kolo.torch.DistributedOptimizer's do: passes 1..k-1 accumulate into
``p.grad`` locally, the k-th reduces. Parameters whose gradient never came
(unused, or fewer passes) reduce zeros in ``synchronize()``, so every rank
submits the same collectives. With ``KOLO_DETERMINISTIC=1`` the gradients
are bit for bit those of kolo.torch.DistributedOptimizer (comm.py), and an
elementwise optimizer then computes the same parameters and state.

Construction is collective: the ranks compare stage, names, shapes and
dtypes (an allgather) and raise MismatchError naming the first difference.
Except on a worker that joins a running elastic job (elastic generation > 1
when it is built, kolo.torch.zero.elastic.joining): the others are training
and build nothing, so it builds locally and the comparison happens when it
joins their re-shard (kolo.torch.elastic.TorchState's first sync).
"""

import collections
import contextlib
import math
import weakref

import torch

from kolo.torch import collectives as C
from kolo.torch import errors
from kolo.torch.compression import Compression
from kolo.torch.functions import allgather_object
from kolo.torch.process_sets import global_process_set
from kolo.torch.zero import comm
from kolo.torch.zero.elastic import joining
from kolo.torch.zero.layout import check_flat, is_view_at, resize_storage, split_buckets

# Buckets whose flat copies may be in flight at once where nothing else
# bounds them (stage 1's reduce-scatters, every stage's allgathers).
_WINDOW = 2

# Optimizers whose update of an element depends on other elements (a
# per-tensor norm or factorization): on pieces they would compute something
# else, so they are refused.
_NOT_ELEMENTWISE = ("LARS", "LAMB", "Lamb", "Adafactor", "LBFGS", "NovoGrad")

# The next optimizer id. Operation names carry it; the ranks agree on it at
# construction (the largest proposal), since ranks of different process sets
# may have built different numbers of optimizers.
_next_id = [0]

_WHAT = "kolo.torch.zero.DistributedOptimizer"


def full_shape(p):
    """A parameter's shape, also while stage 3 has released it."""
    unit = getattr(p, "_kolo_zero_unit", None)
    return unit.shape_of(p) if unit is not None else tuple(p.shape)


def _named(param_groups, named_parameters):
    """(names by parameter, list of (name, parameter, group index))."""
    all_params = [(gi, p) for gi, g in enumerate(param_groups) for p in g["params"]]
    if named_parameters is None:
        names = {p: "zero.noname.%d" % i for i, (_, p) in enumerate(all_params)}
    else:
        named_parameters = list(named_parameters)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named_parameters):
            raise ValueError(
                "named_parameters should be a sequence of (name, parameter) tuples, "
                "usually produced by model.named_parameters()")
        listed = [n for n, _ in named_parameters]
        dups = sorted({n for n in listed if listed.count(n) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. "
                             "Found duplicates: %s" % ", ".join(dups))
        names = {p: n for n, p in named_parameters}
        unnamed = [p for _, p in all_params if p not in names]
        if unnamed:
            raise ValueError(
                "%s: named_parameters was given, but %d of the optimizer's parameters "
                "are not in it (shapes %s)" %
                (_WHAT, len(unnamed), [list(full_shape(p)) for p in unnamed]))
    trainable = [(names[p], p, gi) for gi, p in all_params if p.requires_grad]
    return names, trainable


def _flatten(b):
    """Stages 1 and 2: bucket ``b``'s parameters become views of one padded
    flat vector ``b.flat`` (their values copied in, the padding zero), so
    this rank's block is a slice of it and the allgather after the step
    writes into it directly. Called again when elastic training changes
    the world (the padding depends on the size)."""
    p0 = b.params[0]
    flat = torch.zeros(b.padded, dtype=b.dtype, device=p0.device)
    with torch.no_grad():
        for p, off, n in zip(b.params, b.offsets, b.numels):
            flat[off:off + n].copy_(p.data.reshape(-1))
            p.data = flat[off:off + n].view(p.shape)
    b.flat = flat


def _grad_views(b):
    """Stage 1: the bucket's gradients as views of one padded flat vector
    ``b.grad_flat`` (zeros where none), which is reduce-scattered as it is.
    Gradients that are not views of it yet (the first backward, or after
    ``zero_grad(set_to_none=True)``) are copied in once and replaced by the
    views; autograd then accumulates into the views in place."""
    flat = getattr(b, "grad_flat", None)
    if flat is None or flat.numel() != b.padded:
        flat = b.grad_flat = torch.zeros(b.padded, dtype=b.dtype, device=b.flat.device)
    for p, off, n in zip(b.params, b.offsets, b.numels):
        g = p.grad
        if is_view_at(g, flat, off):
            continue
        view = flat[off:off + n]
        if g is None:
            view.zero_()
        else:
            view.copy_((g.to_dense() if g.is_sparse else g).reshape(-1))
        p.grad = view.view(p.shape)
    return flat


class _ZeroMixin:
    """Methods put in front of the wrapped optimizer's class."""

    # --- construction -------------------------------------------------------

    def _zero_setup(self, named_parameters, stage, bucket_mb, process_set,
                    compression, backward_passes_per_step, overlap_params=False):
        if stage not in (1, 2, 3):
            raise errors.invalid_argument("%s: stage must be 1, 2 or 3, got %r" % (_WHAT, stage))
        if not bucket_mb > 0:
            raise errors.invalid_argument("%s: bucket_mb must be > 0, got %r" % (_WHAT, bucket_mb))
        if backward_passes_per_step < 1:
            raise errors.invalid_argument(
                "%s: backward_passes_per_step must be >= 1, got %d" %
                (_WHAT, backward_passes_per_step))
        base = type(self).__mro__[2].__name__
        if base in _NOT_ELEMENTWISE:
            raise errors.invalid_argument(
                "%s: %s computes per-tensor quantities, which a shard of a tensor does "
                "not have; use kolo.torch.DistributedOptimizer" % (_WHAT, base))
        if any(len(s) for s in self.state.values()):
            raise errors.invalid_argument(
                "%s: the optimizer already has state; wrap it before its first step "
                "(kolo.torch.zero.load restores a checkpoint)" % _WHAT)
        self.process_set = process_set
        self.stage = stage
        self.backward_passes_per_step = int(backward_passes_per_step)
        self._compression = compression
        self._size = process_set.size()
        self._rank = process_set.rank()
        self._names, trainable = _named(self.param_groups, named_parameters)
        # The original groups by name (checkpoints: consolidate() rebuilds a
        # plain optimizer state_dict in this order).
        self._group_names = [[self._names[p] for p in g["params"]] for g in self.param_groups]
        for name, p, _ in trainable:
            if getattr(p, "_kolo_zero_unit", None) is None:
                check_flat(p, name)
        self._check_agree(trainable)
        self._zero_params = [p for _, p, _ in trainable]
        if stage == 3:
            self._buckets = self._unit_buckets(trainable)
        else:
            self._buckets = split_buckets([(n, p) for n, p, _ in trainable],
                                          int(bucket_mb * 2 ** 20), self._size, self._rank)
            for b in self._buckets:
                _flatten(b)
        self._gathers = None
        if overlap_params and stage < 3:
            from kolo.torch.zero.overlap import ParamGathers
            self._gathers = ParamGathers(self, _WINDOW)
        self._install_pieces(trainable)
        # Bucket index -> handle of its reduce-scatter, in launch order; the
        # buckets finished this step.
        self._handles = collections.OrderedDict()
        self._done = set()
        self._synchronized = False
        self._grad_accs = []
        self._delay = {p: self.backward_passes_per_step for p in self._zero_params}
        # Gradients still to come, per bucket.
        self._waiting = [len(getattr(b, "params_grad", b.params)) for b in self._buckets]
        self._seen = [0] * len(self._buckets)                  # stage 3: this pass
        self._register_hooks()

    def _check_agree(self, trainable):
        mine = {"stage": self.stage, "id": _next_id[0],
                "params": [(n, list(full_shape(p)), str(p.dtype)) for n, p, _ in trainable]}
        # What the ranks must agree on (compared again at an elastic join).
        self._agreement = (mine["stage"], mine["params"])
        self._joining = joining(self.process_set)
        if self._joining:
            self._id = _next_id[0]  # the old ranks' id is taken at the join
            _next_id[0] = self._id + 1
            return
        everyone = allgather_object(mine, name="zero.DistributedOptimizer.check",
                                    process_set=self.process_set)
        ranks = self.process_set.ranks
        self._id = max(e["id"] for e in everyone)
        _next_id[0] = self._id + 1
        first = everyone[0]
        for r, theirs in zip(ranks, everyone):
            if theirs["stage"] != first["stage"]:
                raise errors.mismatch(
                    "%s: stage %d on rank %d but stage %d on rank %d; every rank must "
                    "use the same stage" % (_WHAT, first["stage"], ranks[0], theirs["stage"], r))
            a = {n: (s, d) for n, s, d in first["params"]}
            b = {n: (s, d) for n, s, d in theirs["params"]}
            only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
            if only_a or only_b:
                parts = []
                if only_a:
                    parts.append("parameters %s exist on rank %d but not on rank %d"
                                 % (", ".join(only_a[:8]), ranks[0], r))
                if only_b:
                    parts.append("parameters %s exist on rank %d but not on rank %d"
                                 % (", ".join(only_b[:8]), r, ranks[0]))
                raise errors.mismatch("%s: the models differ across ranks: %s" %
                                      (_WHAT, "; ".join(parts)))
            for n, s, d in first["params"]:
                if b[n] != (s, d):
                    raise errors.mismatch(
                        "%s: parameter '%s' is %s %s on rank %d but %s %s on rank %d" %
                        (_WHAT, n, d, s, ranks[0], b[n][1], b[n][0], r))
            if [n for n, _, _ in theirs["params"]] != [n for n, _, _ in first["params"]]:
                raise errors.mismatch("%s: the parameters are in a different order on "
                                      "rank %d than on rank %d" % (_WHAT, r, ranks[0]))

    def _take_id(self, id_):
        """Elastic join: the id the old ranks agreed on (operation names)."""
        self._id = id_
        _next_id[0] = max(_next_id[0], id_ + 1)
        if self.stage == 3:
            for i, b in enumerate(self._buckets):
                b.unit.name = "zero%d.unit.%d" % (id_, i)

    def _unit_buckets(self, trainable):
        units = []
        for name, p, _ in trainable:
            unit = getattr(p, "_kolo_zero_unit", None)
            if unit is None:
                raise errors.invalid_argument(
                    "%s: stage 3 needs kolo.torch.zero.wrap(model) before the optimizer "
                    "is built; parameter '%s' is not in a wrapped module" % (_WHAT, name))
            if unit.process_set.ranks != self.process_set.ranks:
                raise errors.invalid_argument(
                    "%s: parameter '%s' was wrapped for ranks %s, the optimizer's process "
                    "set has ranks %s" % (_WHAT, name, unit.process_set.ranks,
                                          self.process_set.ranks))
            if unit not in units:
                units.append(unit)
        mine = set(self._zero_params)
        for unit in units:
            for uname, q in zip(unit.bucket.names, unit.bucket.params):
                if q.requires_grad and q not in mine:
                    raise errors.invalid_argument(
                        "%s: parameter '%s' of a wrapped module requires a gradient but "
                        "is not in the optimizer; at stage 3 give the optimizer every "
                        "trainable parameter of the wrapped model" % (_WHAT, uname))
        buckets = []
        for i, unit in enumerate(units):
            unit.bucket.index = i
            unit.name = "zero%d.unit.%d" % (self._id, i)
            unit.bucket.params_grad = [q for q in unit.bucket.params if q.requires_grad]
            unit.before_grads = weakref.WeakMethod(self._make_room)
            buckets.append(unit.bucket)
        return buckets

    def _install_pieces(self, trainable):
        """The wrapped optimizer's groups become the owned pieces."""
        group_of = {p: gi for _, p, gi in trainable}
        self._group_of = group_of
        groups = [dict(g, params=[]) for g in self.param_groups]
        self._pieces = []  # (bucket, piece, tensor the optimizer updates)
        for b in self._buckets:
            for pc in b.pieces:
                if pc.param not in group_of:
                    continue  # stage 3: a frozen parameter of a unit
                if self.stage == 3:
                    at = pc.bucket_begin - b.begin
                    t = b.unit.shard_buf[at:at + pc.numel]
                else:
                    t = pc.param.data.view(-1)[pc.begin:pc.end]
                groups[group_of[pc.param]]["params"].append(t)
                self._pieces.append((b, pc, t))
        self.param_groups = groups
        self.state = collections.defaultdict(dict)
        self._pieces_by_bucket = None

    def _relayout(self):
        """Elastic training, after the world changed: this rank's shares of
        every bucket for the process set's current size and rank (stage 3:
        the units' too, with zeroed shards). The pieces and the wrapped
        optimizer's state start empty (kolo.torch.zero.elastic fills them);
        what the old world had in flight is dropped, not waited for (its
        runtime is gone)."""
        self._size = self.process_set.size()
        self._rank = self.process_set.rank()
        for b in self._buckets:
            unit = getattr(b, "unit", None)
            if unit is not None:
                unit.place(self._size, self._rank)
            else:
                b.place(self._size, self._rank)
                _flatten(b)
        if self._gathers is not None:
            self._gathers.relayout(self)
        self._install_pieces([(None, p, gi) for p, gi in self._group_of.items()])
        self._handles = collections.OrderedDict()
        self._done = set()
        self._synchronized = False
        for p in self._zero_params:
            p.grad = None
            self._delay[p] = self.backward_passes_per_step
        self._waiting = [len(getattr(b, "params_grad", b.params)) for b in self._buckets]
        self._seen = [0] * len(self._buckets)

    def _register_hooks(self):
        bucket_of = {}
        for b in self._buckets:
            for p in b.params:
                bucket_of[p] = b
        for b in self._buckets:
            unit = getattr(b, "unit", None)
            if unit is not None and not unit.gathered:
                # expand_as checks the storage: lend it memory (not read).
                resize_storage(unit.flat, b.padded)
            with torch.enable_grad():
                for p in b.params:
                    if not p.requires_grad:
                        continue
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p, b))
                    self._grad_accs.append(grad_acc)
            if unit is not None and not unit.gathered:
                resize_storage(unit.flat, 0)

    # --- gradients ----------------------------------------------------------

    def _make_hook(self, p, b):
        def hook(*_):
            if self._gathers is not None and not self._gathers.learned:
                self._gathers.end_learning()
            if self._delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step (%d) "
                    "times before step(); raise backward_passes_per_step to accumulate "
                    "gradients locally" % self.backward_passes_per_step)
            self._delay[p] -= 1
            if self._delay[p] == 0:
                self._waiting[b.index] -= 1
                if self._waiting[b.index] == 0:
                    self._launch(b)
            if self.stage == 3:
                self._seen[b.index] += 1
                if self._seen[b.index] == len(b.params_grad):
                    self._seen[b.index] = 0
                    b.unit.release()  # this pass's backward of the unit is done
        return hook

    def _flat_grad(self, b):
        """The bucket's gradients, flattened and padded (zeros where none).
        Stage 3: the unit's gradient vector itself when backward wrote
        every gradient into it (Unit.prepare_grads)."""
        unit = getattr(b, "unit", None)
        if unit is not None:
            flat = unit.take_grad_flat()
            if flat is not None:
                return flat
        if self.stage == 1:
            return _grad_views(b)
        parts = []
        for p, n in zip(b.params, b.numels):
            g = p.grad
            if g is None:
                if self.stage == 1:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    g = p.grad
                else:
                    parts.append(torch.zeros(n, dtype=b.dtype))
                    continue
            parts.append((g.to_dense() if g.is_sparse else g).reshape(-1))
        if b.padded > b.total:
            parts.append(torch.zeros(b.padded - b.total, dtype=b.dtype))
        return torch.cat(parts) if len(parts) > 1 else parts[0].clone()

    def _launch(self, b):
        # Back-pressure: at most _WINDOW flat copies in flight, this one
        # included, so memory stays bounded when backward outruns the
        # network. The oldest is finished before this bucket is flattened:
        # at no moment are more than _WINDOW copies alive.
        while len(self._handles) >= _WINDOW:
            self._finish_oldest()
        flat = self._flat_grad(b)
        if self.stage >= 2:
            for p in b.params:
                p.grad = None
        self._handles[b.index] = comm.start_reduce_scatter(
            flat, "zero%d.grad.%d" % (self._id, b.index), self._size,
            self.process_set, self._compression)

    def _make_room(self):
        """Stage 3, before a unit's gradient vector is allocated: at most
        _WINDOW - 1 reduce-scatters stay in flight, so with the new vector
        no more than _WINDOW gradient vectors are alive."""
        while len(self._handles) >= _WINDOW:
            self._finish_oldest()

    def _finish_oldest(self):
        index = next(iter(self._handles))
        self._done.add(index)
        self._finish(self._buckets[index])

    def _finish(self, b):
        block = self._handles.pop(b.index).wait()
        for bb, pc, t in self._pieces_of[b.index]:
            at = pc.bucket_begin - b.begin
            part = block[at:at + pc.numel]
            if self.stage == 1:
                g = pc.param.grad.view(-1)[pc.begin:pc.end]
                g.copy_(part)
                t.grad = g
            else:
                t.grad = part.view_as(t)

    @property
    def _pieces_of(self):
        cache = getattr(self, "_pieces_by_bucket", None)
        if cache is None:
            cache = [[] for _ in self._buckets]
            for item in self._pieces:
                cache[item[0].index].append(item)
            self._pieces_by_bucket = cache
        return cache

    def synchronize(self):
        """Finishes this step's gradient reduction (starting the buckets whose
        hooks did not run); the pieces' ``grad`` then hold the averaged
        gradient of the owned elements."""
        self.wait_params()
        first_error = None
        for b in self._buckets:
            if b.index in self._handles or b.index in self._done:
                continue
            try:
                self._launch(b)
            except Exception as e:  # still wait for the others below
                first_error = first_error or e
        while self._handles:
            try:
                self._finish_oldest()
            except Exception as e:
                first_error = first_error or e
        self._done = set()
        for p in self._zero_params:
            self._delay[p] = self.backward_passes_per_step
        self._waiting = [len(getattr(b, "params_grad", b.params)) for b in self._buckets]
        self._seen = [0] * len(self._buckets)
        if self.stage == 3:
            for b in self._buckets:
                b.unit.release()
        if first_error is not None:
            raise first_error
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's pattern; here step() never reduces twice anyway."""
        yield

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Scales the gradients so that their global ``norm_type`` norm (over
        every rank's pieces) is at most ``max_norm``, as
        torch.nn.utils.clip_grad_norm_ does on whole gradients. Returns the
        norm before clipping. Synchronizes first if needed. Collective."""
        if not self._synchronized:
            self.synchronize()
        grads = [t.grad for _, _, t in self._pieces if t.grad is not None]
        norm_type = float(norm_type)
        if math.isinf(norm_type):
            local = max([float(g.abs().max()) for g in grads if g.numel()] or [0.0])
            op = C.Max
        else:
            local = sum(float(g.double().abs().pow(norm_type).sum()) for g in grads)
            op = C.Sum
        total = C.synchronize(C.allreduce_async(
            torch.tensor([local], dtype=torch.float64), name="zero%d.norm" % self._id,
            op=op, process_set=self.process_set))[0].item()
        if not math.isinf(norm_type):
            total = total ** (1.0 / norm_type)
        coef = float(max_norm) / (total + 1e-6)
        if coef < 1:
            for g in grads:
                g.mul_(coef)
        return torch.tensor(total)

    # --- step ---------------------------------------------------------------

    def step(self, closure=None):
        if not self._synchronized:
            self.synchronize()
        self.wait_params()
        self._synchronized = False
        result = super().step(closure)
        for _, _, t in self._pieces:
            t.grad = None
        if self.stage < 3:
            if self._gathers is not None and self._gathers.enabled:
                # Finished by the next forward's hooks (overlap.py).
                self._gathers.start(list(reversed(self._buckets)))
            else:
                self._allgather_params()
        return result

    def wait_params(self):
        """With ``overlap_params``: waits until the allgathers started by
        the last ``step()`` have written every parameter (needed before
        reading or changing parameters outside the model's forward);
        otherwise nothing to do."""
        if self._gathers is not None:
            if not self._gathers.learned:
                self._gathers.end_learning()
            self._gathers.wait_all()

    def _allgather_params(self):
        """Every rank's updated elements into every rank's parameters: each
        bucket's block of its flat vector (the parameters' storage,
        _flatten) is allgathered straight into that vector, so nothing is
        concatenated or copied out here."""
        pending = []
        for b in self._buckets:
            pending.append(self._start_param_gather(b))
            if len(pending) >= _WINDOW:
                pending.pop(0).wait()
        for handle in pending:
            handle.wait()

    def _start_param_gather(self, b):
        """Starts the allgather of this rank's block of bucket ``b``'s flat
        vector into the whole vector (stages 1 and 2)."""
        block = b.flat[b.rank * b.shard:(b.rank + 1) * b.shard]
        return comm.start_allgather_into(
            block, b.flat, "zero%d.params.%d" % (self._id, b.index), self.process_set)

    def zero_grad(self, set_to_none=False):
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(); the gradients are still "
                "being reduced")
        for _, _, t in self._pieces:
            t.grad = None
        for p in self._zero_params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step (between steps)."""
        self.backward_passes_per_step = int(passes)
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step

    # --- state --------------------------------------------------------------

    def gathered_state(self):
        """The wrapped optimizer's per-parameter state as it would be on whole
        parameters: {name: {key: tensor of the parameter's shape, or the
        scalar}}. Collective; every rank gets all of it."""
        self.wait_params()
        from kolo.torch.zero import state as zstate
        return zstate.gather_state(self)


def DistributedOptimizer(optimizer, named_parameters=None, stage=1, bucket_mb=25,
                         process_set=None, compression=Compression.none,
                         backward_passes_per_step=1, overlap_params=False):
    """Wraps ``optimizer`` for sharded data parallelism (module docstring).
    The result is an instance of a subclass of the optimizer's class whose
    param groups hold this rank's pieces. Collective.

    ``overlap_params`` (stages 1 and 2; stage 3 always overlaps): step()
    starts the parameters' allgather and returns; the next forward's
    module hooks wait for each bucket just before its parameters are used
    (overlap.py). Reading or changing parameters in place outside the
    model's forward after step() then needs ``wait_params()`` first."""
    if process_set is None:
        process_set = global_process_set
    if not process_set.included():
        raise errors.invalid_argument(
            "%s: this rank is not in the process set %r" % (_WHAT, process_set))
    base = optimizer.__class__
    cls = type(base.__name__, (_ZeroMixin, base), {"__module__": base.__module__})
    dist = cls.__new__(cls)
    dist.__dict__.update(optimizer.__dict__)
    dist._zero_setup(named_parameters, stage, bucket_mb, process_set, compression,
                     backward_passes_per_step, overlap_params)
    return dist

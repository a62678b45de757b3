"""DistributedOptimizer: averages gradients across ranks while backward runs.

How it works (Horovod's design):

- Each parameter that requires a gradient gets a hook on its gradient
  accumulator (the autograd node that adds into ``p.grad``). The hook runs
  as soon as backward has accumulated that parameter's gradient and starts
  an asynchronous in-place allreduce of ``p.grad`` (after compression) under
  the parameter's name, so communication overlaps the rest of backward; the
  runtime fuses the small ones.
- With ``backward_passes_per_step = k`` the hook counts down and starts the
  allreduce only at the k-th backward pass; earlier passes accumulate into
  ``p.grad`` locally, as plain PyTorch does.
- ``synchronize()`` starts an allreduce for every parameter whose hook did
  not fire (unused in this step, or fewer than k passes): a parameter without
  a gradient gets a zero gradient, so the ranks' names always match and no
  rank waits for ever. Then it waits for all, decompresses into ``p.grad``.
- ``step()`` synchronizes (unless inside ``skip_synchronize()`` after an
  explicit ``synchronize()``, the pattern for gradient clipping) and runs
  the wrapped optimizer's step.
- ``zero_grad()`` while allreduces are in flight raises: the runtime is
  still reading and writing those gradients.

The returned object is an instance of a subclass of the optimizer's own
class that shares the optimizer's attributes (param_groups, state,
defaults), so LR schedulers, ``isinstance`` checks and state_dict work
unchanged.

Construction is collective: the ranks compare their parameter names once
(an allgather of the name list) and raise MismatchError naming the first
difference, since names missing on some rank would otherwise never match.
In an elastic job the check waits for the elastic state's first sync
instead (a new worker builds its optimizer while the others train).
Shapes and dtypes are compared by the runtime on every allreduce (its
MismatchError names the parameter and the ranks with each shape).
"""

import contextlib
import warnings

import torch

from kolo import _native

from kolo.torch import collectives as C
from kolo.torch import errors
from kolo.torch.compression import Compression
from kolo.torch.functions import allgather_object
from kolo.torch.process_sets import global_process_set


class _DistributedMixin:
    """Methods added in front of the wrapped optimizer's class."""

    def _kolo_setup(self, named_parameters, compression, backward_passes_per_step,
                    op, gradient_predivide_factor, sparse_as_dense, process_set):
        if op == C.Adasum:
            raise errors.adasum_not_supported("DistributedOptimizer")
        if op not in C._REDUCE_OPS:
            raise errors.invalid_argument(
                "DistributedOptimizer: unknown op %r" % (op,))
        if gradient_predivide_factor != 1.0 and op != C.Average:
            raise errors.invalid_argument(
                "DistributedOptimizer: gradient_predivide_factor needs op=Average")
        if backward_passes_per_step < 1:
            raise errors.invalid_argument(
                "DistributedOptimizer: backward_passes_per_step must be >= 1, "
                "got %d" % backward_passes_per_step)
        self._compression = compression
        self._op = op
        self._predivide = float(gradient_predivide_factor)
        self._sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self.backward_passes_per_step = int(backward_passes_per_step)

        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
            if any(not isinstance(item, tuple) or len(item) != 2
                   for item in named_parameters):
                raise ValueError(
                    "named_parameters should be a sequence of (name, parameter) "
                    "tuples, usually produced by model.named_parameters()")
            names = [n for n, _ in named_parameters]
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                raise ValueError("Parameter names in named_parameters must be "
                                 "unique. Found duplicates: %s" % ", ".join(dups))
            self._parameter_names = {p: n for n, p in named_parameters}
            unnamed = [p for p in all_params if p not in self._parameter_names]
            if unnamed:
                raise ValueError(
                    "named_parameters was given, but %d of the optimizer's "
                    "parameters are not in it (shapes %s)" %
                    (len(unnamed), [list(p.shape) for p in unnamed]))
        else:
            self._parameter_names = {
                p: "allreduce.noname.%d" % i for i, p in enumerate(all_params)}

        self._handles = {}  # parameter -> (handle or None, compression ctx)
        self._allreduce_delay = {}
        self._requires_update = []
        self._grad_accs = []
        self._synchronized = False
        self._should_synchronize = True
        self._member = process_set.included()
        self._elastic = _native.elastic_world()[0] > 0
        self._all_params = all_params
        if self._member:
            if not self._elastic:
                self._check_names_agree(all_params)
            # An elastic worker may start while the others train: no
            # collective before the state's sync, which runs the check on
            # every rank of each new world (check_names_for_sync;
            # Horovod's elastic rule).
            self._register_hooks()

    def check_names_for_sync(self):
        """The construction's name check in an elastic job, run by the
        elastic state's sync (kolo.torch.elastic.TorchState) on every rank
        of each new world. Does nothing in other jobs."""
        if self._elastic and self._member:
            self._check_names_agree(self._all_params)

    def _check_names_agree(self, all_params):
        mine = [self._parameter_names[p] for p in all_params if p.requires_grad]
        everyone = allgather_object(mine, name="DistributedOptimizer.names",
                                    process_set=self.process_set)
        ranks = self.process_set.ranks
        for r, theirs in zip(ranks, everyone):
            if theirs == everyone[0]:
                continue
            first, other = set(everyone[0]), set(theirs)
            only_first = sorted(first - other)
            only_other = sorted(other - first)
            parts = []
            if only_first:
                parts.append("parameters %s exist on rank %d but not on rank %d"
                             % (", ".join(only_first[:8]), ranks[0], r))
            if only_other:
                parts.append("parameters %s exist on rank %d but not on rank %d"
                             % (", ".join(only_other[:8]), r, ranks[0]))
            detail = "; ".join(parts) or "the parameters are in a different order"
            raise errors.mismatch(
                "DistributedOptimizer: the models differ across ranks: %s "
                "(rank %d has %d parameters, rank %d has %d)" %
                (detail, ranks[0], len(everyone[0]), r, len(theirs)))

    def _register_hooks(self):
        with torch.enable_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if not p.requires_grad:
                        continue
                    self._requires_update.append(p)
                    self._allreduce_delay[p] = self.backward_passes_per_step
                    # The AccumulateGrad node of p; kept alive so that every
                    # backward pass reuses this node (and its hook).
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _make_hook(self, p):
        def hook(*_):
            handle = self._handles.get(p, (None, None))[0]
            if handle is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step "
                    "(%d) times before step(); raise backward_passes_per_step to "
                    "accumulate gradients locally" % self.backward_passes_per_step)
            self._allreduce_delay[p] -= 1
            entry = (None, None)
            if self._allreduce_delay[p] == 0:
                entry = self._allreduce_grad_async(p)
            self._handles[p] = entry
        return hook

    def _allreduce_grad_async(self, p):
        name = self._parameter_names[p]
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        grad = p.grad
        if grad.is_sparse:
            if not self._sparse_as_dense:
                # Horovod's sparse allreduce: an allgather of indices and
                # values; the handle is a function returning the result.
                return C.sparse_allreduce_async(grad, name=name, op=self._op,
                                                process_set=self.process_set), None
            grad = grad.to_dense()
        prescale, postscale = 1.0, 1.0
        if self._op == C.Average and self._predivide != 1.0:
            # Average divides by the rank count; split it around the sum.
            prescale, postscale = 1.0 / self._predivide, self._predivide
        compressed, ctx = self._compression.compress(grad)
        handle = C.allreduce_async_(compressed, name=name, op=self._op,
                                    prescale_factor=prescale,
                                    postscale_factor=postscale,
                                    process_set=self.process_set)
        return handle, (ctx, compressed)

    def _finish_grad(self, p, handle, info):
        """Waits for one parameter's reduction and puts it into p.grad."""
        if callable(handle):  # sparse allreduce
            p.grad.zero_().add_(handle())
            return
        output = C.synchronize(handle)
        ctx, compressed = info
        result = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:  # sparse_as_dense: back to sparse for the step
            p.grad.zero_().add_(result.to_sparse())
        elif result is not p.grad:
            with torch.no_grad():
                p.grad.copy_(result)

    def synchronize(self):
        """Finishes the gradient allreduces of this step (starting those
        whose hooks did not run); p.grad then holds the averaged gradient."""
        if not self._member:
            self._synchronized = True
            return
        first_error = None
        for p in self._requires_update:
            if self._handles.get(p, (None, None))[0] is None:
                try:
                    self._handles[p] = self._allreduce_grad_async(p)
                except Exception as e:  # still wait for the others below
                    self._handles.pop(p, None)
                    if first_error is None:
                        first_error = e
        for p, (handle, info) in list(self._handles.items()):
            try:
                self._finish_grad(p, handle, info)
            except Exception as e:  # wait for every handle, then raise
                if first_error is None:
                    first_error = e
        self._handles.clear()
        for p in self._requires_update:
            self._allreduce_delay[p] = self.backward_passes_per_step
        if first_error is not None:
            raise first_error
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside, step() does not synchronize: for
        ``optimizer.synchronize(); clip_grad_norm_(...); with
        optimizer.skip_synchronize(): optimizer.step()``."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(
                    "optimizer.step() called without optimizer.skip_synchronize() "
                    "after optimizer.synchronize(); the gradients are reduced "
                    "again (averaging already averaged values)")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def _kolo_local_step(self, closure=None):
        """The wrapped optimizer's own step (no gradient reduction)."""
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if any(h is not None for h, _ in self._handles.values()):
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but "
                "before optimizer.step() or optimizer.synchronize(); the "
                "gradients are still being reduced")
        return super().zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step (between steps)."""
        self.backward_passes_per_step = int(passes)
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=Compression.none,
                         backward_passes_per_step=1, op=C.Average,
                         gradient_predivide_factor=1.0, groups=None,
                         sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps ``optimizer`` so that gradients are averaged (``op``) across
    the ranks of ``process_set`` before each step. See the module docstring.

    ``groups`` (Horovod's explicit fusion groups) is accepted and ignored:
    kolo's runtime fuses ready allreduces itself; results are the same.
    Collective: every rank of the set constructs it.
    """
    del groups
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base),
               {"__module__": base.__module__})
    dist = cls.__new__(cls)
    dist.__dict__.update(optimizer.__dict__)
    dist._kolo_setup(named_parameters, compression, backward_passes_per_step,
                     op, gradient_predivide_factor, sparse_as_dense, process_set)
    return dist

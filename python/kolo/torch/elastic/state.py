"""Elastic training state (Horovod's ``hvd.elastic`` state objects).

A state object keeps a copy of what training needs to go on after a reset:
``commit()`` copies the live objects into host memory, ``restore()`` puts
the last commit back (after a failure), ``sync()`` makes every rank equal to
rank 0 (after a reset, when ranks may have joined). ``State``,
``ObjectState`` and the host-update notifications are kolo.elastic's,
shared with the other framework bindings. ``TorchState`` knows how
to copy and broadcast models, optimizers and ``ElasticSampler``; every other
keyword argument is a plain Python value, broadcast with ``broadcast_object``.

A kolo.torch.zero.DistributedOptimizer (and a model wrapped by
kolo.torch.zero.wrap) is handled shard-wise: its commit keeps this rank's
block and a copy of the next rank's, and ``reset()`` re-shards the
committed state onto the new world (kolo.torch.zero.elastic). A worker that
joins a running job (its zero optimizers built in a later elastic
generation) has no commit: its ``sync()`` first meets the old ranks'
re-shard (which they run in ``reset()``, before their own sync), in which
it takes its share of their committed state.

Beyond Horovod: when a reset changes the world size, ``TorchState`` rescales
the learning rate of its optimizers by kolo's scaling rule (``lr_rule``:
``"linear"`` by default, ``"sqrt"``, or ``"none"`` to leave it to the
user's reset callbacks, which run after it; see docs/elastic.md).
"""

import copy

import torch

from kolo.elastic import (ObjectState, State, _host_updates,  # noqa: F401
                          _poll_launcher, notify_hosts_updated)
from kolo.lr import scale_factor
from kolo.torch.elastic.sampler import ElasticSampler


def _hvd():
    import kolo.torch as hvd  # the package imports this module
    return hvd


class _Handler:
    """Saves, restores and syncs one framework object of a TorchState."""

    def __init__(self, value):
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        _hvd().broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        check = getattr(self.value, "check_names_for_sync", None)
        if check is not None:
            check()  # kolo's DistributedOptimizer in an elastic job
        _hvd().broadcast_optimizer_state(self.value, root_rank=0)

    def rescale_lr(self, factor):
        for group in self.value.param_groups:
            group["lr"] *= factor


class _ZeroOptimizerHandler(_OptimizerHandler):
    """A kolo.torch.zero.DistributedOptimizer: each rank holds a shard, so
    its commit is a zero.elastic.Snapshot (its own block and a copy of the
    next rank's, collective), restored locally after a failure and
    re-sharded by ``reset()`` when the world changed; ``sync()`` broadcasts
    only the hyperparameters (the shards are never equal across ranks)."""

    def __init__(self, value):
        from kolo.torch.zero.elastic import Snapshot
        if value.process_set is not _hvd().global_process_set:
            raise ValueError("TorchState: a kolo.torch.zero.DistributedOptimizer on a "
                             "process set (%r) cannot follow the world's changes; build it "
                             "on the global process set" % (value.process_set,))
        self._snapshot = Snapshot()
        # A joining worker's optimizer: no commit of its own (taking one is
        # collective, and the others are not building anything); its first
        # sync joins their re-shard.
        self._joining = bool(getattr(value, "_joining", False))
        super().__init__(value)

    def _groups(self):
        return [{k: v for k, v in g.items() if k != "params"} for g in self.value.param_groups]

    def save(self):
        self.prepare()
        self.keep()

    def prepare(self):
        """The collective half of a commit (TorchState.save runs it for every
        zero optimizer before saving anything, so that a rank lost here
        leaves the last commit whole). Nothing on a joining worker before
        its join (``join()``)."""
        if not self._joining:
            self._snapshot.take(self.value)

    def keep(self):
        """The local half: the prepared snapshot becomes the commit."""
        self._snapshot.keep()
        self._saved_groups = copy.deepcopy(self._groups())

    def restore(self):
        if self._joining:
            return  # nothing committed yet: the next sync joins again
        self._snapshot.restore(self.value)
        for group, saved in zip(self.value.param_groups, copy.deepcopy(self._saved_groups)):
            group.update(saved)

    def reshard(self):
        """After a reset: re-forms the shards for the new world from the
        commit (a new snapshot of it follows). Collective. A joiner whose
        join failed (a rank lost during its first sync) joins again here."""
        if self._joining:
            self.join()
            return
        if self._snapshot.reshard(self.value):
            self.save()

    def join(self):
        """A joining worker's first sync: its part of the re-shard that the
        old ranks run in ``reset()`` (the same collectives, in the same
        order: the re-shard, then the new world's commit). Collective."""
        if self._joining:
            from kolo.torch.zero.elastic import Snapshot
            self._snapshot = Snapshot()  # nothing of a failed try
            self._snapshot.reshard(self.value)
            self._joining = False
            self.save()  # the new world's commit, as the old ranks take it

    def sync(self):
        groups = _hvd().broadcast_object(self._groups(), root_rank=0,
                                         name="kolo.elastic.zero.groups")
        for group, saved in zip(self.value.param_groups, groups):
            group.update(saved)
        if not any(len(s) for s in self.value.state.values()):
            _initialize_pieces(self.value)


def _initialize_pieces(opt):
    """What broadcast_optimizer_state does to a fresh optimizer (as Horovod:
    one step with zero gradients, the parameters put back), on this rank's
    pieces: the wrapped optimizer's own step, no communication. So a zero
    optimizer's state in an elastic job follows the plain one's."""
    pieces = [t for g in opt.param_groups for t in g["params"]]
    saved = [t.detach().clone() for t in pieces]
    for t in pieces:
        t.grad = torch.zeros_like(t)
    type(opt).__mro__[2].step(opt)  # the wrapped optimizer's class (zero/optimizer.py)
    with torch.no_grad():
        for t, value in zip(pieces, saved):
            t.copy_(value)
            t.grad = None


class _ZeroModelHandler(_Handler):
    """A model wrapped by kolo.torch.zero.wrap (stage 3): its parameters are
    shards that its zero optimizer's snapshot keeps and re-shards; this
    keeps the model's other entries (buffers, parameters outside the
    units)."""

    def _extras(self):
        entries = self.value.state_dict(keep_vars=True)
        return {k: v.detach() for k, v in entries.items()
                if getattr(v, "_kolo_zero_unit", None) is None}

    def save(self):
        self._saved = {k: v.clone() for k, v in self._extras().items()}

    def restore(self):
        self.value.load_state_dict(self._saved, strict=False)

    def sync(self):
        _hvd().broadcast_parameters(self._extras(), root_rank=0)


def _zero_handler(value):
    """The handler class for kolo.torch.zero's objects, or None."""
    if isinstance(value, torch.optim.Optimizer) and hasattr(type(value), "_zero_setup"):
        return _ZeroOptimizerHandler
    if isinstance(value, torch.nn.Module) and getattr(value, "_kolo_zero", None) is not None:
        return _ZeroModelHandler
    return None


def _check_zero(handlers):
    """Every unit of a wrapped model must be re-sharded by a zero optimizer
    of the same state."""
    covered = {id(b) for h in handlers.values() if isinstance(h, _ZeroOptimizerHandler)
               for b in h.value._buckets}
    for name, h in handlers.items():
        if isinstance(h, _ZeroModelHandler):
            for unit in h.value._kolo_zero.units:
                if id(unit.bucket) not in covered:
                    raise ValueError(
                        "TorchState: '%s' is wrapped by kolo.torch.zero.wrap, but its "
                        "parameters %s are in no kolo.torch.zero.DistributedOptimizer of "
                        "this state, which would re-shard them when the world changes"
                        % (name, unit.bucket.names[:4]))


class _SamplerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        state = _hvd().broadcast_object(self.value.state_dict(), root_rank=0,
                                        name="kolo.elastic.sampler")
        self.value.load_state_dict(state)


class _SchedulerHandler(_SamplerHandler):
    """A learning-rate scheduler: saved, restored and broadcast through its
    state_dict, like a sampler."""


# The schedulers' public base class since torch 2.0 (LRScheduler); torch
# 1.13 has only _LRScheduler, which torch 2.x keeps as a subclass that the
# built-in schedulers no longer derive from.
_SCHEDULER_BASE = getattr(torch.optim.lr_scheduler, "LRScheduler",
                          torch.optim.lr_scheduler._LRScheduler)

_HANDLERS = [
    (torch.nn.Module, _ModelHandler),
    (torch.optim.Optimizer, _OptimizerHandler),
    (ElasticSampler, _SamplerHandler),
    (_SCHEDULER_BASE, _SchedulerHandler),
]

_LR_RULES = ("linear", "sqrt", "none")


class TorchState(ObjectState):
    """State of a PyTorch training process: ``model``, ``optimizer`` and any
    other keyword arguments (more models, optimizers and samplers are
    recognised by type; the rest are plain values), each an attribute.

    ``lr_rule`` (reserved keyword): how the optimizers' learning rates
    follow a change of world size at a reset: ``"linear"`` (default),
    ``"sqrt"`` or ``"none"``.
    """

    def __init__(self, model=None, optimizer=None, lr_rule="linear", **kwargs):
        if lr_rule not in _LR_RULES:
            raise ValueError("TorchState: lr_rule must be one of %s, got %r"
                             % (_LR_RULES, lr_rule))
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            cls = _zero_handler(value) or next(
                (h for t, h in _HANDLERS if isinstance(value, t)), None)
            if cls is not None:
                handlers[name] = cls(value)
            else:
                plain[name] = value
        _check_zero(handlers)
        object.__setattr__(self, "_handlers", handlers)
        object.__setattr__(self, "_lr_rule", lr_rule)
        object.__setattr__(self, "_world_size", _hvd().size())
        object.__setattr__(self, "_saved_world_size", self._world_size)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**plain)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def state_dict(self):
        """The live state as one dict (what kolo.torch.checkpoint writes):
        each model, optimizer, sampler and scheduler as its state_dict, the
        other attributes as they are."""
        d = {name: h.value.state_dict() for name, h in self._handlers.items()}
        d.update({name: getattr(self, name) for name in self._saved_state})
        return d

    def load_state_dict(self, d):
        """Loads a dict of state_dict() into the live objects (not committed:
        call commit() or save() after it)."""
        missing = [k for k in list(self._handlers) + list(self._saved_state) if k not in d]
        if missing:
            raise KeyError("TorchState.load_state_dict: no entry for %s" % ", ".join(missing))
        for name, handler in self._handlers.items():
            handler.value.load_state_dict(d[name])
        for name in self._saved_state:
            setattr(self, name, copy.deepcopy(d[name]))

    def save(self):
        zero = [h for h in self._handlers.values() if isinstance(h, _ZeroOptimizerHandler)]
        for handler in zero:
            handler.prepare()  # collective: may fail, before anything is saved
        for handler in self._handlers.values():
            if isinstance(handler, _ZeroOptimizerHandler):
                handler.keep()
            else:
                handler.save()
        super().save()
        # The learning rates just saved are scaled for this world size.
        object.__setattr__(self, "_saved_world_size", self._world_size)

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()
        object.__setattr__(self, "_world_size", self._saved_world_size)

    def sync(self):
        # A joining worker first meets the re-shard that the old ranks ran
        # in reset(), zero optimizer by zero optimizer, as they did.
        for handler in self._handlers.values():
            if isinstance(handler, _ZeroOptimizerHandler):
                handler.join()
        for handler in self._handlers.values():
            handler.sync()
        super().sync()
        object.__setattr__(self, "_world_size", _hvd().size())

    def reset(self):
        """After a reset: re-shard the zero optimizers' state (and stage 3's
        parameters) and the samplers for the new ranks, and rescale
        the learning rates for the new world size (before the user's
        callbacks, which may set them as they like)."""
        old, new = self._world_size, _hvd().size()
        for handler in self._handlers.values():
            if isinstance(handler, _ZeroOptimizerHandler):
                handler.reshard()
        for handler in self._handlers.values():
            if isinstance(handler, _SamplerHandler):
                handler.value.reset()
            elif isinstance(handler, _OptimizerHandler) and old != new \
                    and self._lr_rule != "none":
                handler.rescale_lr(scale_factor(new, self._lr_rule) /
                                   scale_factor(old, self._lr_rule))
        object.__setattr__(self, "_world_size", new)

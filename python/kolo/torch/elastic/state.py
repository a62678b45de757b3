"""Elastic training state (Horovod's ``hvd.elastic`` state objects).

A state object keeps a copy of what training needs to go on after a reset:
``commit()`` copies the live objects into host memory, ``restore()`` puts
the last commit back (after a failure), ``sync()`` makes every rank equal to
rank 0 (after a reset, when ranks may have joined). ``State``,
``ObjectState`` and the host-update notifications are kolo.elastic's,
shared with the other framework bindings. ``TorchState`` knows how
to copy and broadcast models, optimizers and ``ElasticSampler``; every other
keyword argument is a plain Python value, broadcast with ``broadcast_object``.

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
            cls = next((h for t, h in _HANDLERS if isinstance(value, t)), None)
            if cls is not None:
                handlers[name] = cls(value)
            else:
                plain[name] = value
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
        for handler in self._handlers.values():
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
        for handler in self._handlers.values():
            handler.sync()
        super().sync()
        object.__setattr__(self, "_world_size", _hvd().size())

    def reset(self):
        """After a reset: re-shard the samplers for the new ranks and rescale
        the learning rates for the new world size (before the user's
        callbacks, which may set them as they like)."""
        old, new = self._world_size, _hvd().size()
        for handler in self._handlers.values():
            if isinstance(handler, _SamplerHandler):
                handler.value.reset()
            elif isinstance(handler, _OptimizerHandler) and old != new \
                    and self._lr_rule != "none":
                handler.rescale_lr(scale_factor(new, self._lr_rule) /
                                   scale_factor(old, self._lr_rule))
        object.__setattr__(self, "_world_size", new)

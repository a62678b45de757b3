"""Optimizer-state offload (ZeRO-Offload's scheme): the optimizer's state
and a master copy of every parameter it updates live in host memory, and
the update runs on the CPU.

``offload_optimizer(opt)`` works on a torch optimizer, on
kolo.torch.DistributedOptimizer and on kolo.torch.zero.DistributedOptimizer
(stages 1-3, whose param groups hold this rank's pieces): the object's
class gets one more base, ``_HostStep``, placed just in front of the
wrapped torch optimizer's class, so the kolo wrapper's ``step()`` still
reduces the gradients first and its ``super().step()`` lands here:

1. GRAD_TO_HOST: each updated tensor ``p`` (parameter or piece) gets a host
   master ``h`` (created at its first step from p's values, in float32 for
   half/bfloat16 parameters, pinned on a GPU; state on the device - made
   before the offload, or loaded since - moves to the host); ``h.grad``
   receives a copy of ``p.grad``.
2. HOST_STEP: the param groups are pointed at the masters and the state is
   keyed by them, the torch optimizer's own step runs (on the CPU, as the
   masters are host tensors), then groups and state keys are put back:
   ``opt.state[p]`` holds host tensors, so state_dict, LR schedulers and
   zero's gathered_state see the usual structure.
3. PARAMS_TO_DEVICE: ``p.copy_(h)`` (cast back for half parameters).

On the CPU the copies are real but host and device are the same memory,
so the numerics are those of the plain optimizer (bit for bit: the same
kernels run on equal values); the masters and the state are separate
storages from the parameters, which the tests check. Each phase is a span
on kolo's timeline, track "lms optimizer".
"""

import torch

from kolo.torch import errors
from kolo.torch.lms import spans

TRACK = "lms optimizer"
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _to_host(t, dtype=None, pin=False):
    out = torch.empty(t.shape, dtype=dtype or t.dtype, device="cpu", pin_memory=pin)
    out.copy_(t)
    return out


class HostState:
    """The masters of one optimizer: {id(p): (p, h)} and p's version
    counter after the last copy back. A parameter changed in place since
    (loaded, broadcast) has another version: its master is read again."""

    def __init__(self):
        self.masters = {}
        self.versions = {}

    def master_of(self, opt, p):
        got = self.masters.get(id(p))
        if got is not None and got[0] is p:
            h = got[1]
            if self.versions.get(id(p)) != p._version:
                with torch.no_grad():
                    h.copy_(p)
            return h
        pin = p.is_cuda
        dtype = torch.float32 if p.dtype in _LOW_PRECISION else p.dtype
        h = _to_host(p.detach(), dtype, pin)
        self.masters[id(p)] = (p, h)
        return h

    @staticmethod
    def state_to_host(opt, p):
        """State made before the offload, or loaded since (load_state_dict
        casts it to the parameter's device), moves to the host."""
        state = opt.state.get(p)
        if state:
            for k, v in list(state.items()):
                if isinstance(v, torch.Tensor) and v.device.type != "cpu":
                    state[k] = _to_host(v)

    def prune(self, live):
        for key in [k for k in self.masters if k not in live]:
            del self.masters[key]
            self.versions.pop(key, None)


class _HostStep:
    """The step of the optimizer's own class, on host masters."""

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        host = self._kolo_lms_host
        groups = self.param_groups
        device_lists = [g["params"] for g in groups]
        pairs = []
        with spans.span(TRACK, "GRAD_TO_HOST"):
            host_lists = []
            for params in device_lists:
                hl = []
                for p in params:
                    h = host.master_of(self, p)
                    host.state_to_host(self, p)
                    if p.grad is None:
                        h.grad = None
                    elif h.grad is not None and h.grad.shape == p.grad.shape:
                        h.grad.copy_(p.grad, non_blocking=h.is_pinned())
                    else:
                        h.grad = _to_host(p.grad.detach(), h.dtype, h.is_pinned())
                    hl.append(h)
                    pairs.append((p, h))
                host_lists.append(hl)
            if any(p.is_cuda for p, _ in pairs):
                torch.cuda.synchronize()
        host.prune({id(p) for p, _ in pairs})
        state = self.state
        for p, h in pairs:
            if p in state:
                state[h] = state.pop(p)
        for g, hl in zip(groups, host_lists):
            g["params"] = hl
        try:
            with spans.span(TRACK, "HOST_STEP"):
                super().step()
        finally:
            for g, params in zip(groups, device_lists):
                g["params"] = params
            for p, h in pairs:
                if h in state:
                    state[p] = state.pop(h)
        with spans.span(TRACK, "PARAMS_TO_DEVICE"), torch.no_grad():
            for p, h in pairs:
                p.copy_(h, non_blocking=h.is_pinned())
                host.versions[id(p)] = p._version
        return loss


def _kolo_mixin(cls):
    """The kolo wrapper class in front of a wrapped optimizer's class
    (kolo.torch.DistributedOptimizer and zero's put theirs first)."""
    bases = cls.__bases__
    if len(bases) >= 2 and bases[0].__module__.startswith("kolo.torch"):
        return bases[0]
    return None


def offload_optimizer(opt):
    """Makes ``opt`` keep its state and master parameters on the host and
    step there (module docstring). Returns ``opt`` (the same object)."""
    if not isinstance(opt, torch.optim.Optimizer):
        raise errors.invalid_argument(
            "kolo.torch.lms: optimizer offload needs a torch.optim.Optimizer "
            "(or a kolo DistributedOptimizer), got %s" % type(opt).__name__)
    cls = type(opt)
    if issubclass(cls, _HostStep):
        return opt
    mixin = _kolo_mixin(cls)
    if mixin is not None:
        bases = (mixin, _HostStep) + cls.__bases__[1:]
    else:
        bases = (_HostStep, cls)
    opt.__class__ = type(cls.__name__, bases, {"__module__": cls.__module__})
    opt._kolo_lms_host = HostState()
    return opt


def placement(opt):
    """Where the offloaded optimizer's tensors live: {"masters": [(p, h)],
    "state": [(p, key, tensor)]} (the tests' structure check)."""
    host = getattr(opt, "_kolo_lms_host", None)
    if host is None:
        raise errors.invalid_argument(
            "kolo.torch.lms: this optimizer's state is not offloaded "
            "(Lms.offload_optimizer was not called on it)")
    state = [(p, k, v) for p, st in opt.state.items() for k, v in st.items()
             if isinstance(v, torch.Tensor)]
    return {"masters": list(host.masters.values()), "state": state}

"""Learning-rate rules for data-parallel training, and the LARS optimizer.

Scaling: with N ranks the global batch is N times larger, so the base
learning rate (tuned for one rank) is scaled by N (linear rule, Goyal et al.
2017) or by sqrt(N) (square-root rule, Krizhevsky 2014; Hoffer et al. 2017).

Schedule: ``LRSchedule`` is a multiplier of the base learning rate as a
function of t, the count of scheduler steps:
  - warm-up (Goyal et al.): for t < K, 1 + (k - 1) * t / K, rising linearly
    from the base rate (1x) to the scaled rate (k = N, sqrt(N) or 1);
  - then k times a decay factor:
      none         1
      step         gamma ** (number of milestones <= t), or with step_size
                   gamma ** floor(t / step_size)  (t counted from 0, as
                   torch's StepLR / MultiStepLR)
      exponential  gamma ** (t - K)
      cosine       min_factor + (1 - min_factor) * (1 + cos(pi * (t - K) /
                   (total - K))) / 2 for K <= t < total, min_factor after.
Units: t is whatever the scheduler is stepped by (epochs or batches). With
``steps_per_epoch`` given, the durations (warmup, step_size, milestones,
total) are in epochs while the scheduler is stepped per batch, so warm-up
rises a little every batch, as Goyal et al. do.

An ``LRSchedule`` is a callable suitable as ``lr_lambda`` of
``torch.optim.lr_scheduler.LambdaLR`` (with the optimizer built with the
base, unscaled rate); ``scheduler(optimizer, ...)`` builds that LambdaLR.
The schedule itself is plain Python (no torch needed).
"""

import math

__all__ = ["scale_factor", "scale_lr", "LRSchedule", "scheduler", "LARS"]

_RULES = ("linear", "sqrt", "none")
_DECAYS = ("none", "step", "exponential", "cosine")


def scale_factor(world_size, rule="linear"):
    """k for a world of ``world_size`` ranks: N (linear), sqrt(N) or 1."""
    if world_size < 1:
        raise ValueError("world_size must be >= 1, got %r" % (world_size,))
    if rule == "linear":
        return float(world_size)
    if rule == "sqrt":
        return math.sqrt(world_size)
    if rule == "none":
        return 1.0
    raise ValueError("scaling rule must be one of %s, got %r" % (_RULES, rule))


def scale_lr(base_lr, world_size, rule="linear"):
    """The base learning rate scaled for ``world_size`` ranks."""
    return base_lr * scale_factor(world_size, rule)


class LRSchedule:
    """Multiplier of the base learning rate at step t (see the module doc).

    Example (Goyal et al.: linear scaling, 5 warm-up epochs, /10 at epochs
    30, 60, 80, stepped per batch)::

        sched = LRSchedule(world_size=hvd.size(), scaling="linear", warmup=5,
                           decay="step", milestones=[30, 60, 80], gamma=0.1,
                           steps_per_epoch=len(loader))
        lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, sched)
    """

    def __init__(self, world_size=1, scaling="linear", warmup=0, decay="none",
                 gamma=0.1, step_size=None, milestones=None, total=None,
                 min_factor=0.0, steps_per_epoch=None):
        if decay not in _DECAYS:
            raise ValueError("decay must be one of %s, got %r" % (_DECAYS, decay))
        if warmup < 0:
            raise ValueError("warmup must be >= 0, got %r" % (warmup,))
        if decay == "step" and (step_size is None) == (milestones is None):
            raise ValueError("step decay needs exactly one of step_size and "
                             "milestones")
        if step_size is not None and step_size <= 0:
            raise ValueError("step_size must be > 0, got %r" % (step_size,))
        if decay == "cosine" and (total is None or total <= warmup):
            raise ValueError("cosine decay needs total > warmup, got total=%r "
                             "warmup=%r" % (total, warmup))
        if steps_per_epoch is not None and steps_per_epoch <= 0:
            raise ValueError("steps_per_epoch must be > 0")
        self.k = scale_factor(world_size, scaling)
        self.warmup = float(warmup)
        self.decay = decay
        self.gamma = float(gamma)
        self.step_size = step_size
        self.milestones = sorted(milestones) if milestones is not None else None
        self.total = total
        self.min_factor = float(min_factor)
        self.steps_per_epoch = steps_per_epoch

    def factor(self, t):
        """The multiplier at step t (t >= 0)."""
        if self.steps_per_epoch is not None:
            t = t / float(self.steps_per_epoch)
        if t < self.warmup:
            return 1.0 + (self.k - 1.0) * t / self.warmup
        return self.k * self._decay(t)

    def _decay(self, t):
        if self.decay == "none":
            return 1.0
        if self.decay == "step":
            if self.milestones is not None:
                passed = sum(1 for m in self.milestones if m <= t)
            else:
                passed = int(math.floor(t / self.step_size))
            return self.gamma ** passed
        if self.decay == "exponential":
            return self.gamma ** (t - self.warmup)
        span = float(self.total) - self.warmup
        if t >= self.total:
            return self.min_factor
        cos = (1.0 + math.cos(math.pi * (t - self.warmup) / span)) / 2.0
        return self.min_factor + (1.0 - self.min_factor) * cos

    def lr(self, base_lr, t):
        """The learning rate at step t for a base rate of ``base_lr``."""
        return base_lr * self.factor(t)

    __call__ = factor


def scheduler(optimizer, last_epoch=-1, **kwargs):
    """A torch LambdaLR over ``optimizer`` (built with the base rate) that
    follows ``LRSchedule(**kwargs)``."""
    import torch
    return torch.optim.lr_scheduler.LambdaLR(optimizer, LRSchedule(**kwargs),
                                             last_epoch=last_epoch)


def _lars_class():
    import torch

    class LARS(torch.optim.Optimizer):
        """SGD with momentum and layer-wise adaptive rate scaling (You,
        Gitman, Ginsburg 2017, "Large Batch Training of Convolutional
        Networks").

        For each parameter tensor w (a "layer") with gradient g:
            trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + eps)
                    (1 when ||w|| or ||g|| is 0)
            v     = momentum * v + lr * trust * (g + weight_decay * w)
            w     = w - v
        Parameters excluded from adaptation use trust = 1 and no weight
        decay: by default every tensor of one dimension or less (biases and
        batch-norm scales and shifts), as is usual; a param group's
        ``lars_adapt`` (True / False) overrides that for its parameters.
        """

        def __init__(self, params, lr, momentum=0.9, weight_decay=0.0,
                     eta=0.001, eps=1e-9, lars_adapt=None):
            if lr <= 0:
                raise ValueError("LARS: lr must be > 0, got %r" % (lr,))
            if momentum < 0 or weight_decay < 0 or eta <= 0:
                raise ValueError("LARS: momentum and weight_decay must be >= 0 "
                                 "and eta > 0")
            super().__init__(params, dict(lr=lr, momentum=momentum,
                                          weight_decay=weight_decay, eta=eta,
                                          eps=eps, lars_adapt=lars_adapt))

        @torch.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad
                    adapt = group["lars_adapt"]
                    if adapt is None:
                        adapt = p.dim() > 1
                    if adapt:
                        wd = group["weight_decay"]
                        w_norm = float(torch.linalg.vector_norm(p))
                        g_norm = float(torch.linalg.vector_norm(g))
                        trust = 1.0
                        if w_norm > 0 and g_norm > 0:
                            trust = group["eta"] * w_norm / (
                                g_norm + wd * w_norm + group["eps"])
                        d = g.add(p, alpha=wd) if wd else g.clone()
                    else:
                        trust, d = 1.0, g.clone()
                    d.mul_(group["lr"] * trust)
                    state = self.state[p]
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = d
                    else:
                        buf.mul_(group["momentum"]).add_(d)
                    p.sub_(buf)
            return loss

    return LARS


def __getattr__(name):
    # LARS needs torch; build the class on first use so that the schedule
    # stays importable without it.
    if name == "LARS":
        cls = _lars_class()
        globals()["LARS"] = cls
        return cls
    raise AttributeError(name)

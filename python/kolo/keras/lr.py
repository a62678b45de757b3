"""kolo's learning-rate rules for Keras (Keras 3 and tf_keras): the
scaling rules, warm-up and decay of kolo.lr (docs/tensorflow.md, "LR
rules"), and LARS.

- ``scale_factor(world_size, rule)``, ``scale_lr(base_lr, world_size, rule)``
  and ``LRSchedule`` (the multiplier as a function of the step) are
  kolo.lr's, re-exported: linear (x N) or square-root (x sqrt(N)) scaling.
- ``schedule(base_lr, **LRSchedule's arguments)``: a Keras
  ``LearningRateSchedule`` equal to ``base_lr * LRSchedule(...).factor(t)``
  at optimizer step t, computed in TensorFlow ops (it runs inside
  model.fit's tf.function). ``world_size`` defaults to the job's size::

      lr = kolo.keras.lr.schedule(0.01, scaling="linear", warmup=5,
                                  decay="cosine", total=90,
                                  steps_per_epoch=len(x) // (batch * hvd.size()))
      opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9))

- ``LRScheduleCallback(base_lr, **LRSchedule's arguments)``: the same rule
  as a callback that sets ``optimizer.learning_rate`` before every batch
  (with ``steps_per_epoch``) or every epoch, for an optimizer built with a
  float learning rate (other callbacks may set it too).
- ``LARS(optimizer, eta=0.001, weight_decay=0.0, eps=1e-9, exclude=None)``:
  the optimizer, of the same class, with layer-wise adaptive rate scaling
  applied to its gradients (``lars_gradients``). Around ``SGD(lr,
  momentum=m)`` it is kolo.lr.LARS (kolo.torch's), step for step.

The Keras these build on is tf.keras's (tf_keras with
TF_USE_LEGACY_KERAS=1, else Keras 3) unless ``keras="keras3"`` or
``"tf_keras"`` says otherwise; LARS follows its optimizer's.
"""

import math

import tensorflow as tf

from kolo import _native
from kolo.keras import _keras_flavor
from kolo.lr import LRSchedule, scale_factor, scale_lr  # noqa: F401 (re-exported)

__all__ = ["scale_factor", "scale_lr", "LRSchedule", "schedule", "LRScheduleCallback",
           "LARS", "lars_gradients"]


def _world_size(world_size):
    if world_size is not None:
        return world_size
    if not _native.is_initialized():
        raise ValueError("world_size: pass it, or call init() first so that the "
                         "job's size can be read")
    return _native.size()


def _factor(rule, step):
    """LRSchedule.factor(step) in TensorFlow ops (float32); the same
    algorithm as kolo.lr.LRSchedule (read its documentation there)."""
    t = tf.cast(step, tf.float32)
    if rule.steps_per_epoch is not None:
        t = t / float(rule.steps_per_epoch)
    k = rule.k
    if rule.decay == "none":
        decayed = tf.ones_like(t)
    elif rule.decay == "step":
        if rule.milestones is not None:
            passed = tf.add_n([tf.cast(t >= float(m), tf.float32)
                               for m in rule.milestones] or [tf.zeros_like(t)])
        else:
            passed = tf.floor(t / float(rule.step_size))
        decayed = tf.pow(rule.gamma, passed)
    elif rule.decay == "exponential":
        decayed = tf.pow(rule.gamma, t - rule.warmup)
    else:  # cosine
        span = float(rule.total) - rule.warmup
        cos = (1.0 + tf.cos(math.pi * (t - rule.warmup) / span)) / 2.0
        decayed = tf.where(t >= float(rule.total), rule.min_factor,
                           rule.min_factor + (1.0 - rule.min_factor) * cos)
    after = k * decayed
    if rule.warmup <= 0:
        return after
    warming = 1.0 + (k - 1.0) * t / rule.warmup
    return tf.where(t < rule.warmup, warming, after)


_SCHEDULE_CLASSES = {}


def _schedule_class(flavor):
    if flavor in _SCHEDULE_CLASSES:
        return _SCHEDULE_CLASSES[flavor]
    base = _keras_flavor.module(flavor).optimizers.schedules.LearningRateSchedule

    class KoloLRSchedule(base):
        """base_lr * kolo.lr.LRSchedule(**kwargs).factor(step)."""

        def __init__(self, base_lr, **kwargs):
            super().__init__()
            self.base_lr = float(base_lr)
            self.kwargs = dict(kwargs)
            self.rule = LRSchedule(**kwargs)

        def __call__(self, step):
            return self.base_lr * _factor(self.rule, step)

        def get_config(self):
            return dict(self.kwargs, base_lr=self.base_lr)

    KoloLRSchedule.__name__ = KoloLRSchedule.__qualname__ = "KoloLRSchedule"
    _SCHEDULE_CLASSES[flavor] = KoloLRSchedule
    return KoloLRSchedule


def schedule(base_lr, world_size=None, scaling="linear", warmup=0, decay="none",
             gamma=0.1, step_size=None, milestones=None, total=None, min_factor=0.0,
             steps_per_epoch=None, keras=None):
    """A Keras LearningRateSchedule: ``base_lr`` (the 1-rank rate) times
    kolo.lr.LRSchedule's multiplier at the optimizer's step (the arguments
    are LRSchedule's; ``world_size`` defaults to the job's size). Bad
    arguments raise LRSchedule's ValueErrors."""
    return _schedule_class(keras or _keras_flavor.default())(
        base_lr, world_size=_world_size(world_size), scaling=scaling, warmup=warmup,
        decay=decay, gamma=gamma, step_size=step_size, milestones=milestones,
        total=total, min_factor=min_factor, steps_per_epoch=steps_per_epoch)


def LRScheduleCallback(base_lr, world_size=None, scaling="linear", warmup=0,
                       decay="none", gamma=0.1, step_size=None, milestones=None,
                       total=None, min_factor=0.0, steps_per_epoch=None,
                       initial_epoch=0, keras=None):
    """A Keras callback that sets the optimizer's learning rate to
    ``base_lr * LRSchedule(...).factor(t)``: with ``steps_per_epoch``
    before every batch (t counts batches from ``initial_epoch``'s first),
    else before every epoch (t = the epoch)."""
    rule = LRSchedule(world_size=_world_size(world_size), scaling=scaling, warmup=warmup,
                      decay=decay, gamma=gamma, step_size=step_size,
                      milestones=milestones, total=total, min_factor=min_factor,
                      steps_per_epoch=steps_per_epoch)
    base = _keras_flavor.module(keras).callbacks.Callback

    class KoloLRScheduleCallback(base):
        """See kolo.keras.lr.LRScheduleCallback."""

        def __init__(self):
            super().__init__()
            self.rule = rule
            self.base_lr = float(base_lr)
            self.epoch = initial_epoch

        def _set(self, t):
            lr = self.base_lr * self.rule.factor(t)
            opt = self.model.optimizer
            try:
                opt.learning_rate = lr
            except TypeError as e:
                raise TypeError("LRScheduleCallback sets the learning rate; %s was "
                                "built with a LearningRateSchedule (use "
                                "kolo.keras.lr.schedule instead): %s"
                                % (type(opt).__name__, e)) from e

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            if rule.steps_per_epoch is None:
                self._set(epoch)

        def on_train_batch_begin(self, batch, logs=None):
            if rule.steps_per_epoch is not None:
                self._set(self.epoch * rule.steps_per_epoch + batch)

    return KoloLRScheduleCallback()


# ---------------------------------------------------------------- LARS


def lars_gradients(grads, variables, eta=0.001, weight_decay=0.0, eps=1e-9,
                   exclude=None):
    """LARS's gradients (You, Gitman, Ginsburg 2017), as kolo.lr.LARS
    computes them, for each variable w with gradient g:

        trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + eps)
                (1 when ||w|| or ||g|| is 0)
        g'    = trust * (g + weight_decay * w)

    A variable excluded from adaptation keeps g' = g (no trust ratio, no
    weight decay): by default every variable of one dimension or less
    (biases, normalization scales and shifts); ``exclude(variable) -> bool``
    decides instead. A momentum optimizer stepping on g' is LARS."""
    out = []
    for g, w in zip(grads, variables):
        if g is None:
            out.append(None)
            continue
        excluded = exclude(w) if exclude is not None else len(w.shape) <= 1
        if excluded:
            out.append(g)
            continue
        g = tf.convert_to_tensor(g)
        wv = tf.cast(tf.convert_to_tensor(w), g.dtype)
        w_norm = tf.norm(tf.reshape(wv, [-1]))
        g_norm = tf.norm(tf.reshape(g, [-1]))
        trust = tf.where((w_norm > 0) & (g_norm > 0),
                         eta * w_norm / (g_norm + weight_decay * w_norm + eps),
                         tf.ones_like(w_norm))
        d = g + weight_decay * wv if weight_decay else g
        out.append(trust * d)
    return out


class _LarsMixin:
    """Transforms the gradients before the wrapped optimizer's step. The
    LARS arguments travel in the config (``kolo_lars``), so a wrapper that
    rebuilds the optimizer from its config (hvd.DistributedOptimizer,
    kolo.keras.ps.DistributedOptimizer) keeps them."""

    def _kolo_lars(self, grads, variables):
        return lars_gradients(grads, variables, **self._kolo_lars_args.kwargs)

    def get_config(self):
        config = super().get_config()
        config["kolo_lars"] = dict(self._kolo_lars_args.kwargs)
        return config

    @classmethod
    def from_config(cls, config, *args, **kwargs):
        config = dict(config)
        lars = config.pop("kolo_lars", None)
        optimizer = super().from_config(config, *args, **kwargs)
        if lars is not None:
            optimizer._kolo_lars_args = _LarsArgs(lars)
        return optimizer


class _LarsArgs:
    """LARS's arguments, in a plain object (not tracked by TensorFlow)."""

    def __init__(self, kwargs):
        self.kwargs = dict(kwargs)


class _Keras3Lars(_LarsMixin):
    def apply(self, grads, trainable_variables=None):
        variables = (self._trainable_variables if trainable_variables is None
                     else list(trainable_variables))
        return super().apply(self._kolo_lars(list(grads), variables), trainable_variables)


class _TfKerasLars(_LarsMixin):
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        grads = self._kolo_lars([g for g, _ in grads_and_vars],
                                [v for _, v in grads_and_vars])
        return super().apply_gradients(
            list(zip(grads, [v for _, v in grads_and_vars])), *args, **kwargs)


def LARS(optimizer, eta=0.001, weight_decay=0.0, eps=1e-9, exclude=None):
    """The optimizer (a new one of its class, from its config) stepping on
    lars_gradients(...) instead of the gradients. Use the optimizer's own
    weight_decay=None and give LARS's here (it goes through the trust
    ratio, as in kolo.lr.LARS)."""
    flavor = _keras_flavor.of_optimizer(optimizer, "kolo.keras.lr.LARS")
    if not eta > 0 or weight_decay < 0 or eps < 0:
        raise ValueError("LARS: eta=%r must be > 0, weight_decay=%r and eps=%r >= 0"
                         % (eta, weight_decay, eps))
    if exclude is not None and not callable(exclude):
        raise ValueError("LARS: exclude must be callable(variable) -> bool, got %r"
                         % (exclude,))
    mixin = _Keras3Lars if flavor == "keras3" else _TfKerasLars
    base = type(optimizer)
    cls = type(base.__name__, (mixin, base), {})
    return cls.from_config(dict(optimizer.get_config(), kolo_lars={
        "eta": float(eta), "weight_decay": float(weight_decay), "eps": float(eps),
        "exclude": exclude}))

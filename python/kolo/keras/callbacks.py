"""Horovod's Keras callbacks on kolo (Keras 3 and tf_keras).

- ``BroadcastGlobalVariablesCallback(root_rank, device='', local_variables=None)``:
  rank ``root_rank``'s model and optimizer variables are copied to every
  rank when training begins and again after the first batch (the optimizer
  of tf_keras makes its slot variables in the first update), except
  ``local_variables``.
- ``MetricAverageCallback(device='')``: at each epoch's end the numeric logs
  (loss, metrics, validation metrics) are replaced by their average over
  the ranks, in place, so that callbacks after it (and ``History``) see the
  averages. One allreduce of all the values, in sorted name order.
- ``LearningRateScheduleCallback(initial_lr, multiplier, start_epoch=0,
  end_epoch=None, staircase=True, momentum_correction=True,
  steps_per_epoch=None)``: in epochs [start_epoch, end_epoch) the learning
  rate is ``initial_lr * multiplier(epoch)`` (a constant multiplier m means
  ``m ** (epoch - start_epoch)``), set at each epoch's first batch
  (staircase) or at every batch with a fractional epoch
  ``epoch + batch / steps_per_epoch``.
- ``LearningRateWarmupCallback(initial_lr, warmup_epochs=5, momentum_correction=True,
  steps_per_epoch=None, verbose=0)``: the learning rate goes linearly from
  ``initial_lr / size`` to ``initial_lr`` over the warm-up epochs (Goyal et
  al.), as in Horovod.

Momentum correction (Goyal et al.): while the learning rate changes from
lr to lr', the momentum is scaled by lr'/lr for that batch. It applies where
the optimizer keeps its momentum in a variable (tf_keras' legacy
optimizers); Keras 3's and tf_keras' new optimizers compile their momentum
as a constant, and are left as they are.
"""

import numbers

import numpy as np
import tensorflow as tf

import kolo.tensorflow as _tf

_Callback = tf.keras.callbacks.Callback


def tf_variables(variables):
    """The ``tf.Variable``s behind ``variables`` (Keras 3's variables wrap one)."""
    out = []
    for v in variables:
        if not isinstance(v, tf.Variable) and isinstance(getattr(v, "value", None), tf.Variable):
            v = v.value
        out.append(v)
    return out


def optimizer_variables(optimizer):
    """An optimizer's variables: a property in Keras 3, a method or a
    callable list in tf_keras."""
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def scalar(value):
    """A Python float of a number, tensor or variable (Keras 3's variables
    via their numpy(): NumPy's own conversion of them warns)."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(value)


def get_learning_rate(optimizer):
    return scalar(optimizer.learning_rate)


def set_learning_rate(optimizer, value):
    """Sets a learning rate held in a variable (or a plain number); a
    LearningRateSchedule cannot be set."""
    lr = optimizer.learning_rate
    if hasattr(lr, "assign"):
        lr.assign(value)
    elif isinstance(lr, numbers.Number):
        optimizer.learning_rate = value
    else:
        raise ValueError("kolo.keras.callbacks: the optimizer's learning rate is %r, not a variable "
                         "(a LearningRateSchedule cannot be set by a callback)" % (lr,))


class BroadcastGlobalVariablesCallback(_Callback):
    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local = set()
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var):
        """A variable that is not broadcast (each rank keeps its own)."""
        if not hasattr(var, "assign"):
            raise ValueError("kolo.keras.callbacks.BroadcastGlobalVariablesCallback: local "
                             "variables must be variables, got %r" % (var,))
        self._local.add(id(var))
        self._local.update(id(v) for v in tf_variables([var]))

    def _broadcast(self):
        variables = [v for v in list(self.model.variables) + optimizer_variables(self.model.optimizer)
                     if id(v) not in self._local]
        variables = [v for v in tf_variables(variables) if id(v) not in self._local]
        if variables:
            _tf.broadcast_variables(variables, root_rank=self.root_rank)

    def on_train_begin(self, logs=None):
        # A model not built yet (a Sequential without an Input, built by its
        # first batch, as in Horovod's tensorflow2_keras_mnist.py) has no
        # weights to send (tf_keras raises on model.variables): the end of
        # the first batch broadcasts them, as Horovod does.
        if getattr(self.model, "built", True):
            self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()
            self.broadcast_done = True


class MetricAverageCallback(_Callback):
    def __init__(self, device=''):
        super().__init__()
        self.device = device

    def _average_metrics_in_place(self, logs):
        if not logs:
            return
        names = sorted(k for k, v in logs.items()
                       if isinstance(v, numbers.Number) or (np.ndim(v) == 0 and hasattr(v, "dtype")))
        if not names:
            return
        values = tf.constant([scalar(logs[k]) for k in names], dtype=tf.float64)
        averaged = _tf.allreduce(values, op=_tf.Average).numpy()
        for k, v in zip(names, averaged):
            logs[k] = float(v)

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


class LearningRateScheduleCallback(_Callback):
    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("kolo.keras.callbacks: initial_lr is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)

    def _autodetect_steps_per_epoch(self):
        params = self.params or {}
        if params.get("steps"):
            return params["steps"]
        if params.get("samples") and params.get("batch_size"):
            return params["samples"] // params["batch_size"]
        raise ValueError("kolo.keras.callbacks.%s: cannot tell the number of steps per epoch; "
                         "give steps_per_epoch" % type(self).__name__)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = get_learning_rate(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        set_learning_rate(optimizer, new_lr)
        momentum = getattr(optimizer, "momentum", None)
        if self.momentum_correction and hasattr(momentum, "assign") and old_lr:
            self.restore_momentum = scalar(momentum)
            momentum.assign(self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or (
                self.end_epoch is not None and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = get_learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0):
        def multiplier(epoch):
            # Shifted by one batch, so that each epoch ends on a round value.
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / _tf.size() * (epoch * (_tf.size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _tf.rank() == 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, get_learning_rate(self.model.optimizer)))

"""kolo.keras' DistributedOptimizer: a Keras optimizer whose updates use the
gradients combined across the ranks.

``distributed_optimizer(optimizer, **options)`` makes a subclass of the
optimizer's own class, with the same name and module (so that a model saved
with it names the plain optimizer and loads without kolo), and builds an
instance of it from the optimizer's config. Two flavours, picked by the
class:

- Keras 3 (``keras.optimizers.Optimizer``, TensorFlow backend): ``apply``
  (which ``apply_gradients`` and ``model.fit``'s train step call) allreduces
  the gradients first, then runs the optimizer's own ``apply``.
- tf_keras (Keras 2, ``TF_USE_LEGACY_KERAS=1``; its optimizers and the
  ``legacy`` ones): as in Horovod, ``compute_gradients`` /
  ``_compute_gradients`` (which ``minimize`` and ``model.fit`` call) return
  allreduced gradients, and ``apply_gradients`` reduces the gradients it is
  given unless they are the ones that ``compute_gradients`` just reduced.

Both offer ``_compute_gradients(loss, var_list, grad_loss=None, tape=None)``
returning reduced ``(gradient, variable)`` pairs (Horovod's tests and
``PartialDistributedOptimizer`` use it), ``register_local_var`` and, with
``backward_passes_per_step`` > 1, ``_agg_helper`` (accumulation.py): then
``apply`` / ``apply_gradients`` accumulate, and only every n-th call reduces
and updates; the gradients that ``_compute_gradients`` returns are then this
rank's own.

Gradients are matched to "already reduced" by identity, not by a flag, so a
program that computes gradients, changes them and applies the result still
has them reduced once.
"""

import tensorflow as tf

from kolo.keras.accumulation import GradientAccumulator
from kolo.keras.gradients import GradientReducer


def _is_keras3_optimizer(cls):
    return hasattr(cls, "stateless_apply")


class _Kolo:
    """The per-instance state, held in a plain object so that neither Keras
    3's tracker nor TensorFlow's checkpointing sees it."""

    def __init__(self, options):
        self.reduce = GradientReducer(
            options["name"], options["compression"], options["sparse_as_dense"], options["op"],
            options["gradient_predivide_factor"], options["groups"], options["process_set"],
            options["scale_local_gradients"])
        n = options["backward_passes_per_step"]
        self.accumulator = (GradientAccumulator(n, options["average_aggregated_gradients"], self.reduce)
                            if n > 1 else None)
        self.reduced = []  # the gradients _compute_gradients reduced last

    def mark_reduced(self, grads):
        self.reduced = [g for g in grads if g is not None]

    def take_reduced(self, grads):
        """Whether every gradient in grads is one that _compute_gradients
        reduced (then they are not reduced again); forgets them."""
        present = [g for g in grads if g is not None]
        hit = bool(present) and all(any(g is r for r in self.reduced) for g in present)
        self.reduced = []
        return hit


class _DistributedBase:
    """What both flavours share. ``_kolo_options`` is set on the subclass."""

    _HAS_AGGREGATE_GRAD = True  # tf_keras' legacy optimizers pass experimental_aggregate_gradients

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kolo_setup()

    def _kolo_setup(self):
        self._kolo = _Kolo(self._kolo_options)
        self._agg_helper = self._kolo.accumulator

    @property
    def process_set(self):
        return self._kolo_options["process_set"]

    def register_local_var(self, var):
        """Registers a variable as this rank's own: its gradient is not
        allreduced (it is divided by the set's size when
        ``scale_local_gradients``, Horovod's rule)."""
        self._kolo.reduce.register_local_var(var)

    def _local_gradients(self, loss, var_list, grad_loss=None, tape=None):
        if callable(var_list):
            var_list = var_list()
        var_list = list(var_list)
        tape = tf.GradientTape() if tape is None else tape
        if callable(loss):
            with tape:
                loss = loss()
        grads = tape.gradient(loss, var_list, grad_loss)
        return list(grads), var_list

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """``(gradient, variable)`` pairs of ``loss``, allreduced (this
        rank's own with backward_passes_per_step > 1: the optimizer
        accumulates them when they are applied)."""
        grads, var_list = self._base_gradients(loss, var_list, grad_loss, tape)
        if self._kolo.accumulator is None:
            grads = self._kolo.reduce(grads, var_list)
            self._kolo.mark_reduced(grads)
        return list(zip(grads, var_list))

    def compute_gradients(self, loss, var_list, tape=None):
        return self._compute_gradients(loss, var_list, None, tape)

    def _reduce_unless_reduced(self, grads, variables):
        if self._kolo.take_reduced(grads):
            return list(grads)
        return self._kolo.reduce(grads, variables)


class _Keras3Distributed(_DistributedBase):
    def _base_gradients(self, loss, var_list, grad_loss, tape):
        return self._local_gradients(loss, var_list, grad_loss, tape)

    def apply_gradients(self, grads_and_vars, **kwargs):
        # Horovod's tests pass tf_keras' experimental_aggregate_gradients: ignored.
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            return self.iterations
        grads, variables = zip(*grads_and_vars)
        self.apply(list(grads), list(variables))
        return self.iterations

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if not grads:
            return super().apply(grads, trainable_variables)
        variables = list(trainable_variables) if trainable_variables is not None else None
        if variables is not None and not self.built:
            with tf.init_scope():
                self.build(variables)
        if variables is None:
            if not self.built:
                return super().apply(grads, trainable_variables)  # Keras' own error
            variables = list(self._trainable_variables)
        parent = super()
        if self._kolo.accumulator is None:
            return parent.apply(self._reduce_unless_reduced(grads, variables), variables)
        self._kolo.reduced = []
        self._kolo.accumulator.apply(grads, variables,
                                     lambda g: parent.apply(g, variables),
                                     lambda: self._iterations.assign_add(1))


class _TfKerasDistributed(_DistributedBase):
    def _base_gradients(self, loss, var_list, grad_loss, tape):
        base = super(_DistributedBase, self)  # the wrapped optimizer's class
        if hasattr(base, "_compute_gradients"):  # legacy OptimizerV2
            pairs = base._compute_gradients(loss, var_list, grad_loss, tape=tape)
        elif hasattr(base, "compute_gradients"):
            pairs = base.compute_gradients(loss, var_list, tape=tape)
        else:
            return self._local_gradients(loss, var_list, grad_loss, tape)
        grads, variables = zip(*pairs) if pairs else ((), ())
        return list(grads), list(variables)

    def _prebuild(self, variables):
        with tf.init_scope():
            if hasattr(self, "_create_all_weights"):  # legacy OptimizerV2
                self._create_all_weights(variables)
            else:
                self.build(variables)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        grads, variables = (list(t) for t in zip(*grads_and_vars))
        parent = super()
        if self._kolo.accumulator is None:
            grads = self._reduce_unless_reduced(grads, variables)
            return parent.apply_gradients(list(zip(grads, variables)), *args, **kwargs)
        self._kolo.reduced = []
        self._prebuild([v for g, v in zip(grads, variables) if g is not None])
        self._kolo.accumulator.apply(
            grads, variables,
            lambda g: parent.apply_gradients(list(zip(g, variables)), *args, **kwargs),
            lambda: self.iterations.assign_add(1))
        return self.iterations


def is_distributed(optimizer):
    """Whether ``optimizer`` is a kolo.keras DistributedOptimizer."""
    return isinstance(optimizer, _DistributedBase)


def distributed_class(base, options):
    """The distributed subclass of optimizer class ``base``."""
    if isinstance(base, type) and issubclass(base, _DistributedBase):
        raise ValueError("kolo.keras.DistributedOptimizer: %s is already a DistributedOptimizer"
                         % base.__name__)
    flavour = _Keras3Distributed if _is_keras3_optimizer(base) else _TfKerasDistributed
    return type(base.__name__, (flavour, base),
                {"_kolo_options": dict(options), "__module__": base.__module__,
                 "__qualname__": base.__qualname__, "__doc__": base.__doc__})


def _default_name(optimizer, options):
    if options["name"] is None:
        options["name"] = "Distributed%s" % type(optimizer).__name__


def distributed_in_place(optimizer, **options):
    """Makes ``optimizer`` itself distributed (its class becomes the
    distributed subclass), keeping its variables and state: what
    ``load_model`` does with the optimizer it loaded."""
    _default_name(optimizer, options)
    optimizer.__class__ = distributed_class(type(optimizer), options)
    optimizer._kolo_setup()
    return optimizer


def distributed_optimizer(optimizer, **options):
    """An instance of ``distributed_class(type(optimizer))`` with
    ``optimizer``'s config (its hyperparameters; not its state, so wrap an
    optimizer before it trains, as in Horovod)."""
    _default_name(optimizer, options)
    cls = distributed_class(type(optimizer), options)
    return cls.from_config(optimizer.get_config())

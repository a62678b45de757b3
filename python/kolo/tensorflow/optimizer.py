"""DistributedOptimizer for TF1-style optimizers (Horovod's
_DistributedOptimizer): wraps a tf.compat.v1.train.Optimizer so that
``compute_gradients`` returns gradients reduced over the ranks; the wrapped
optimizer computes the local gradients and applies the updates.
``minimize`` (the base class's) calls both, so a TF1 training op needs no
other change. Keras optimizers are handed to kolo.keras.DistributedOptimizer,
as Horovod does.

With ``backward_passes_per_step`` N > 1 (TF1 graph mode only, as in
Horovod) gradients are summed locally over N runs and reduced on the N-th
(gradient_aggregation.LocalGradientAggregationHelper), which also applies
them only then.
"""

import tensorflow as tf

from kolo import _native
from kolo.tensorflow import errors
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_aggregation import LocalGradientAggregationHelper
from kolo.tensorflow.gradient_aggregation_eager import check_passes
from kolo.tensorflow.gradients import (_make_allreduce_grads_fn, check_groups,
                                       check_predivide, scale_local_grads)
from kolo.tensorflow.mpi_ops import Adasum, Average, global_process_set
from kolo.tensorflow.util import ref_of, _executing_eagerly

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _DistributedOptimizer(_LegacyOptimizer):
    """A tf.compat.v1.train.Optimizer that reduces gradients before applying
    them (module docstring)."""

    def __init__(self, optimizer, name=None, use_locking=False, device_dense='',
                 device_sparse='', compression=Compression.none, sparse_as_dense=False,
                 op=Average, gradient_predivide_factor=1.0, backward_passes_per_step=1,
                 average_aggregated_gradients=False, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        if name is None:
            name = "Distributed%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._allreduce_grads = _make_allreduce_grads_fn(
            name, device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set)
        self._local_vars = set()
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._agg_helper = None
        if backward_passes_per_step > 1:
            if _executing_eagerly():
                raise errors.invalid_argument(
                    "DistributedOptimizer: backward_passes_per_step > 1 with a "
                    "tf.compat.v1.train.Optimizer needs TF1 graph mode; eagerly "
                    "use DistributedGradientTape(backward_passes_per_step=...)")
            self._agg_helper = LocalGradientAggregationHelper(
                backward_passes_per_step=backward_passes_per_step,
                allreduce_func=self._allreduce_grads,
                sparse_as_dense=sparse_as_dense,
                average_aggregated_gradients=average_aggregated_gradients,
                rank=_native.rank(),
                optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_LEGACY,
                process_set=process_set, scale_local_gradients=scale_local_gradients,
                name=name)

    def register_local_var(self, var):
        """Gradients of ``var`` are not reduced (scaled by 1/size instead,
        unless scale_local_gradients is False)."""
        if self._agg_helper is not None:
            self._agg_helper.register_local_var(var)
        self._local_vars.add(ref_of(var))

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's (gradient, variable) pairs, the gradients
        reduced over the ranks."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        if self._agg_helper is not None:
            reduced = self._agg_helper.compute_gradients(list(grads), list(variables))
        else:
            local = [ref_of(v) in self._local_vars for v in variables]
            shared = [(g, v) for g, v, lo in zip(grads, variables, local) if not lo]
            it = iter(self._allreduce_grads([g for g, _ in shared],
                                            [v for _, v in shared]) if shared else [])
            reduced = [g if lo else next(it) for g, lo in zip(grads, local)]
            if self.scale_local_gradients and any(local):
                reduced = scale_local_grads(reduced, local, self.process_set)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's apply_gradients (only on the runs that
        reduced, with backward_passes_per_step > 1)."""
        if self._agg_helper is not None:
            return self._agg_helper.apply_gradients(
                lambda: self._optimizer.apply_gradients(
                    grads_and_vars, global_step=global_step, name=name),
                self._optimizer, grads_and_vars, global_step=global_step, name=name)
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                               name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='',
                         device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps ``optimizer`` so that it applies gradients reduced over
    ``process_set`` (module docstring). Horovod's arguments; Adasum is not
    supported."""
    if op == Adasum:
        raise errors.adasum_not_supported("DistributedOptimizer")
    check_predivide(gradient_predivide_factor, op, "DistributedOptimizer")
    check_passes(backward_passes_per_step, "DistributedOptimizer")
    groups = check_groups(groups, num_groups, "DistributedOptimizer")
    if isinstance(optimizer, _LegacyOptimizer):
        return _DistributedOptimizer(
            optimizer, name=name, use_locking=use_locking, device_dense=device_dense,
            device_sparse=device_sparse, compression=compression,
            sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients)
    try:
        import kolo.keras as hvd_keras
    except ImportError as e:
        raise errors.invalid_argument(
            "DistributedOptimizer: %s is not a tf.compat.v1.train.Optimizer, and "
            "kolo.keras (for Keras optimizers) does not import: %s"
            % (type(optimizer).__name__, e))
    return hvd_keras.DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, op=op,
        groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients)

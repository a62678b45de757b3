"""DistributedGradientTape and PartialDistributedGradientTape: a
tf.GradientTape whose ``gradient()`` returns gradients reduced over the
ranks (Horovod's API).

``DistributedGradientTape(tape, ...)`` returns a tape of a subclass of the
given tape's own class that shares its recording (so a subclassed tape, or
one still recording, keeps working). ``gradient(target, sources)`` computes
the local gradients, then reduces those of the sources not registered as
local (``register_local_source``) in one call of the shared gradient
reduction (gradients._make_allreduce_grads_fn: a tf.function eagerly, so
the allreduces run concurrently and fuse); the gradients of local sources
are divided by the set size (``scale_local_gradients``) or left alone.
Sources may be any nest of variables or tensors; the result has its
structure.

Beyond Horovod: ``backward_passes_per_step`` N > 1 sums the gradients of N
passes locally and reduces the sum on every N-th call
(gradient_aggregation_eager); the other calls return zeros, and
``tape.aggregation_complete`` (a bool tensor) says whether this call's
gradients are the reduced ones, for gating an optimizer with state. The
aggregation state belongs to the sources: the tapes of successive steps
over the same variables share it.
"""

import tensorflow as tf

from kolo.tensorflow import errors
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.gradient_aggregation_eager import (
    LocalGradientAggregationHelperEager, check_passes)
from kolo.tensorflow.gradients import (_make_allreduce_grads_fn, check_groups,
                                       check_predivide, scale_local_grads)
from kolo.tensorflow.util import ref_of
from kolo.tensorflow.mpi_ops import Adasum, Average, global_process_set

_classes = {}      # tape class -> its distributed subclass
_aggregators = {}  # (configuration, source refs) -> aggregation helper


class _DistributedTape:
    """The methods a distributed tape adds to (or overrides in) its class."""

    def _kolo_setup(self, allreduce_grads, process_set, scale_local_gradients,
                    passes, average_aggregated_gradients, sparse_as_dense, config):
        self._allreduce_grads = allreduce_grads
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()
        self._passes = passes
        self._average_aggregated = average_aggregated_gradients
        self._sparse_as_dense = sparse_as_dense
        self._config = config
        self.aggregation_complete = tf.constant(True)

    def register_local_source(self, source):
        """Gradients of ``source`` stay local: not reduced (Horovod's
        model-parallel layers)."""
        self._local_sources.add(ref_of(source))

    def gradient(self, target, sources, output_gradients=None,
                 use_generic_names=False,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients=output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        local = [ref_of(s) in self._local_sources for s in flat_sources]
        if self._passes > 1:
            reduced = self._aggregate(flat_grads, flat_sources, local)
        else:
            reduced = self._reduce(flat_grads, flat_sources, local, use_generic_names)
        return tf.nest.pack_sequence_as(grads, reduced)

    def _reduce(self, grads, sources, local, use_generic_names):
        shared = [(g, s) for g, s, lo in zip(grads, sources, local) if not lo]
        reduced = iter(self._allreduce_grads([g for g, _ in shared], [s for _, s in shared],
                                             use_generic_names) if shared else [])
        out = [g if lo else next(reduced) for g, lo in zip(grads, local)]
        if self.scale_local_gradients and any(local):
            out = scale_local_grads(out, local, self.process_set)
        return out

    def _aggregate(self, grads, sources, local):
        key = (self._config, tuple(ref_of(s) for s in sources))
        helper = _aggregators.get(key)
        if helper is None:
            helper = LocalGradientAggregationHelperEager(
                self._passes, self._allreduce_grads, self._sparse_as_dense,
                self._average_aggregated, process_set=self.process_set,
                scale_local_gradients=self.scale_local_gradients)
            for s, lo in zip(sources, local):
                if lo:
                    helper.register_local_var(s)
            _aggregators[key] = helper
        out = helper.compute_gradients(grads, sources)
        done = tf.equal(helper.counter, 0)
        self.aggregation_complete = done
        return [None if g is None else
                tf.where(done, g, tf.zeros_like(g)) for g in out]

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """``gradient()``, split: ([(local source, gradient)], [(other
        source, reduced gradient)])."""
        grads = self.gradient(target, sources, output_gradients=output_gradients,
                              use_generic_names=use_generic_names)
        local, shared = [], []
        for s, g in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            (local if ref_of(s) in self._local_sources else shared).append((s, g))
        return local, shared


def _distributed_class(cls):
    if cls not in _classes:
        _classes[cls] = type(cls.__name__, (_DistributedTape, cls), {})
    return _classes[cls]


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',
                            compression=Compression.none, sparse_as_dense=False,
                            op=Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=global_process_set,
                            scale_local_gradients=True, backward_passes_per_step=1,
                            average_aggregated_gradients=False):
    """Wraps ``gradtape`` (a tf.GradientTape, used or still recording) so
    that ``gradient()`` returns gradients reduced over ``process_set``.

    compression, sparse_as_dense (tf.IndexedSlices made dense first), op
    (Average, Sum, Min, Max, Product), gradient_predivide_factor (Average
    only), groups (int: that many fused groups; list of lists of variables:
    one group each) and process_set are Horovod's; num_groups is the old
    name of an int groups. backward_passes_per_step and
    average_aggregated_gradients: see the module docstring."""
    if op == Adasum:
        raise errors.adasum_not_supported("DistributedGradientTape")
    check_predivide(gradient_predivide_factor, op, "DistributedGradientTape")
    groups = check_groups(groups, num_groups, "DistributedGradientTape")
    check_passes(backward_passes_per_step, "DistributedGradientTape")
    if not isinstance(gradtape, tf.GradientTape):
        raise errors.invalid_argument(
            "DistributedGradientTape wraps a tf.GradientTape, got %s"
            % type(gradtape).__name__)
    allreduce_grads = _make_allreduce_grads_fn(
        'DistributedGradientTape', device_dense, device_sparse, compression,
        sparse_as_dense, op, gradient_predivide_factor, groups, process_set)
    tape = object.__new__(_distributed_class(type(gradtape)))
    tape.__dict__.update(gradtape.__dict__)  # the same recording
    config = (allreduce_grads, id(process_set), scale_local_gradients,
              backward_passes_per_step, average_aggregated_gradients, sparse_as_dense)
    tape._kolo_setup(allreduce_grads, process_set, scale_local_gradients,
                     backward_passes_per_step, average_aggregated_gradients,
                     sparse_as_dense, config)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None,
                                   process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape whose ``local_layers`` (a Keras layer or a
    list of them) keep their gradients local (their trainable weights are
    registered with register_local_source)."""
    layer_cls = _keras_layer_class()
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, layer_cls):
        local_layers = [local_layers]
    bad = [type(x).__name__ for x in local_layers if not isinstance(x, layer_cls)]
    if bad:
        raise errors.invalid_argument(
            "PartialDistributedGradientTape: local_layers must be Keras layers, "
            "got %s" % ", ".join(bad))
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor,
                                   num_groups, groups, process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape


def _keras_layer_class():
    """tf.keras's Layer class: Keras 3's, or tf_keras's when
    TF_USE_LEGACY_KERAS=1."""
    return tf.keras.layers.Layer

"""Allreducing a list of gradients for kolo.keras' DistributedOptimizer.

``GradientReducer(...)(grads, variables)`` returns the gradients combined
over the process set, in the order given. The reduction itself is
kolo.tensorflow's ``_make_allreduce_grads_fn`` (Horovod's name: compression,
``sparse_as_dense``, ``op``, ``gradient_predivide_factor``, ``groups``, one
tf.function per call when eager so that the runtime negotiates and fuses the
allreduces together). What this module adds is Horovod's local variables:

- A variable registered with ``register_local_var`` is left out of the
  reduction: its gradient stays this rank's own, divided by the set's size
  when ``scale_local_gradients`` (so that the update of a local variable
  has the scale of an averaged one). The size is read by ``size_op`` inside
  a graph, so a traced step stays right when an elastic job changes size.
- Variables are matched by identity (Keras 3's variables have no ``ref()``
  and their names repeat across layers).
"""

import tensorflow as tf

import kolo.tensorflow as _tf


class GradientReducer:
    def __init__(self, name, compression, sparse_as_dense, op, gradient_predivide_factor,
                 groups, process_set, scale_local_gradients=True):
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.local = {}  # id -> variable (kept alive so that ids stay unique)
        self._allreduce_grads = _tf._make_allreduce_grads_fn(
            name, '', '', compression, sparse_as_dense, op, gradient_predivide_factor, groups,
            process_set=process_set)

    def register_local_var(self, variable):
        self.local[id(variable)] = variable

    def _set_size(self, dtype):
        if tf.executing_eagerly():
            return tf.cast(self.process_set.size(), dtype)
        return tf.cast(_tf.size_op(process_set_id=self.process_set.process_set_id), dtype)

    def _scale_local(self, grad):
        if not self.scale_local_gradients:
            return grad
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / self._set_size(grad.values.dtype),
                                    grad.indices, grad.dense_shape)
        return grad / self._set_size(grad.dtype)

    def __call__(self, grads, variables):
        grads, variables = list(grads), list(variables)
        if len(grads) != len(variables):
            raise ValueError("kolo.keras: %d gradients for %d variables"
                             % (len(grads), len(variables)))
        shared = [i for i, v in enumerate(variables) if id(v) not in self.local]
        out = list(grads)
        if shared:
            reduced = self._allreduce_grads([grads[i] for i in shared],
                                            [variables[i] for i in shared])
            for i, r in zip(shared, reduced):
                out[i] = r
        for i, v in enumerate(variables):
            if id(v) in self.local and out[i] is not None:
                out[i] = self._scale_local(out[i])
        return out

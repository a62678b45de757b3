"""Allreducing a list of gradients for kolo.keras' DistributedOptimizer.

``GradientReducer(...)(grads, variables)`` returns the gradients combined
over the process set, in the order given:

- A gradient of ``None`` stays ``None``.
- A variable registered with ``register_local_var`` is not reduced: its
  gradient stays this rank's own, divided by the set's size when
  ``scale_local_gradients`` (Horovod's rule: the update of a local variable
  then has the scale of an averaged one).
- ``sparse_as_dense`` turns ``tf.IndexedSlices`` into dense tensors first;
  otherwise they go through ``kolo.tensorflow.allreduce``, which gathers
  them.
- ``op=Average`` with ``gradient_predivide_factor`` f splits the average:
  each gradient is scaled by 1/f before the sum and by f/size after it (the
  runtime applies the 1/size of Average).
- ``groups``: an int n puts the dense gradients into n groups of
  consecutive gradients, each one grouped allreduce (negotiated and reduced
  together); a list of lists of variables makes each inner list one group
  and every other gradient a group of its own. Without groups each
  gradient is its own allreduce inside a ``tf.function`` (where the runtime
  fuses them), and eagerly one grouped allreduce (one negotiation instead
  of one blocking round trip per gradient).

Variables are matched by identity (Keras 3 variables have no ``ref()`` and
their names repeat across layers).
"""

import tensorflow as tf

import kolo.tensorflow as _tf


def _key(variable):
    return id(variable)


def split_evenly(items, n):
    """``items`` cut into ``min(n, len(items))`` runs of consecutive items,
    the first ones one item longer when the length does not divide."""
    n = min(n, len(items))
    size, extra = divmod(len(items), n) if n else (0, 0)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


class GradientReducer:
    def __init__(self, name, compression, sparse_as_dense, op, gradient_predivide_factor,
                 groups, process_set, scale_local_gradients=True):
        self.name = name
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        if op == _tf.Average:
            self.prescale, self.postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
        else:
            self.prescale = self.postscale = 1.0
        self.groups = groups
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.local = {}  # id -> variable (kept alive so that ids stay unique)

    def register_local_var(self, variable):
        self.local[_key(variable)] = variable

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
        grads = list(grads)
        variables = list(variables)
        if len(grads) != len(variables):
            raise ValueError("kolo.keras: %d gradients for %d variables" % (len(grads), len(variables)))
        out = list(grads)
        todo = []  # indices of the gradients to reduce
        for i, (g, v) in enumerate(zip(grads, variables)):
            if g is None:
                continue
            if _key(v) in self.local:
                out[i] = self._scale_local(g)
                continue
            if self.sparse_as_dense and isinstance(g, tf.IndexedSlices):
                out[i] = tf.convert_to_tensor(g)
            todo.append(i)
        if not todo:
            return out
        with tf.name_scope(self.name + "_Allreduce"):
            sparse = [i for i in todo if isinstance(out[i], tf.IndexedSlices)]
            dense = [i for i in todo if not isinstance(out[i], tf.IndexedSlices)]
            for i in sparse:
                out[i] = self._allreduce(out[i])
            for group in self._dense_groups(dense, variables):
                if len(group) == 1 and not (self.groups is None and tf.executing_eagerly()):
                    out[group[0]] = self._allreduce(out[group[0]])
                else:
                    reduced = _tf.grouped_allreduce(
                        [out[i] for i in group], op=self.op, compression=self.compression,
                        prescale_factor=self.prescale, postscale_factor=self.postscale,
                        process_set=self.process_set)
                    for i, r in zip(group, reduced):
                        out[i] = r
        return out

    def _allreduce(self, grad):
        return _tf.allreduce(grad, op=self.op, compression=self.compression,
                             prescale_factor=self.prescale, postscale_factor=self.postscale,
                             process_set=self.process_set)

    def _dense_groups(self, dense, variables):
        if not dense:
            return []
        if self.groups is None:
            return [dense] if tf.executing_eagerly() else [[i] for i in dense]
        if isinstance(self.groups, int):
            return split_evenly(dense, self.groups)
        position = {_key(variables[i]): i for i in dense}
        out, taken = [], set()
        for group in self.groups:
            members = [position[_key(v)] for v in group if _key(v) in position]
            members = [i for i in members if i not in taken]
            taken.update(members)
            if members:
                out.append(sorted(members))
        out.extend([i] for i in dense if i not in taken)
        return out

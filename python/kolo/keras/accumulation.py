"""backward_passes_per_step for kolo.keras' DistributedOptimizer.

``GradientAccumulator(n, average, reduce).apply(grads, variables, apply_fn,
skip_fn)`` adds the gradients of one backward pass into per-variable
accumulators and counts the pass. Every n-th pass it reduces the sums across
the ranks (``reduce``, a ``GradientReducer``), divided by n first when
``average``, hands them to ``apply_fn`` (the wrapped optimizer's own update),
and zeroes the accumulators and the counter; the other passes call
``skip_fn`` (which advances the optimizer's ``iterations``, as Horovod's
helper does, so that ``iterations`` counts backward passes). The choice is
a ``tf.cond`` on the counter, so it works eagerly and inside the
``tf.function`` of ``model.fit``; every rank takes the same branch because
every rank counts the same passes.

The accumulators are plain ``tf.Variable``s created outside any function
(``tf.init_scope``) the first time a variable is seen, and kept out of the
optimizer's own variables: a model saved with a DistributedOptimizer loads
into the plain optimizer. Sparse gradients are accumulated dense.
``counter`` is the pass count since the last update (Horovod's tests read
``optimizer._agg_helper.counter``).
"""

import tensorflow as tf


class GradientAccumulator:
    def __init__(self, backward_passes_per_step, average, reduce):
        self.backward_passes_per_step = backward_passes_per_step
        self.average = average
        self.reduce = reduce
        self.accumulators = {}  # id(variable) -> (variable, accumulator)
        with tf.init_scope():
            self.counter = tf.Variable(0, dtype=tf.int32, trainable=False,
                                       name="kolo_backward_passes")

    def register_local_var(self, variable):
        self.reduce.register_local_var(variable)

    def _accumulator(self, variable):
        entry = self.accumulators.get(id(variable))
        if entry is None:
            with tf.init_scope():
                acc = tf.Variable(tf.zeros(variable.shape, dtype=tf.as_dtype(variable.dtype)),
                                  trainable=False, name="kolo_accumulated_gradient")
            entry = self.accumulators[id(variable)] = (variable, acc)
        return entry[1]

    def apply(self, grads, variables, apply_fn, skip_fn):
        grads, variables = list(grads), list(variables)
        accs = [None if g is None else self._accumulator(v) for g, v in zip(grads, variables)]
        for g, acc in zip(grads, accs):
            if acc is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        self.counter.assign_add(1)

        def update():
            sums = [None if acc is None else acc.read_value() for acc in accs]
            if self.average:
                sums = [None if s is None else s / self.backward_passes_per_step for s in sums]
            apply_fn(self.reduce(sums, variables))
            for acc in accs:
                if acc is not None:
                    acc.assign(tf.zeros_like(acc))
            self.counter.assign(0)
            return tf.constant(True)

        def skip():
            skip_fn()
            return tf.constant(False)

        return tf.cond(tf.equal(self.counter, self.backward_passes_per_step), update, skip)

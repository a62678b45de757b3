"""Local gradient aggregation for TF2 (eager and tf.function): sum the
gradients of ``backward_passes_per_step`` backward passes on each rank and
allreduce the sum once, on the last of them (Horovod's
LocalGradientAggregationHelperEager, used by DistributedGradientTape and by
kolo.keras's DistributedOptimizer).

State (tf.Variables, created on first use outside any tf.function graph, so
a traced step keeps them): one accumulator per non-None gradient and a pass
counter. Each ``compute_gradients(grads, vars)``:

1. adds the gradients to the accumulators and counts the pass;
2. on the N-th pass (counter == N): allreduces the accumulators (a local
   variable's sum is scaled instead, as in gradients.scale_local_grads),
   divides by N when ``average_aggregated_gradients``, zeroes the
   accumulators and the counter, and returns the result; on other passes
   it returns the running local sums.

``apply_gradients(apply, optimizer, grads_and_vars)`` runs ``apply`` only on
the passes that reduced (counter back at 0) and otherwise only advances the
optimizer's iteration count.
"""

import tensorflow as tf

from kolo.tensorflow import errors
from kolo.tensorflow.gradients import scale_local_grads
from kolo.tensorflow.util import ref_of
from kolo.tensorflow.mpi_ops import global_process_set


def check_passes(backward_passes_per_step, what):
    if isinstance(backward_passes_per_step, bool) or \
            not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise errors.invalid_argument(
            "%s: backward_passes_per_step must be an int >= 1, got %r"
            % (what, backward_passes_per_step))


class LocalGradientAggregationHelperEager:
    """See the module docstring. ``allreduce_func(grads, vars)``: the
    reduction of the summed gradients (gradients._make_allreduce_grads_fn)."""

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense,
                 average_aggregated_gradients, process_set=global_process_set,
                 scale_local_gradients=True):
        check_passes(backward_passes_per_step, "gradient aggregation")
        self.backward_passes_per_step = backward_passes_per_step
        self.allreduce_grads = allreduce_func
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_vars = set()
        self.locally_aggregated_grads = {}  # gradient index -> tf.Variable
        with tf.init_scope():
            self.counter = tf.Variable(0, trainable=False, dtype=tf.int32,
                                       name="kolo_aggregation_counter")

    def register_local_var(self, var):
        """Gradients of ``var`` are not reduced (scaled by 1/size instead,
        unless scale_local_gradients is False)."""
        self._local_vars.add(ref_of(var))

    def _dense(self, grad, i):
        if isinstance(grad, tf.IndexedSlices):
            if not self.sparse_as_dense:
                raise errors.invalid_argument(
                    "gradient %d is a tf.IndexedSlices: with "
                    "backward_passes_per_step > 1 pass sparse_as_dense=True" % i)
            return tf.convert_to_tensor(grad)
        return grad

    def _accumulator(self, i, grad):
        acc = self.locally_aggregated_grads.get(i)
        if acc is None:
            if not grad.shape.is_fully_defined():
                raise errors.invalid_argument(
                    "gradient aggregation: gradient %d has shape %s; the "
                    "accumulator needs a static shape" % (i, grad.shape))
            with tf.init_scope():
                acc = tf.Variable(tf.zeros(grad.shape, grad.dtype), trainable=False,
                                  name="kolo_aggregated_grad_%d" % i)
            self.locally_aggregated_grads[i] = acc
        return acc

    def compute_gradients(self, grads, vars):  # noqa: A002
        grads = [None if g is None else self._dense(g, i) for i, g in enumerate(grads)]
        present = [i for i, g in enumerate(grads) if g is not None]
        sums = []
        for i in present:
            acc = self._accumulator(i, grads[i])
            acc.assign_add(grads[i])
            sums.append(acc.read_value())
        self.counter.assign_add(1)
        present_vars = [vars[i] for i in present] if vars is not None else None

        def reduce_and_clear():
            reduced = self._reduce(sums, present_vars)
            with tf.control_dependencies([r for r in reduced]):
                self.counter.assign(0)
                for i in present:
                    acc = self.locally_aggregated_grads[i]
                    acc.assign(tf.zeros_like(acc))
            return [tf.identity(r) for r in reduced]

        if not present:
            return grads
        result = tf.cond(tf.equal(self.counter, self.backward_passes_per_step),
                         reduce_and_clear, lambda: [tf.identity(s) for s in sums])
        if not isinstance(result, (list, tuple)):
            result = [result]
        out = list(grads)
        for i, r in zip(present, result):
            out[i] = r
        return out

    def _reduce(self, sums, variables):
        if variables is None:
            local = [False] * len(sums)
        else:
            local = [ref_of(v) in self._local_vars for v in variables]
        shared = [s for s, lo in zip(sums, local) if not lo]
        shared_vars = None if variables is None else \
            [v for v, lo in zip(variables, local) if not lo]
        reduced = iter(self.allreduce_grads(shared, shared_vars) if shared else [])
        out = [s if lo else next(reduced) for s, lo in zip(sums, local)]
        if self.scale_local_gradients and any(local):
            out = scale_local_grads(out, local, self.process_set)
        if self.average_aggregated_gradients:
            out = [g / self.backward_passes_per_step for g in out]
        return out

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        """Runs ``apply_grads_closure()`` on the passes that reduced; on the
        others advances ``optimizer.iterations`` (if it has one)."""

        def skip():
            iterations = getattr(optimizer, "iterations", None)
            if iterations is not None:
                iterations.assign_add(1)
            return tf.no_op()

        def apply():
            apply_grads_closure()
            return tf.no_op()

        return tf.cond(tf.equal(self.counter, 0), apply, skip)

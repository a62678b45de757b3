"""Local gradient aggregation in a TF1 graph (Horovod's
LocalGradientAggregationHelper, for DistributedOptimizer over a
tf.compat.v1.train.Optimizer): the same rule as gradient_aggregation_eager
(sum N passes locally, reduce the sum on the N-th, apply only then), as
graph ops run by a session.

State: local variables (tf.compat.v1.GraphKeys.LOCAL_VARIABLES, initialised
by local_variables_initializer): a pass counter and one accumulator per
non-None gradient. ``compute_gradients`` returns, each run: the accumulators
cleared if the counter is 0, the new gradients added, the counter advanced;
if it reached N, the reduced sums (divided by N when
``average_aggregated_gradients``) and the counter back at 0; otherwise this
pass's gradients. ``apply_gradients`` runs the optimizer's update when the
counter is 0 (a pass that reduced) and otherwise only advances
``global_step`` (if given) and the optimizer's ``iterations``.
"""

import tensorflow as tf

from kolo.tensorflow import errors
from kolo.tensorflow.gradient_aggregation_eager import check_passes
from kolo.tensorflow.gradients import scale_local_grads
from kolo.tensorflow.util import ref_of
from kolo.tensorflow.mpi_ops import global_process_set

v1 = tf.compat.v1


class LocalGradientAggregationHelper:
    """See the module docstring."""

    _OPTIMIZER_TYPE_KERAS = "optimizer_type_keras"
    _OPTIMIZER_TYPE_LEGACY = "optimizer_type_legacy"

    def __init__(self, backward_passes_per_step, allreduce_func, sparse_as_dense,
                 average_aggregated_gradients, rank, optimizer_type,
                 process_set=global_process_set, scale_local_gradients=True, name=""):
        check_passes(backward_passes_per_step, "gradient aggregation")
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_grads = allreduce_func
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.rank = rank
        self.optimizer_type = optimizer_type
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.name = name
        self.counter = None
        self.locally_aggregated_grads = []
        self._local_vars = set()

    def register_local_var(self, var):
        self._local_vars.add(ref_of(var))

    def _dense(self, grad, i):
        if isinstance(grad, tf.IndexedSlices):
            if not self.sparse_as_dense:
                raise errors.invalid_argument(
                    "gradient %d is a tf.IndexedSlices: with "
                    "backward_passes_per_step > 1 pass sparse_as_dense=True" % i)
            return tf.convert_to_tensor(grad)
        return grad

    def _init_aggregation_vars(self, grads):
        scope = "kolo_aggregation_%s_%d" % (self.name, self.rank)
        local = [v1.GraphKeys.LOCAL_VARIABLES]
        with v1.variable_scope(scope, reuse=v1.AUTO_REUSE):
            self.counter = v1.get_variable(
                "counter", shape=(), dtype=tf.int32, trainable=False,
                initializer=v1.zeros_initializer(), collections=local)
            self.locally_aggregated_grads = [
                v1.get_variable("grad_%d" % i, shape=g.shape, dtype=g.dtype,
                                trainable=False, initializer=v1.zeros_initializer(),
                                collections=local)
                for i, g in enumerate(grads)]
        if self.optimizer_type == self._OPTIMIZER_TYPE_KERAS:
            session = v1.keras.backend.get_session(op_input_list=())
            session.run(v1.variables_initializer(
                [self.counter] + self.locally_aggregated_grads))

    def compute_gradients(self, grads, vars):  # noqa: A002
        grads = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        dense = [self._dense(grads[i], i) for i in present]
        variables = [vars[i] for i in present]
        self._init_aggregation_vars(dense)
        clear = tf.cond(tf.equal(self.counter, 0),
                        lambda: tf.group(*[a.assign(tf.zeros_like(a))
                                           for a in self.locally_aggregated_grads]),
                        tf.no_op)
        with tf.control_dependencies([clear]):
            added = [a.assign_add(g) for a, g in zip(self.locally_aggregated_grads, dense)]
        with tf.control_dependencies(added):
            counted = self.counter.assign_add(1)
        with tf.control_dependencies([counted]):
            result = tf.cond(tf.equal(self.counter, self.backward_passes_per_step),
                             lambda: self._reduce(variables),
                             lambda: [tf.identity(g) for g in dense])
        if not isinstance(result, (list, tuple)):
            result = [result]
        out = list(grads)
        for i, r in zip(present, result):
            out[i] = r
        return out

    def _reduce(self, variables):
        sums = [a.read_value() for a in self.locally_aggregated_grads]
        local = [ref_of(v) in self._local_vars for v in variables]
        shared = [(s, v) for s, v, lo in zip(sums, variables, local) if not lo]
        reduced = iter(self._allreduce_grads([s for s, _ in shared],
                                             [v for _, v in shared]) if shared else [])
        out = [s if lo else next(reduced) for s, lo in zip(sums, local)]
        if self.scale_local_gradients and any(local):
            out = scale_local_grads(out, local, self.process_set)
        with tf.control_dependencies([g for g in out]):
            reset = self.counter.assign(0)
        with tf.control_dependencies([reset]):
            n = self.backward_passes_per_step if self.average_aggregated_gradients else 1
            return [tf.identity(g / n) if n != 1 else tf.identity(g) for g in out]

    def apply_gradients(self, apply_grads_closure, optimizer, *args, **kwargs):
        grads = [g for g, _ in args[0]] if args else []
        global_step = kwargs.get("global_step")

        def skip():
            ops = []
            iterations = getattr(optimizer, "iterations", None)
            if iterations is not None:
                ops.append(iterations.assign_add(1))
            if global_step is not None:
                ops.append(v1.assign_add(global_step, tf.constant(1, global_step.dtype)))
            return tf.group(*ops)

        with tf.control_dependencies([g for g in grads if g is not None]):
            return tf.cond(tf.equal(self.counter, 0),
                           lambda: tf.group(apply_grads_closure()), skip)

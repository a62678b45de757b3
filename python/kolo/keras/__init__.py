"""kolo.keras: Horovod's Keras API (horovod.tensorflow.keras / horovod.keras)
on kolo's runtime, for Keras 3 with the TensorFlow backend and for tf_keras
(Keras 2, selected with ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is
imported). A Horovod Keras script changes only its import line::

    import kolo.keras as hvd        # or kolo.tensorflow.keras
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

Which Keras is served is TensorFlow's ``tf.keras``: Keras 3, or tf_keras
under ``TF_USE_LEGACY_KERAS=1``. The collectives and the process sets are
kolo.tensorflow's. See docs/tensorflow.md, section "Keras".
"""

import tensorflow as tf

import kolo.tensorflow as _tf
from kolo.tensorflow import (  # noqa: F401  (Horovod's keras modules re-export these)
    init, shutdown, is_initialized, size, local_size, cross_size, rank, local_rank, cross_rank,
    mpi_built, gloo_built, nccl_built, cuda_built, Average, Sum, Adasum, Compression,
    ProcessSet, global_process_set, add_process_set, remove_process_set)
for _name in ("start_timeline", "stop_timeline", "mpi_threads_supported", "mpi_enabled",
              "gloo_enabled", "ddl_built", "ccl_built", "rocm_built", "join", "barrier",
              "allgather_object", "broadcast_object"):
    if hasattr(_tf, _name):
        globals()[_name] = getattr(_tf, _name)
del _name

from kolo.keras.optimizer import distributed_optimizer as _distributed_optimizer
from kolo.keras.saving import load_model  # noqa: F401
from kolo.keras import callbacks, elastic  # noqa: F401
from kolo.keras import lr, ps  # noqa: F401  (kolo.lr's rules; MPI-Learn's way on kolo's servers)


def _check_options(op, groups, num_groups, backward_passes_per_step, gradient_predivide_factor):
    if op != Average and op != Sum:
        raise ValueError("kolo.keras.DistributedOptimizer: op must be Average or Sum, got %r" % (op,))
    if num_groups:
        if groups is not None:
            raise ValueError("kolo.keras.DistributedOptimizer: give groups or num_groups, not both")
        groups = num_groups
    if groups is not None and not isinstance(groups, list):
        if not isinstance(groups, int) or groups <= 0:
            raise ValueError("kolo.keras.DistributedOptimizer: groups must be a positive int or a "
                             "list of lists of variables, got %r" % (groups,))
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError("kolo.keras.DistributedOptimizer: backward_passes_per_step must be an "
                         "int >= 1, got %r" % (backward_passes_per_step,))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("kolo.keras.DistributedOptimizer: gradient_predivide_factor needs "
                         "op=Average, got op=%r" % (op,))
    return groups


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A Keras optimizer like ``optimizer`` (same class name, same config)
    whose updates use the gradients combined over ``process_set``.

    Args (Horovod's): name (prefix of the allreduce ops' names; default
    "Distributed" + the class's name), compression (``Compression.none`` /
    ``Compression.fp16``), sparse_as_dense (``IndexedSlices`` made dense
    before the allreduce), gradient_predivide_factor (f: scale by 1/f
    before the sum and f/size after it; needs op=Average), op (Average or
    Sum), backward_passes_per_step (n: gradients of n calls are summed
    locally and reduced and applied on every n-th call), average_aggregated_gradients
    (divide those sums by n), num_groups / groups (explicit grouping: an int
    or a list of lists of variables), process_set, scale_local_gradients
    (divide the gradients of ``register_local_var`` variables by the set's
    size). device_dense and device_sparse are accepted and unused (kolo's
    collectives run on CPU tensors).
    """
    groups = _check_options(op, groups, num_groups, backward_passes_per_step,
                            gradient_predivide_factor)
    return _distributed_optimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """``DistributedOptimizer`` whose gradients of the variables of
    ``local_layers`` (a Keras layer or a list of them) stay this rank's own
    (``register_local_var``)."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError("kolo.keras.PartialDistributedOptimizer: local_layers must be Keras "
                             "layers, got %r" % (layer,))
    opt = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression,
                               sparse_as_dense, gradient_predivide_factor, op,
                               backward_passes_per_step, average_aggregated_gradients, 0, groups,
                               process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def broadcast_global_variables(root_rank):
    """kolo.tensorflow.broadcast_global_variables (graph mode's global
    variables; in TensorFlow 2's eager mode there are none: use
    ``callbacks.BroadcastGlobalVariablesCallback`` or
    ``kolo.tensorflow.broadcast_variables(model.variables, root_rank)``)."""
    return _tf.broadcast_global_variables(root_rank)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """Allreduce of a tensor-compatible value (a constant named ``name``);
    op defaults to Average. Returns a tensor."""
    return _tf.allreduce(tf.constant(value, name=name), average=average,
                         prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                         op=op, compression=compression)


def allgather(value, name=None):
    """Allgather of a tensor-compatible value along its first dimension."""
    return _tf.allgather(tf.constant(value, name=name))


def broadcast(value, root_rank, name=None):
    """Broadcast of a tensor-compatible value from ``root_rank``."""
    return _tf.broadcast(tf.constant(value, name=name), root_rank)


def reducescatter(value, name=None, op=Average):
    """Reducescatter of a tensor-compatible value (op defaults to Average)."""
    return _tf.reducescatter(tf.constant(value, name=name), op=op)

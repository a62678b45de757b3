"""Horovod's reducing collectives on TensorFlow tensors, over mpi_ops:
``allreduce`` and ``grouped_allreduce`` (dense tensors, and tf.IndexedSlices
as two allgathers), ``reducescatter`` and ``grouped_reducescatter``, each
with gradient compression, ``op`` (Average, Sum, Min, Max, Product; Adasum
is refused) and pre/postscale factors. Eager or in a tf.function / TF1
graph alike: the ops below are real TensorFlow ops.

A tf.IndexedSlices (a sparse gradient: rows ``values`` at ``indices`` of a
``dense_shape`` tensor) is reduced by gathering every rank's values and
indices: the result lists each rank's rows, duplicates included, which is
the sum once scattered (tf.convert_to_tensor adds duplicate rows). Average
divides the gathered values by the set's size. Only Sum and Average mean
something there, and scale factors are refused, as in Horovod.
"""

import tensorflow as tf

from kolo import _native
from kolo.tensorflow import errors
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.mpi_ops import (Adasum, Average, Sum, _allreduce,
                                     _grouped_allreduce, _grouped_reducescatter,
                                     _reducescatter, allgather, global_process_set,
                                     grouped_allgather, size_op)


def _elastic():
    """Whether this is an elastic job (its size may change under a traced
    tf.function, so sizes are read by size_op when the graph runs)."""
    try:
        return _native.elastic_world()[0] != 0
    except Exception:  # noqa: BLE001 - not initialised: not elastic yet
        return False


def set_size(process_set, dtype):
    """The set's size as a ``dtype`` scalar (size_op in an elastic job)."""
    if _elastic():
        return tf.cast(size_op(process_set_id=process_set.process_set_id), dtype)
    return tf.cast(process_set.size(), dtype)


def resolve_op(op, average, what):
    """Horovod's ``op`` / deprecated ``average`` pair as one op (default
    Average); Adasum is refused."""
    if op is not None and average is not None:
        raise errors.invalid_argument(
            "%s: give op or the deprecated average, not both (op=%r, average=%r)"
            % (what, op, average))
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise errors.adasum_not_supported(what)
    return op


def _check_sparse(op, prescale_factor, postscale_factor, what):
    if op == Adasum:
        raise errors.adasum_not_supported(what + " of tf.IndexedSlices")
    if op not in (Sum, Average):
        raise errors.not_supported(
            "%s: only Sum and Average reduce tf.IndexedSlices (got op=%r); "
            "pass sparse_as_dense=True or convert the gradient to a dense "
            "tensor for other ops" % (what, op))
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise errors.not_supported(
            "%s: prescale_factor and postscale_factor are not supported with "
            "tf.IndexedSlices (got %r and %r)" % (what, prescale_factor,
                                                 postscale_factor))


def _sparse_result(values, indices, like, op, process_set):
    if op == Average:
        values = values / set_size(process_set, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=like.dense_shape)


def allreduce(tensor, average=None, device_dense='', device_sparse='',
              compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces ``tensor`` (tf.Tensor, tf.Variable or tf.IndexedSlices) over
    the ranks of ``process_set``; every rank gets the result, of the input's
    shape and dtype. ``op``: Average (default), Sum, Min, Max, Product.
    ``compression`` applies to dense tensors (Compression.fp16: floats travel
    as float16). Average divides by the ranks that took part (not those that
    called join())."""
    if op == Adasum:
        # Before resolve_op, so that sparse tensors get their own message.
        raise errors.adasum_not_supported(
            "allreduce of tf.IndexedSlices" if isinstance(tensor, tf.IndexedSlices)
            else "allreduce")
    op = resolve_op(op, average, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(op, prescale_factor, postscale_factor, "allreduce")
        with tf.device(device_sparse):
            values = allgather(tensor.values, process_set=process_set,
                               ignore_name_scope=ignore_name_scope)
            indices = allgather(tensor.indices, process_set=process_set,
                                ignore_name_scope=ignore_name_scope)
            return _sparse_result(values, indices, tensor, op, process_set)
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _allreduce(compressed, name=name, op=op,
                             prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor,
                             ignore_name_scope=ignore_name_scope,
                             process_set=process_set)
        return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set, ignore_name_scope=False,
                      name=None):
    """allreduce of every tensor of ``tensors`` as one group: the dense ones
    are negotiated and fused together; tf.IndexedSlices go through two
    grouped allgathers. Returns a list in the order of ``tensors``."""
    if not tensors:
        return tensors
    tensors = list(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if op == Adasum:
        raise errors.adasum_not_supported(
            "grouped_allreduce of tf.IndexedSlices" if sparse else "grouped_allreduce")
    op = resolve_op(op, average, "grouped_allreduce")
    out = [None] * len(tensors)
    if sparse:
        _check_sparse(op, prescale_factor, postscale_factor, "grouped_allreduce")
        with tf.device(device_sparse):
            values = grouped_allgather([tensors[i].values for i in sparse],
                                       process_set=process_set,
                                       ignore_name_scope=ignore_name_scope)
            indices = grouped_allgather([tensors[i].indices for i in sparse],
                                        process_set=process_set,
                                        ignore_name_scope=ignore_name_scope)
            for i, v, ix in zip(sparse, values, indices):
                out[i] = _sparse_result(v, ix, tensors[i], op, process_set)
    if dense:
        with tf.device(device_dense):
            compressed, ctxs = zip(*[compression.compress(tensors[i]) for i in dense])
            reduced = _grouped_allreduce(list(compressed), name=name, op=op,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         ignore_name_scope=ignore_name_scope,
                                         process_set=process_set)
            for i, r, ctx in zip(dense, reduced, ctxs):
                out[i] = compression.decompress(r, ctx)
    return out


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces ``tensor`` over the set and returns this rank's block of rows
    of the result (a first dimension that does not divide by the set size
    gives the first ranks one row more, as in Horovod). ``op``: Average
    (default) or Sum."""
    op = resolve_op(op, None, "reducescatter")
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _reducescatter(compressed, name=name, op=op,
                                 ignore_name_scope=ignore_name_scope,
                                 process_set=process_set,
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor)
        return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none,
                          op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of every tensor of ``tensors`` as one group."""
    if not tensors:
        return tensors
    op = resolve_op(op, None, "grouped_reducescatter")
    with tf.device(device_dense):
        compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
        reduced = _grouped_reducescatter(list(compressed), op=op,
                                         process_set=process_set,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor)
        return [compression.decompress(r, ctx) for r, ctx in zip(reduced, ctxs)]

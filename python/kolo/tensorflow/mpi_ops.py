"""kolo.tensorflow's op layer: kolo's TensorFlow ops and their gradients.

The ops are a C++ library (src/frameworks/tensorflow, ``_kolo_tf_ops.so``)
of asynchronous kernels that submit to kolo's runtime through its C API, so
negotiation, fusion, the response cache, the timeline, the stall inspector
and process sets apply as they do to kolo.torch. They run eagerly and
inside ``tf.function`` / graphs. This module has Horovod's
``horovod/tensorflow/mpi_ops.py`` names and signatures; kolo.tensorflow
builds the public API (compression, Average on IndexedSlices, the tape) on
it.

Loading: the library is built for one TensorFlow version, written next to
it (``_kolo_tf_ops.json``); under another version the import fails with an
error naming both versions and the command that rebuilds it, before the
library is loaded (its C++ symbols would not match).

Names: kolo's runtime matches operations across ranks by name. In a graph
(or tf.function) an unnamed op is named after its input tensor, as
Horovod's are (``KoloAllreduce_<tensor>``), and its kernel uses the graph
node's name, unique within the graph; in eager mode, where every op of a
type has the same node name, an unnamed op gets kolo's generated name
(``kolo._ops.op_name``: one counter shared with kolo.torch).

Errors: a failed op raises TensorFlow's error class for it (ranks that
disagree, or a call before init: FailedPreconditionError; a bad argument:
InvalidArgumentError; a lost peer: UnavailableError; a silent one:
DeadlineExceededError), whose message starts with kolo's error class name
(``MismatchError: ...``).
"""

import json
import os
import re

import tensorflow as tf

from kolo import _ops
from kolo import errors as _errors
from kolo.process_sets import (  # noqa: F401  (re-exported)
    ProcessSet, add_process_set, remove_process_set, global_process_set)
from kolo import process_sets as _process_sets

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY = os.path.join(_HERE, "_kolo_tf_ops.so")
_BUILD_INFO = os.path.join(_HERE, "_kolo_tf_ops.json")


def _load_library():
    """The op library, after checking it was built for this TensorFlow."""
    if not os.path.exists(_LIBRARY) or not os.path.exists(_BUILD_INFO):
        raise ImportError(
            "kolo.tensorflow: kolo was built without TensorFlow (no %s). Build it "
            "with a Python that has TensorFlow: cmake -DKOLO_TF_PYTHON=<python> "
            "(default: .venv/bin/python of the source tree, made by "
            "scripts/install-deps.sh), then build the target kolo_tf_ops"
            % _LIBRARY)
    with open(_BUILD_INFO) as f:
        info = json.load(f)
    built, running = info.get("tensorflow"), tf.__version__
    if built != running:
        raise ImportError(
            "kolo.tensorflow: the op library was built for TensorFlow %s but "
            "TensorFlow %s is running (%s). Rebuild it for this TensorFlow: %s"
            % (built, running, tf.__file__, info.get("rebuild", "")))
    return tf.load_op_library(_LIBRARY)


MPI_LIB = _load_library()

# Horovod's reduction constants (its values) and kolo's codes (kolo_op).
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5
_KOLO_OP = {Sum: 0, Average: 1, Min: 2, Max: 3, Product: 4}
_HOROVOD_OP = {v: k for k, v in _KOLO_OP.items()}


def _kolo_op(op, what):
    if op == Adasum:
        raise _errors.adasum_not_supported(what)
    if op not in _KOLO_OP:
        raise _errors.invalid_argument(
            "%s: unknown reduction op %r (Average, Sum, Min, Max or Product)"
            % (what, op))
    return _KOLO_OP[op]


# --- the job (kolo.basics, shared with kolo.torch) ------------------------------------

from kolo.basics import (  # noqa: E402,F401  (re-exported)
    init, shutdown, is_initialized, size, rank, local_size, local_rank, cross_size,
    cross_rank, mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
    nccl_built, cuda_built, rocm_built, ddl_built, ccl_built, start_timeline,
    stop_timeline, straggler_report)


# --- names -------------------------------------------------------------------------

def _executing_eagerly():
    return tf.executing_eagerly()


def _normalize_name(name):
    """A TensorFlow op name made of ``name``."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _names(kind, name, graph_default):
    """(tensor_name input, op node name) of one op. Eager: kolo's name (given
    or generated), no node name. Graph: the node name (given, else
    ``graph_default()``) and an empty tensor_name, so that the kernel uses
    the node name TensorFlow made unique."""
    if _executing_eagerly():
        return _ops.op_name(kind, name), None
    return "", name if name is not None else graph_default()


def _set_id(process_set, what):
    return _process_sets._native_id(process_set, what)


def _set_of(process_set_id):
    """The ProcessSet of an id read back from an op (gradients)."""
    if process_set_id == 0:
        return global_process_set
    ps = _process_sets._registered.get(process_set_id)
    if ps is None:
        raise _errors.invalid_argument(
            "process set id %d is not known on rank %d" % (process_set_id, rank()))
    return ps


# --- allreduce -----------------------------------------------------------------------



def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """The reduction of ``tensor`` over the process set (same shape and dtype
    on every rank). ``op``: Sum, Average (over the ranks that have not
    joined), Min, Max or Product.

    Floating-point tensors round as Horovod's do: scale factors apply (in
    float32 for float16 and bfloat16) to the values before the reduction,
    rounded to the tensor's dtype (prescale), and to the reduced result
    (postscale); a product multiplies the ranks' tensors in rank order,
    rounding after each step (an allgather, then TensorFlow's own
    reduce_prod). A result then equals what one process computes from the
    same tensors, on any number of ranks (kolo's runtime would scale
    without rounding first, and multiply in the order of its ring)."""
    code = _kolo_op(op, "allreduce")
    tensor_name, node = _names("allreduce", name, lambda: "KoloAllreduce_%s" % _normalize_name(
        tensor.name))
    ps_id = _set_id(process_set, "allreduce")
    if tensor.dtype.is_floating and (prescale_factor != 1.0 or postscale_factor != 1.0 or op == Product):
        scaled = _scaled(tensor, prescale_factor)
        if op == Product:
            rows = MPI_LIB.kolo_allgather(
                tf.expand_dims(scaled, 0), tensor_name, ignore_name_scope=ignore_name_scope,
                process_set_id=ps_id, name=node)
            reduced = tf.math.reduce_prod(rows, axis=0)
        else:
            reduced = MPI_LIB.kolo_allreduce(
                scaled, tensor_name, reduce_op=code, ignore_name_scope=ignore_name_scope,
                process_set_id=ps_id, name=node)
        return _scaled(reduced, postscale_factor)
    return MPI_LIB.kolo_allreduce(
        tensor, tensor_name, reduce_op=code, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
        process_set_id=ps_id, name=node)


@tf.RegisterGradient("KoloAllreduce")
def _allreduce_grad(op, grad):
    """Every rank's output depends on every rank's input alike: the gradient
    is the same reduction of the output gradients."""
    return [_allreduce(grad, op=_HOROVOD_OP[op.get_attr("reduce_op")],
                       prescale_factor=op.get_attr("prescale_factor"),
                       postscale_factor=op.get_attr("postscale_factor"),
                       ignore_name_scope=op.get_attr("ignore_name_scope"),
                       process_set=_set_of(op.get_attr("process_set_id"))), None]


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """Allreduces of ``tensors`` (one dtype) that run together; floating-point
    tensors round as _allreduce's do."""
    code = _kolo_op(op, "grouped_allreduce")
    tensor_name, node = _names(
        "grouped_allreduce", name, lambda: _normalize_name(
            "KoloGroupedAllreduce_%s_%s" % (tensors[0].name, tensors[-1].name)))
    ps_id = _set_id(process_set, "grouped_allreduce")
    if tensors[0].dtype.is_floating and (prescale_factor != 1.0 or postscale_factor != 1.0 or op == Product):
        scaled = [_scaled(t, prescale_factor) for t in tensors]
        if op == Product:
            rows = MPI_LIB.kolo_grouped_allgather(
                [tf.expand_dims(t, 0) for t in scaled], tensor_name,
                ignore_name_scope=ignore_name_scope, process_set_id=ps_id, name=node)
            reduced = [tf.math.reduce_prod(r, axis=0) for r in rows]
        else:
            reduced = MPI_LIB.kolo_grouped_allreduce(
                scaled, tensor_name, reduce_op=code, ignore_name_scope=ignore_name_scope,
                process_set_id=ps_id, name=node)
        return [_scaled(r, postscale_factor) for r in reduced]
    return MPI_LIB.kolo_grouped_allreduce(
        tensors, tensor_name, reduce_op=code, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
        process_set_id=ps_id, name=node)


@tf.RegisterGradient("KoloGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return list(_grouped_allreduce(
        list(grads), op=_HOROVOD_OP[op.get_attr("reduce_op")],
        prescale_factor=op.get_attr("prescale_factor"),
        postscale_factor=op.get_attr("postscale_factor"),
        ignore_name_scope=op.get_attr("ignore_name_scope"),
        process_set=_set_of(op.get_attr("process_set_id")))) + [None]


# --- allgather -----------------------------------------------------------------------

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """The ranks' tensors concatenated along the first dimension (which may
    differ across ranks; the other dimensions may not)."""
    tensor_name, node = _names("allgather", name, lambda: "KoloAllgather_%s" % _normalize_name(
        tensor.name))
    return MPI_LIB.kolo_allgather(
        tensor, tensor_name, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set, "allgather"), name=node)


def _allgather_grad_of(x, grad, ignore_name_scope, process_set):
    """This rank's rows of the averaged output gradient (Horovod's rule)."""
    grad = _allreduce(grad, op=Average, ignore_name_scope=ignore_name_scope,
                      process_set=process_set)
    with tf.device("/cpu:0"):
        rows = tf.reshape(tf.shape(x)[0], [1])
        rows = tf.reshape(allgather(rows, ignore_name_scope=ignore_name_scope,
                                    process_set=process_set), [process_set.size()])
    return tf.split(grad, num_or_size_splits=rows, axis=0)[process_set.rank()]


@tf.RegisterGradient("KoloAllgather")
def _allgather_grad(op, grad):
    return [_allgather_grad_of(op.inputs[0], grad, op.get_attr("ignore_name_scope"),
                               _set_of(op.get_attr("process_set_id"))), None]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgathers of ``tensors`` (one dtype) submitted together."""
    tensor_name, node = _names(
        "grouped_allgather", name, lambda: _normalize_name(
            "KoloGroupedAllgather_%s_%s" % (tensors[0].name, tensors[-1].name)))
    return MPI_LIB.kolo_grouped_allgather(
        tensors, tensor_name, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set, "grouped_allgather"), name=node)


@tf.RegisterGradient("KoloGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    ps = _set_of(op.get_attr("process_set_id"))
    scope = op.get_attr("ignore_name_scope")
    return [_allgather_grad_of(x, g, scope, ps)
            for x, g in zip(op.inputs[:-1], grads)] + [None]


# --- broadcast -----------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Rank ``root_rank``'s tensor on every rank of the set."""
    tensor_name, node = _names("broadcast", name, lambda: "KoloBroadcast_%s" % _normalize_name(
        tensor.name))
    return MPI_LIB.kolo_broadcast(
        tensor, tensor_name, root_rank=root_rank, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set, "broadcast"), name=node)


@tf.RegisterGradient("KoloBroadcast")
def _broadcast_grad(op, grad):
    """Only the root's input reaches the outputs: it gets the averaged output
    gradient, the other ranks zeros."""
    reduced = _allreduce(grad, op=Average, ignore_name_scope=op.get_attr("ignore_name_scope"),
                         process_set=_set_of(op.get_attr("process_set_id")))
    if rank() != op.get_attr("root_rank"):
        return [reduced * 0, None]
    return [reduced, None]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns rank ``root_rank``'s values to ``variables`` (a tf.Variable or
    a list of them) on every rank; returns the assigned values (a list for a
    list)."""
    single = not isinstance(variables, (list, tuple))
    variables = [variables] if single else list(variables)
    results = []
    for i, var in enumerate(variables):
        var_name = None
        if name is not None:
            var_name = name if single else "%s.%d" % (name, i)
        elif _executing_eagerly():
            var_name = "broadcast_.%s" % getattr(var, "name", i)
        value = broadcast(tf.convert_to_tensor(var), root_rank, name=var_name,
                          process_set=process_set)
        results.append(var.assign(value))
    return results[0] if single else results


# --- alltoall ------------------------------------------------------------------------

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends ``splits[j]`` rows of the first dimension to rank j of the set
    (None: an equal split) and returns the rows received, in rank order, and
    (when ``splits`` is given) the number received from each rank."""
    tensor_name, node = _names("alltoall", name, lambda: "KoloAlltoall_%s" % _normalize_name(
        tensor.name))
    given = splits
    if splits is None:
        splits = tf.zeros([0], dtype=tf.int32)
    else:
        splits = tf.cast(tf.convert_to_tensor(splits), tf.int32)
    output, received = MPI_LIB.kolo_alltoall(
        tensor, splits, tensor_name, ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set, "alltoall"), name=node)
    return (output, received) if given is not None else output


@tf.RegisterGradient("KoloAlltoall")
def _alltoall_grad(op, grad, grad_received):
    """The output gradient sent back: rows return to the rank they came from."""
    back, _ = alltoall(grad, splits=op.outputs[1],
                       ignore_name_scope=op.get_attr("ignore_name_scope"),
                       process_set=_set_of(op.get_attr("process_set_id")))
    return [back, None, None]


# --- reducescatter -------------------------------------------------------------------

def _scaled(tensor, factor):
    """``tensor * factor`` as Horovod scales: integers in float64, float16 in
    float32, rounded back to the tensor's dtype."""
    if factor == 1.0:
        return tensor
    if tensor.dtype.is_integer:
        return tf.cast(tf.cast(tensor, tf.float64) * factor, tensor.dtype)
    if tensor.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(tf.cast(tensor, tf.float32) * factor, tensor.dtype)
    return tensor * tf.constant(factor, dtype=tensor.dtype)


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0,
                   postscale_factor=1.0):
    """This rank's block of rows of the reduction of ``tensor`` (Sum,
    Average, Min, Max, Product); a first dimension that does not divide by
    the set size gives the first ranks one row more, as Horovod does."""
    code = _kolo_op(op, "reducescatter")
    tensor_name, node = _names(
        "reducescatter", name, lambda: "KoloReducescatter_%s" % _normalize_name(tensor.name))
    out = MPI_LIB.kolo_reducescatter(
        _scaled(tensor, prescale_factor), tensor_name, reduce_op=code,
        ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set, "reducescatter"), name=node)
    return _scaled(out, postscale_factor)


def _reducescatter_grad_of(grad, code, scope, process_set):
    """Horovod's rule: the output gradients gathered back, times the set size
    for a sum."""
    if code == _KOLO_OP[Sum]:
        grad = grad * tf.cast(process_set.size(), grad.dtype)
    return allgather(grad, ignore_name_scope=scope, process_set=process_set)


@tf.RegisterGradient("KoloReducescatter")
def _reducescatter_grad(op, grad):
    return [_reducescatter_grad_of(grad, op.get_attr("reduce_op"),
                                   op.get_attr("ignore_name_scope"),
                                   _set_of(op.get_attr("process_set_id"))), None]


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    """Reducescatters of ``tensors`` (one dtype) submitted together."""
    code = _kolo_op(op, "grouped_reducescatter")
    tensor_name, node = _names(
        "grouped_reducescatter", name, lambda: _normalize_name(
            "KoloGroupedReducescatter_%s_%s" % (tensors[0].name, tensors[-1].name)))
    outs = MPI_LIB.kolo_grouped_reducescatter(
        [_scaled(t, prescale_factor) for t in tensors], tensor_name, reduce_op=code,
        ignore_name_scope=ignore_name_scope,
        process_set_id=_set_id(process_set, "grouped_reducescatter"), name=node)
    return [_scaled(t, postscale_factor) for t in outs]


@tf.RegisterGradient("KoloGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    ps = _set_of(op.get_attr("process_set_id"))
    code, scope = op.get_attr("reduce_op"), op.get_attr("ignore_name_scope")
    # One allgather each: TensorFlow may give float32 zeros for some outputs.
    return [_reducescatter_grad_of(g, code, scope, ps) for g in grads] + [None]


# --- join, barrier, layout -------------------------------------------------------------

def join():
    """This rank has run out of data: it takes part in the others'
    collectives (zeros for allreduce) until every rank has joined. Returns
    the rank that joined last (by the ranks' clocks), as an int32 scalar. In
    eager mode a join also re-aligns the ranks' generated names (kolo._ops)."""
    joined_at = tf.timestamp()
    with tf.control_dependencies([joined_at]):
        done = MPI_LIB.kolo_join()
    count = float(_ops.unnamed_count()) if _executing_eagerly() else 0.0
    with tf.control_dependencies([done]):
        row = tf.reshape(tf.stack([joined_at, tf.constant(count, tf.float64)]), [1, 2])
        info = allgather(row, name="join.last_rank" if _executing_eagerly() else None)
    if _executing_eagerly():
        _ops.catch_up_unnamed(int(tf.reduce_max(info[:, 1]).numpy()))
    return tf.cast(tf.argmax(info[:, 0]), tf.int32)


def barrier(process_set=global_process_set):
    """Returns when every rank of the set has reached it (an op in graph
    mode)."""
    return MPI_LIB.kolo_barrier(process_set_id=_set_id(process_set, "barrier"))


def size_op(process_set_id=0, name=None):
    """The number of ranks of the process set, as an int32 scalar read when
    the op runs."""
    return MPI_LIB.kolo_size(process_set_id=process_set_id, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this rank belongs to the process set, else 0 (int32)."""
    return MPI_LIB.kolo_process_set_included(process_set_id=process_set_id, name=name)


def local_size_op(name=None):
    return MPI_LIB.kolo_local_size(name=name)


def rank_op(name=None):
    return MPI_LIB.kolo_rank(name=name)


def local_rank_op(name=None):
    return MPI_LIB.kolo_local_rank(name=name)


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "cuda_built", "rocm_built", "ddl_built",
    "ccl_built", "start_timeline", "stop_timeline", "straggler_report", "Average", "Sum",
    "Adasum", "Min",
    "Max", "Product", "allgather", "grouped_allgather", "broadcast", "broadcast_",
    "alltoall", "join", "barrier", "size_op", "process_set_included_op", "local_size_op",
    "rank_op", "local_rank_op", "ProcessSet", "add_process_set", "remove_process_set",
    "global_process_set",
]

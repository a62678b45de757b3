"""Model-level helpers: broadcasting variables and Python objects,
gathering objects (Horovod's horovod.tensorflow.functions).

``broadcast_variables`` assigns root_rank's values to every rank's
variables: eagerly through one tf.function (the broadcasts are submitted
together, so they run concurrently and fuse), in a TF1 graph as one grouped
op to run in a session. ``inplace=True`` broadcasts into the variables'
buffers (mpi_ops.broadcast_) instead of assigning a broadcast copy.

The object functions pickle the object and move the bytes through kolo's
runtime directly (kolo.numpy on NumPy buffers), not through TensorFlow ops:
they work the same eagerly and in TF1 graph mode, without a session, and
leave no ops in the user's graph. ``session`` is accepted for Horovod's
signatures and not needed.
"""

import io
import pickle

import numpy as np
import tensorflow as tf

from kolo import _native
from kolo.tensorflow import errors
from kolo.tensorflow.mpi_ops import broadcast, broadcast_, global_process_set
from kolo.tensorflow.util import _executing_eagerly

_eager_broadcasts = {}  # (root_rank, process set) -> tf.function


def _as_tf_variable(v):
    """``v`` as a tf.Variable: itself, or the one a Keras 3 variable
    (keras.Variable with the TensorFlow backend) holds."""
    if isinstance(v, tf.Variable):
        return v
    inner = getattr(v, "value", None)
    if isinstance(inner, tf.Variable):
        return inner
    return None


def _check_variables(variables, what):
    variables = list(variables)
    out = [_as_tf_variable(v) for v in variables]
    bad = [type(v).__name__ for v, o in zip(variables, out) if o is None]
    if bad:
        raise errors.invalid_argument(
            "%s: expects tf.Variable or Keras variables, got %s"
            % (what, ", ".join(sorted(set(bad)))))
    return out


def _assign_group(variables, root_rank, process_set):
    return [v.assign(broadcast(v, root_rank, process_set=process_set))
            for v in variables]


def broadcast_variables(variables, root_rank, process_set=global_process_set,
                        inplace=False):
    """Makes every rank's ``variables`` equal to root_rank's (a global
    rank). Eagerly it returns None when done; in a TF1 graph it returns the
    op to run."""
    variables = _check_variables(variables, "broadcast_variables")
    if inplace:
        if _executing_eagerly():
            if variables:
                broadcast_(variables, root_rank, process_set=process_set)
            return None
        if not variables:
            return tf.no_op()
        return tf.group(*broadcast_(variables, root_rank, process_set=process_set))
    if not _executing_eagerly():
        return tf.group(*_assign_group(variables, root_rank, process_set))
    if not variables:
        return None
    key = (root_rank, process_set)
    fn = _eager_broadcasts.get(key)
    if fn is None:
        def group(vs):
            _assign_group(vs, root_rank, process_set)
        fn = _eager_broadcasts[key] = tf.function(group)
    fn(variables)
    return None


def _process_set_id(process_set, what):
    return process_set._native_id(what)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Returns root_rank's ``obj`` (pickled) on every rank of the set;
    ``root_rank`` is a global rank. Unlike Horovod, an unnamed call is named
    for the function, not for the object's type (which the other ranks'
    placeholder objects need not share)."""
    import kolo.numpy as kn
    del session
    name = "broadcast_object" if name is None else "broadcast_object." + name
    ps = _process_set_id(process_set, "broadcast_object")
    is_root = _native.rank() == root_rank
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL) if is_root else b""
    size = np.array([len(data)], dtype=np.int64)
    kn.broadcast_(size, root_rank, name=name + ".size", process_set=ps)
    payload = np.frombuffer(data, dtype=np.uint8).copy() if is_root else \
        np.empty(int(size[0]), dtype=np.uint8)
    kn.broadcast_(payload, root_rank, name=name + ".data", process_set=ps)
    if is_root:
        return obj
    return pickle.load(io.BytesIO(payload.tobytes()))


def broadcast_object_fn(root_rank=0, session=None, name=None,
                        process_set=global_process_set):
    """A function ``f(obj)`` that broadcasts ``obj`` from root_rank
    (Horovod's TF1 form of broadcast_object; here the same call)."""
    del session
    name = name or "broadcast_object_fn"

    def _bcast(obj):
        return broadcast_object(obj, root_rank, name=name, process_set=process_set)
    return _bcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every set member's ``obj``, in rank order."""
    import kolo.numpy as kn
    del session
    name = "allgather_object" if name is None else "allgather_object." + name
    ps = _process_set_id(process_set, "allgather_object")
    data = np.frombuffer(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    sizes = kn.allgather(np.array([data.size], dtype=np.int64), name=name + ".size",
                         process_set=ps)
    gathered = kn.allgather(data, name=name + ".data", process_set=ps).tobytes()
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(gathered[offset:offset + n]))
        offset += n
    return out

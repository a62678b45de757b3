"""Small helpers with Horovod's names (``horovod.tensorflow.util``): whether
TensorFlow runs eagerly, a tf.function wrapper, a cache of functions keyed
by their arguments and the execution mode, and variables as hashable refs."""

import tensorflow as tf


def _executing_eagerly():
    """True when ops run eagerly (False inside a tf.function or a TF1 graph)."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """``f`` as a tf.function: its collectives are submitted together, so the
    runtime runs them concurrently and fuses them."""
    return tf.function(f)


def _cache(f):
    """Memoizes ``f`` by its (hashable) arguments and the execution mode, so
    that one tf.function is built per configuration and traced once."""
    cache = {}

    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]

    return wrapper


def vars_to_refs(variables):
    """Nested lists of variables as nested tuples of their refs (hashable)."""
    if isinstance(variables, (list, tuple)):
        return tuple(vars_to_refs(v) for v in variables)
    return _VarRef(variables)


def refs_to_vars(refs):
    """The inverse of vars_to_refs (tuples become lists)."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.var


class _VarRef:
    """A variable, hashed and compared by ref_of (Keras 3 variables have no
    ref())."""

    def __init__(self, var):
        self.var = var
        self.key = ref_of(var)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _VarRef) and self.key == other.key


def ref_of(x):
    """A hashable key for a variable or tensor: ``x.ref()``; a Keras 3
    variable (which has no ref()) is keyed by the tf.Variable it holds."""
    ref = getattr(x, "ref", None)
    if ref is not None:
        return ref()
    inner = getattr(x, "value", None)
    if isinstance(inner, tf.Variable):
        return inner.ref()
    return ("id", id(x))

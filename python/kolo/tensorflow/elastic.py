"""Elastic training with TensorFlow (Horovod's horovod.tensorflow.elastic):
``run``, ``TensorFlowState`` (a list of variables) and
``TensorFlowKerasState`` (a Keras model and its optimizer), each with any
other keyword arguments as plain values (kolo.elastic.ObjectState).

The run loop, the rollback / re-form / sync logic and the host-update checks
are kolo.elastic's, shared with kolo.torch. What this module adds:

- ``run`` turns a failure of a kolo TensorFlow op (a tf.errors.OpError
  whose message is kolo's: a lost peer, a timeout) into the kolo exception
  the loop classifies, and re-forms the job with kolo.tensorflow's
  shutdown() and init();
- the states save variables as host copies (NumPy), restore by assigning
  them, and sync by broadcasting rank 0's variables (broadcast_variables),
  eagerly or, for TensorFlowState in a TF1 graph, through a session.
"""

import re

import tensorflow as tf

import kolo
from kolo.elastic import ObjectState, State, notify_hosts_updated  # noqa: F401
from kolo.elastic import run_fn as _run_fn
from kolo.tensorflow.errors import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from kolo.tensorflow.functions import broadcast_variables
from kolo.tensorflow.util import _executing_eagerly

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState",
           "HorovodInternalError", "HostsUpdatedInterrupt", "notify_hosts_updated"]

def _as_kolo_error(err):
    """The kolo exception a failed kolo TensorFlow op stands for, or None.
    The op layer raises UnavailableError for a lost peer,
    DeadlineExceededError for a silent one and InternalError for another
    runtime failure, each with a message that starts with kolo's class name.
    Inside a tf.function (model.fit's step) TensorFlow re-raises the op's
    error as another class ("Graph execution error: ..."), keeping the op's
    message as one of its lines: a line that starts with the class name is
    what counts."""
    message = getattr(err, "message", str(err))
    for name, cls in (("PeerLostError", kolo.PeerLostError),
                      ("KoloTimeoutError", kolo.KoloTimeoutError),
                      ("KoloError", kolo.KoloError)):
        if re.search(r"(^|\n)(\{\{[^}]*\}\} )?%s: " % name, message):
            return cls(message)
    return None


def _reset():
    import kolo.tensorflow as hvd
    hvd.shutdown()
    hvd.init()


def run(func):
    """Decorator for the elastic training function ``func(state, ...)``
    (kolo.elastic.run_fn: sync, run, roll back on a lost peer, re-form)."""

    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as e:
            kolo_error = _as_kolo_error(e)
            if kolo_error is None:
                raise
            raise kolo_error from e

    translated.__name__ = getattr(func, "__name__", "elastic_fn")
    translated.__doc__ = getattr(func, "__doc__", None)
    return _run_fn(translated, _reset)


def _global_variables():
    return tf.compat.v1.global_variables()


class TensorFlowState(ObjectState):
    """State of a list of tf.Variables (default: the TF1 global variables)
    and of plain values (keyword arguments, kept as attributes). Eager, or a
    TF1 graph with ``session`` (default: the default session)."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = list(variables) if variables is not None else _global_variables()
        self._eager = _executing_eagerly()
        self.session = session if session is not None or self._eager else \
            tf.compat.v1.get_default_session()
        self._bcast_op = None if self._eager else \
            broadcast_variables(self.variables, root_rank=0)
        self._save_variables()
        super().__init__(**kwargs)

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        self._load_variables()
        super().restore()

    def sync(self):
        if self._eager:
            broadcast_variables(self.variables, root_rank=0)
        else:
            self.session.run(self._bcast_op)
        self._save_variables()
        super().sync()

    def _save_variables(self):
        if self._eager:
            self._values = [v.numpy() for v in self.variables]
        else:
            self._values = self.session.run(self.variables)

    def _load_variables(self):
        for var, value in zip(self.variables, self._values):
            if self._eager:
                var.assign(value)
            else:
                var.load(value, self.session)


def _optimizer_variables(optimizer):
    """Keras 3 optimizers have a ``variables`` list, tf_keras's a method."""
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class TensorFlowKerasState(ObjectState):
    """State of a built Keras model, its optimizer (default:
    ``model.optimizer``) and plain values (keyword arguments). Keras 3 or
    tf_keras, eagerly. ``backend`` is accepted for Horovod's signature."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        del backend
        if not getattr(model, "built", True):
            raise kolo.InvalidArgumentError(
                "TensorFlowKerasState: the model must be built first (call "
                "model.build(input_shape) or run it on a batch)")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else \
            getattr(model, "optimizer", None)
        self._save_model()
        super().__init__(**kwargs)

    def _variables(self):
        return list(self.model.variables) + _optimizer_variables(self.optimizer)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._load_model()
        super().restore()

    def sync(self):
        broadcast_variables(self._variables(), root_rank=0)
        self._save_model()
        super().sync()

    def _save_model(self):
        self._saved = [v.numpy() for v in self._variables()]

    def _load_model(self):
        variables = self._variables()
        # An optimizer creates its variables on its first step: a commit
        # from before that has fewer, which stay as they are.
        for var, value in zip(variables, self._saved):
            var.assign(value)

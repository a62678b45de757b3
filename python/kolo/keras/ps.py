"""kolo.keras.ps: MPI-Learn's way of training Keras models, on kolo's
parameter servers (docs/parameter_server.md; docs/tensorflow.md,
"Parameter servers (MPI-Learn's way)").

Start the job with servers (``kolorun --servers S -np N``); on the server
ranks ``hvd.init()`` serves and exits, so the rest of the script runs on the
workers only::

    import kolo.keras as hvd
    from kolo.keras import ps

    hvd.init()
    model = ...
    opt = ps.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9),
                                  mode="downpour", staleness_bound=4)
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, ...)

The arguments and their meaning are kolo.torch.ps.DistributedOptimizer's:

- sync and downpour: the servers apply the wrapped optimizer's rule (SGD,
  Adam, AdamW, RMSprop) with its hyper-parameters and the learning rate of
  each step (a LearningRateSchedule or a callback that sets
  ``optimizer.learning_rate`` is followed); the worker only computes
  gradients (clipped by the optimizer's clipnorm / clipvalue /
  global_clipnorm first).
- easgd: the wrapped optimizer, any Keras optimizer, steps on the worker,
  and every ``easgd_period`` steps the worker and the center exchange the
  elastic difference.

The servers start when the optimizer is built on the model's trainable
variables (``model.fit`` builds it before the first batch, a custom loop at
its first ``apply_gradients``; pass ``variables`` to start at once):
worker 0's values seed them and every worker pulls them, so every worker
takes its first step from worker 0's parameters. Variables must be float32.

The servers apply PyTorch's update rules (src/ps/update_rule.h), given the
Keras optimizer's hyper-parameters; where Keras's rule differs the servers'
result differs as docs/tensorflow.md says (Adam's and RMSprop's epsilon;
Keras's decoupled weight decay is AdamW's, and SGD's with momentum 0).

How a step runs: TensorFlow does not lend a variable's memory to other code,
so the native client works on float32 NumPy buffers of its own
(kolo.ps_client.BufferClient). The optimizer's apply step calls it through
``tf.numpy_function`` (eagerly or inside model.fit's tf.function; not under
XLA: compile with ``jit_compile=False``) with the variables' values and the
gradients, and assigns the parameters it returns to the variables.
"""

import numpy as np
import tensorflow as tf

from kolo import _native
from kolo import ps_client as _client
from kolo.keras import _keras_flavor

__all__ = ["DistributedOptimizer", "stats", "is_validator", "finish", "should_stop"]

# The job's one parameter-server optimizer (kolo_ps_start makes one per job).
_current = None

# Keras's hyper-parameters -> the servers' (PyTorch's names), per rule.
_KINDS = ("AdamW", "Adam", "RMSprop", "SGD")  # AdamW first: it is an Adam


def _kind(optimizer):
    names = [c.__name__ for c in type(optimizer).__mro__]
    for kind in _KINDS:
        if kind in names:
            return kind
    return None


def _hyper(optimizer, mode):
    """(kind, hyper) for the servers: the update rule and its
    hyper-parameters under PyTorch's names, from the optimizer's config.
    ValueError for what the servers cannot apply as Keras would."""
    cfg = optimizer.get_config()
    lr = _initial_lr(optimizer)
    if mode == "easgd":
        return "SGD", {"lr": lr}  # the worker's own optimizer steps
    kind = _kind(optimizer)
    name = type(optimizer).__name__
    if kind is None:
        raise ValueError("optimizer %s is not supported by the parameter servers in "
                         "mode %r (supported: SGD, Adam, AdamW, RMSprop; easgd takes any)"
                         % (name, mode))
    if cfg.get("use_ema"):
        raise ValueError("%s(use_ema=True) is not supported by the parameter servers in "
                         "mode %r" % (name, mode))
    if (cfg.get("gradient_accumulation_steps") or 1) > 1:
        raise ValueError("%s(gradient_accumulation_steps=%r) is not supported by the "
                         "parameter servers in mode %r (push_period=N accumulates N "
                         "steps' gradients between pushes)"
                         % (name, cfg["gradient_accumulation_steps"], mode))
    wd = float(cfg.get("weight_decay") or 0.0)
    if wd and any(getattr(optimizer, a, None) for a in (
            "_exclude_from_weight_decay", "_exclude_from_weight_decay_names",
            "_exclude_from_weight_decay_pattern")):
        raise ValueError("%s: exclude_from_weight_decay is not supported by the "
                         "parameter servers (they decay every parameter)" % name)
    if kind == "SGD":
        momentum = float(cfg.get("momentum", 0.0))
        if wd and momentum:
            raise ValueError("SGD(weight_decay=%g, momentum=%g): Keras decays the "
                             "weights apart from the momentum, the servers' SGD "
                             "through it; not supported by the parameter servers "
                             "(use momentum=0, or AdamW)" % (wd, momentum))
        return "SGD", {"lr": lr, "momentum": momentum, "weight_decay": wd,
                       "nesterov": bool(cfg.get("nesterov", False))}
    if kind in ("Adam", "AdamW"):
        if cfg.get("amsgrad", False):
            raise ValueError("%s(amsgrad=True) is not supported by the parameter "
                             "servers" % name)
        # Keras's weight decay is decoupled: AdamW's rule.
        return ("AdamW" if wd else "Adam",
                {"lr": lr, "beta1": float(cfg.get("beta_1", 0.9)),
                 "beta2": float(cfg.get("beta_2", 0.999)),
                 "eps": float(cfg.get("epsilon", 1e-7)), "weight_decay": wd})
    if wd:
        raise ValueError("RMSprop(weight_decay=%g): Keras decays the weights apart from "
                         "the update, the servers' RMSprop through the gradient; not "
                         "supported by the parameter servers" % wd)
    return "RMSprop", {"lr": lr, "alpha": float(cfg.get("rho", 0.9)),
                       "eps": float(cfg.get("epsilon", 1e-7)),
                       "momentum": float(cfg.get("momentum", 0.0)),
                       "centered": bool(cfg.get("centered", False))}


def _initial_lr(optimizer):
    """The optimizer's learning rate now (Keras 3 and tf_keras evaluate a
    schedule at the current step)."""
    return float(np.asarray(optimizer.learning_rate))


class _State:
    """The wrapper's own state, in a plain object: an optimizer's attributes
    are tracked by TensorFlow (lists and dicts wrapped, variables saved in
    its checkpoints), and the model's variables are not the optimizer's."""

    def __init__(self, options):
        self.options = options
        self.mode = options["mode"]
        self.client = _client.BufferClient()
        self.vars = None  # the variables the servers were started with
        self.index = None  # id(variable) -> its position in vars


class _PsMixin:
    """What both flavours' wrapped optimizers add (see the module doc)."""

    def _kolo_setup(self, options):
        self._kolo = _State(options)

    def _kolo_start(self, variables):
        """Collective over the workers: seeds the servers from worker 0 and
        loads the pulled parameters into ``variables``. Runs eagerly (lifted
        out of a tf.function) once."""
        if self._kolo.vars is not None:
            return
        global _current
        if _current is not None and _current is not self:
            raise ValueError("one ps.DistributedOptimizer per job: the parameter "
                             "servers are already serving another one")
        variables = list(variables)
        with tf.init_scope():
            for v in variables:
                if v.dtype != tf.float32 and getattr(v.dtype, "name", v.dtype) != "float32":
                    raise ValueError("the parameter servers take float32 variables; "
                                     "%s is %s" % (v.name, v.dtype))
            values = [np.asarray(v.numpy(), dtype=np.float32) for v in variables]
            pulled = self._kolo.client.start(self._kolo.options, values)
            for v, p in zip(variables, pulled):
                v.assign(p)
        self._kolo.vars = variables
        self._kolo.index = {id(v): i for i, v in enumerate(variables)}
        _current = self

    def _kolo_arrange(self, grads, variables):
        """The gradients in the started variables' order (zeros where a
        variable has none), dense."""
        out = [None] * len(self._kolo.vars)
        for g, v in zip(grads, variables):
            i = self._kolo.index.get(id(v))
            if i is None:
                raise ValueError("variable %s is not one the parameter servers were "
                                 "started with (the optimizer was built on %d variables)"
                                 % (v.name, len(self._kolo.vars)))
            if g is not None:
                out[i] = tf.cast(tf.convert_to_tensor(g), tf.float32)
        return [tf.zeros(v.shape, tf.float32) if g is None else g
                for g, v in zip(out, self._kolo.vars)]

    def _kolo_step(self, grads, lr, after=()):
        """One client step inside the graph; assigns the result. The
        variables are read once the ops ``after`` have run."""
        n = len(self._kolo.vars)
        with tf.control_dependencies(list(after)):
            values = [tf.identity(tf.convert_to_tensor(v)) for v in self._kolo.vars]
        client = self._kolo.client

        def step(lr_value, *arrays):
            return client.step(arrays[:n], arrays[n:], float(lr_value))

        outs = tf.numpy_function(step, [tf.cast(lr, tf.float32)] + values + list(grads),
                                 [tf.float32] * n, stateful=True, name="kolo_ps_step")
        return [v.assign(tf.reshape(o, v.shape)) for v, o in zip(self._kolo.vars, outs)]

    @staticmethod
    def _kolo_ops_of(fn):
        """(fn(), the graph ops fn made; none when eager). easgd reads the
        variables after the local update's ops: a tf.function orders the
        ops on one variable in program order, but tf_keras's update reaches
        the variables through the distribution strategy's update and a
        compiled function, which that ordering missed (the exchange's
        assignment was then overwritten by the update, and lost)."""
        if tf.executing_eagerly():
            return fn(), []
        graph = tf.compat.v1.get_default_graph()
        before = len(graph.get_operations())
        out = fn()
        return out, graph.get_operations()[before:]

    # ---- the public extras, as kolo.torch.ps's optimizer has them ----------

    def pull(self):
        """Loads the servers' parameters (easgd: the center) into the model."""
        for v, p in zip(self._kolo.vars or [], self._kolo.client.pull()):
            v.assign(p)

    def staleness(self):
        """The largest staleness of the last push's applied updates."""
        return _native.ps_staleness()


class _Keras3Ps(_PsMixin):
    """Keras 3: build() starts the servers; apply() pushes or exchanges."""

    def build(self, variables):
        super().build(variables)
        self._kolo_start(variables)

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        trainable_variables = list(trainable_variables)
        if not self.built:
            self.build(trainable_variables)
            self.built = True
        if self._kolo.vars is None:  # built before the wrapping
            self._kolo_start(trainable_variables)
        if self._kolo.mode == "easgd":
            lr = self.learning_rate
            _, local = self._kolo_ops_of(lambda: super(_Keras3Ps, self).apply(
                grads, trainable_variables))
            self._kolo_step([], lr, after=local)
            return
        grads = list(grads)
        scale = self.loss_scale_factor
        if scale is not None:
            grads = [g if g is None else g / scale for g in grads]
        if hasattr(self, "_kolo_lars"):  # kolo.keras.lr.LARS inside
            grads = self._kolo_lars(grads, trainable_variables)
        pairs = [(g, v) for g, v in zip(grads, trainable_variables) if g is not None]
        clipped = self._clip_gradients([g for g, _ in pairs]) if pairs else []
        grads = self._kolo_arrange(clipped, [v for _, v in pairs])
        self._kolo_step(grads, self.learning_rate)
        self.iterations.assign_add(1)


class _TfKerasPs(_PsMixin):
    """tf_keras (Keras 2): build() starts the servers; apply_gradients()
    pushes or exchanges."""

    def build(self, var_list):
        super().build(var_list)
        self._kolo_start(var_list)

    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False,
                        **kwargs):
        grads_and_vars = list(grads_and_vars)
        if self._kolo.mode == "easgd":
            it, local = self._kolo_ops_of(lambda: super(_TfKerasPs, self).apply_gradients(
                grads_and_vars, name=name, skip_gradients_aggregation=True, **kwargs))
            self._kolo_step([], self.learning_rate, after=local)
            return it
        self._compute_current_learning_rate()
        variables = [v for _, v in grads_and_vars]
        with tf.init_scope():
            self.build(variables)
        if hasattr(self, "_kolo_lars"):  # kolo.keras.lr.LARS inside
            grads_and_vars = list(zip(self._kolo_lars([g for g, _ in grads_and_vars],
                                                      variables), variables))
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        clipped = list(self._clip_gradients([g for g, _ in pairs])) if pairs else []
        grads = self._kolo_arrange(clipped, [v for _, v in pairs])
        self._kolo_step(grads, self.learning_rate)
        return self.iterations.assign_add(1)


def DistributedOptimizer(optimizer, variables=None, mode="sync", staleness_bound=0,
                         push_period=1, pull_period=1, easgd_alpha=0.5, easgd_period=1,
                         backup_workers=0, group_size=None):
    """A Keras optimizer of the wrapped one's class that trains on the
    parameter servers (the module's documentation). The arguments after
    ``variables`` are kolo.torch.ps.DistributedOptimizer's. ``variables``:
    the model's trainable variables (or (name, variable) pairs) to start the
    servers at once (collective over the workers); by default they start
    when the optimizer is built. Bad arguments raise ValueError naming the
    value and what is supported."""
    flavor = _keras_flavor.of_optimizer(optimizer, "kolo.keras.ps.DistributedOptimizer")
    _client.check_mode(mode)
    if group_size is not None:
        raise ValueError("group_size=%r: groups of workers are kolo.torch.ps's only "
                         "(kolo.keras.ps pushes from every worker)" % (group_size,))
    kind, hyper = _hyper(optimizer, mode)
    options = _client.options(kind, hyper, mode, staleness_bound, push_period,
                              pull_period, easgd_alpha, easgd_period, backup_workers)
    _client.require_servers("kolo.keras.ps")
    options["validators"] = _native.ps_validators()
    base = type(optimizer)
    mixin = _Keras3Ps if flavor == "keras3" else _TfKerasPs
    cls = type(base.__name__, (mixin, base), {})
    wrapped = cls.from_config(optimizer.get_config())
    wrapped._kolo_setup(options)
    if variables is not None:
        variables = [v[1] if isinstance(v, tuple) else v for v in variables]
        wrapped.build(variables)
        if flavor == "keras3":
            wrapped.built = True
    return wrapped


def _optimizer(what):
    if _current is None:
        raise ValueError("ps.%s needs a started ps.DistributedOptimizer first" % what)
    return _current


def stats():
    """Per server: version, updates, rejected pushes, the largest applied
    staleness, and per-worker push and pull counts."""
    _optimizer("stats")
    return _client.stats()


is_validator = _client.is_validator


def finish():
    """This worker is done with the servers (the goodbye shutdown would
    send, sent now)."""
    _optimizer("finish")
    _client.finish()


def should_stop():
    """True once a worker has asked the servers to stop the training."""
    _optimizer("should_stop")
    return _client.stop_requested()

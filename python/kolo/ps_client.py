"""The framework-neutral part of kolo's parameter-server clients
(docs/parameter_server.md): what kolo.torch.ps and kolo.keras.ps share.

- ``options(kind, hyper, mode, ...)`` checks a job's mode and counts and
  builds the configuration ``kolo._native.ps_start`` sends the servers;
  each framework maps its own optimizer to ``kind`` (SGD, Adam, AdamW,
  RMSprop: the servers' update rules, PyTorch's) and ``hyper`` (the rule's
  hyper-parameters under PyTorch's names).
- ``require_servers(who)``: a clear error when the job has no servers.
- ``BufferClient``: the native client over float32 NumPy buffers that it
  owns, for frameworks whose tensors cannot lend the client their memory
  (TensorFlow: a variable's buffer is not a stable address). Each step
  copies the model's values into the buffers, lets the client push, pull or
  exchange in place, and hands back the new values.
- ``stats()``, ``is_validator()``, ``finish()``, ``should_stop()``: the
  job-wide calls, the same for every framework.

The client itself is native (src/ps/client.h, bound in kolo._native):
one per process, made by ``ps_start``.
"""

import numpy as np

from kolo import _native

MODES = ("sync", "downpour", "easgd")
KINDS = ("SGD", "Adam", "AdamW", "RMSprop")

# The servers' hyper-parameters (PyTorch's names and defaults).
_HYPER_DEFAULTS = {
    "lr": None, "weight_decay": 0.0, "momentum": 0.0, "dampening": 0.0,
    "nesterov": False, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "alpha": 0.99,
    "centered": False,
}


def check_mode(mode):
    """ValueError naming the supported modes when ``mode`` is not one."""
    if mode not in MODES:
        raise ValueError("unknown parameter-server mode %r (supported: %s)"
                         % (mode, ", ".join(MODES)))


def options(kind, hyper, mode, staleness_bound=0, push_period=1, pull_period=1,
            easgd_alpha=0.5, easgd_period=1, backup_workers=0):
    """The configuration dict for ``_native.ps_start``. ``kind`` is one of
    KINDS; ``hyper`` maps PyTorch's hyper-parameter names (lr, weight_decay,
    momentum, dampening, nesterov, beta1, beta2, eps, alpha, centered) to
    values, the missing ones taking PyTorch's defaults; ``lr`` is required.
    Bad counts raise ValueError naming the argument and its value."""
    check_mode(mode)
    if kind not in KINDS:
        raise ValueError("optimizer kind %r is not a parameter-server update rule "
                         "(supported: %s)" % (kind, ", ".join(KINDS)))
    unknown = sorted(set(hyper) - set(_HYPER_DEFAULTS))
    if unknown:
        raise ValueError("unknown hyper-parameter(s) %s (known: %s)"
                         % (", ".join(unknown), ", ".join(sorted(_HYPER_DEFAULTS))))
    h = dict(_HYPER_DEFAULTS)
    h.update(hyper)
    if h["lr"] is None:
        raise ValueError("the parameter servers need a learning rate (hyper['lr'])")
    for name, value in (("staleness_bound", staleness_bound), ("push_period", push_period),
                        ("pull_period", pull_period), ("easgd_period", easgd_period),
                        ("backup_workers", backup_workers)):
        if isinstance(value, bool) or int(value) != value or value < 0:
            raise ValueError("%s=%r (expected an integer >= 0)" % (name, value))
    return {
        "mode": mode, "optimizer": kind, "lr": float(h["lr"]),
        "weight_decay": float(h["weight_decay"]), "momentum": float(h["momentum"]),
        "dampening": float(h["dampening"]), "nesterov": int(bool(h["nesterov"])),
        "beta1": float(h["beta1"]), "beta2": float(h["beta2"]), "eps": float(h["eps"]),
        "alpha": float(h["alpha"]), "centered": int(bool(h["centered"])),
        "staleness_bound": int(staleness_bound), "backup_workers": int(backup_workers),
        "easgd_alpha": float(easgd_alpha), "push_period": int(push_period),
        "pull_period": int(pull_period), "easgd_period": int(easgd_period),
    }


def require_servers(who):
    """ValueError when the job was started without parameter servers."""
    if _native.ps_servers() == 0:
        raise ValueError("%s needs parameter servers: start the job with "
                         "kolorun --servers S (or KOLO_SERVERS=S)" % who)


class BufferClient:
    """The native client over float32 buffers of its own (see the module's
    documentation). ``start(options, values)`` is collective over the
    workers: worker 0's values seed the servers and every worker pulls, and
    it returns the pulled values. ``step(values, grads, lr)``: sync and
    downpour push ``grads`` (and pull as the mode says), easgd exchanges
    ``values`` with the center every easgd_period steps (``grads`` is then
    ignored and may be None); returns the parameters after the step, new
    arrays of the buffers' shapes."""

    def __init__(self):
        self._buffers = None
        self._grads = None
        self.options = None

    @property
    def started(self):
        return self._buffers is not None

    def start(self, options, values):
        if self._buffers is not None:
            raise ValueError("this parameter-server client has already started")
        buffers = []
        for i, v in enumerate(values):
            a = np.asarray(v)
            if a.dtype != np.float32:
                raise ValueError("the parameter servers take float32 parameters; "
                                 "parameter %d is %s" % (i, a.dtype))
            buffers.append(np.array(a, dtype=np.float32, order="C", copy=True))
        self._grads = [np.zeros_like(b) for b in buffers]
        _native.ps_start(dict(options), [b.ctypes.data for b in buffers],
                         [b.size for b in buffers])
        self._buffers = buffers
        self.options = dict(options)
        return [b.copy() for b in buffers]

    def _load(self, values):
        if len(values) != len(self._buffers):
            raise ValueError("the parameter servers were started with %d tensors, got "
                             "%d" % (len(self._buffers), len(values)))
        for i, (b, v) in enumerate(zip(self._buffers, values)):
            v = np.asarray(v)
            if v.size != b.size:
                raise ValueError("parameter %d has %d elements, the servers hold %d"
                                 % (i, v.size, b.size))
            np.copyto(b, v.reshape(b.shape), casting="same_kind")

    def step(self, values, grads, lr):
        self._check_started("step")
        self._load(values)
        if self.options["mode"] == "easgd":
            grad_addresses = [b.ctypes.data for b in self._buffers]  # unused
        else:
            if len(grads) != len(self._grads):
                raise ValueError("%d gradients for %d parameters"
                                 % (len(grads), len(self._grads)))
            for i, (b, g) in enumerate(zip(self._grads, grads)):
                g = np.asarray(g)
                if g.size != b.size:
                    raise ValueError("gradient %d has %d elements, its parameter %d"
                                     % (i, g.size, b.size))
                np.copyto(b, g.reshape(b.shape), casting="same_kind")
            grad_addresses = [b.ctypes.data for b in self._grads]
        _native.ps_step([b.ctypes.data for b in self._buffers], grad_addresses, float(lr))
        return [b.copy() for b in self._buffers]

    def pull(self):
        """The servers' parameters (easgd: the center), as new arrays."""
        self._check_started("pull")
        _native.ps_pull([b.ctypes.data for b in self._buffers])
        return [b.copy() for b in self._buffers]

    def _check_started(self, what):
        if self._buffers is None:
            raise ValueError("%s before the parameter servers started (they start when "
                             "the optimizer is built on the model's variables)" % what)


def stats():
    """Per server: version, updates, rejected pushes, the largest applied
    staleness, and per-worker push and pull counts."""
    values = _native.ps_stats()
    servers = _native.ps_servers()
    per = len(values) // servers
    workers = (per - 4) // 2
    out = []
    for s in range(servers):
        v = values[s * per:(s + 1) * per]
        out.append({"version": v[0], "updates": v[1], "rejected": v[2],
                    "max_staleness": v[3], "pushes": list(v[4:4 + workers]),
                    "pulls": list(v[4 + workers:])})
    return out


def staleness():
    """The largest staleness of this worker's last push's applied updates."""
    return _native.ps_staleness()


def is_validator():
    """True on the workers that validate instead of training: the last V
    workers of a job started with kolorun --validators V (KOLO_VALIDATORS)."""
    v = _native.ps_validators()
    return v > 0 and _native.rank() >= _native.size() - v


def finish():
    """This worker is done with the servers (the goodbye shutdown would
    send, sent now)."""
    _native.ps_finish()


def stop_requested():
    """True once a worker has asked the servers to stop the training."""
    return _native.ps_stop_requested()

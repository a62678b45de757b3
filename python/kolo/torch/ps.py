"""kolo.torch.ps: parameter servers for PyTorch (docs/parameter_server.md).

Start the job with servers (``kolorun --servers S -np N``); on the server
ranks ``hvd.init()`` serves and exits, so the rest of the script runs on the
workers only::

    opt = ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05,
                                                  momentum=0.9),
                                  named_parameters=model.named_parameters(),
                                  mode="downpour", staleness_bound=4)
    for x, y in loader:
        opt.zero_grad(); loss(model(x), y).backward(); opt.step()

sync and downpour: the servers apply the wrapped optimizer's rule (SGD,
Adam, AdamW, RMSprop) with its hyper-parameters and the learning rate of
each step; easgd: the wrapped optimizer steps on the worker and every
``easgd_period`` steps the worker and the center exchange the elastic
difference. The servers are seeded from worker 0's parameters; every worker
pulls them before its first step. Parameters must be float32 CPU tensors.
"""

import torch

import kolo
from kolo import _native
from kolo import ps_client as _client
from kolo.torch import functions as _functions
from kolo.torch import ps_groups as _groups
from kolo.torch import ps_validator as _validator

# The job's one parameter-server optimizer (kolo_ps_start makes one per job).
_current = None

_OPTIMIZERS = {
    torch.optim.SGD: "SGD",
    torch.optim.Adam: "Adam",
    torch.optim.AdamW: "AdamW",
    torch.optim.RMSprop: "RMSprop",
}


def _options(optimizer, mode, staleness_bound, push_period, pull_period, easgd_alpha,
             easgd_period, backup_workers):
    _client.check_mode(mode)
    kind = _OPTIMIZERS.get(type(optimizer))
    if kind is None:
        raise ValueError("optimizer %s is not supported by the parameter servers "
                         "(supported: SGD, Adam, AdamW, RMSprop)" % type(optimizer).__name__)
    if len(optimizer.param_groups) != 1:
        raise ValueError("the parameter servers take one parameter group, got %d"
                         % len(optimizer.param_groups))
    g = optimizer.param_groups[0]
    if g.get("amsgrad", False):
        raise ValueError("Adam(amsgrad=True) is not supported by the parameter servers")
    betas = g.get("betas", (0.9, 0.999))
    hyper = {"lr": g["lr"], "beta1": betas[0], "beta2": betas[1]}
    for name in ("weight_decay", "momentum", "dampening", "nesterov", "eps", "alpha",
                 "centered"):
        if name in g:
            hyper[name] = g[name]
    return _client.options(kind, hyper, mode, staleness_bound, push_period, pull_period,
                           easgd_alpha, easgd_period, backup_workers)


class _PsOptimizer:
    """Wraps a torch optimizer; step() runs the parameter-server mode."""

    def __init__(self, optimizer, named_parameters, options, group=None):
        self._opt = optimizer
        self._mode = options["mode"]
        self._group = group
        self._validators = []
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = [p for _, p in named_parameters]
            if {id(p) for p in named} != {id(p) for p in params}:
                raise ValueError("named_parameters and the optimizer's parameters differ")
        for p in params:
            if p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous():
                raise ValueError("the parameter servers take contiguous float32 CPU "
                                 "parameters, got %s on %s" % (p.dtype, p.device))
        self._params = params
        with torch.no_grad():
            _native.ps_start(options, self._addresses(),
                             [p.numel() for p in params])
            if group is not None:
                group.start(params)
        global _current
        _current = self

    def _addresses(self):
        return [p.data_ptr() for p in self._params]

    def __getattr__(self, name):
        return getattr(self._opt, name)

    def zero_grad(self, set_to_none=False):
        self._opt.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """sync / downpour: pushes the gradients and pulls as the mode says;
        easgd: the wrapped optimizer steps, then the elastic exchange."""
        loss = closure() if closure is not None else None
        lr = float(self._opt.param_groups[0]["lr"])
        if self._group is not None:
            self._group_step(lr)
        else:
            self._plain_step(lr)
        for v in self._validators:
            v.after_step()
        return loss

    def _plain_step(self, lr):
        if self._mode == "easgd":
            self._opt.step()
            grads = self._addresses()  # unused by easgd
        else:
            grad_tensors = []
            for p in self._params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                grad_tensors.append(p.grad.contiguous())
            self._grads = grad_tensors  # alive during the call
            grads = [g.data_ptr() for g in grad_tensors]
        with torch.no_grad():
            _native.ps_step(self._addresses(), grads, lr)

    def _group_step(self, lr):
        """With group_size (ps_groups.py): the group's collectives, and the
        leader's traffic with the servers."""
        with torch.no_grad():
            if self._mode == "easgd":
                self._opt.step()
                self._group.step_easgd(self._params)
                return
            grads = []
            for p in self._params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                if not p.grad.is_contiguous():
                    p.grad = p.grad.contiguous()
                grads.append(p.grad)
            self._group.step_push(self._params, grads, lr)

    def pull(self):
        """Loads the servers' parameters (easgd: the center) into the model."""
        with torch.no_grad():
            _native.ps_pull(self._addresses())

    def staleness(self):
        """The largest staleness of the last push's applied updates (with
        groups: the leader's last push)."""
        if self._group is not None:
            return self._group.staleness
        return _native.ps_staleness()


def DistributedOptimizer(optimizer, named_parameters=None, mode="sync", staleness_bound=0,
                         push_period=1, pull_period=1, easgd_alpha=0.5, easgd_period=1,
                         backup_workers=0, group_size=None):
    """See the module's documentation; bad arguments raise ValueError naming
    the value and what is supported. group_size: None (no groups), an
    integer G (groups of G consecutive workers, G dividing the workers) or
    "host" (one host's workers); see ps_groups.py. Collective over the
    workers when group_size is given (the groups' process sets are made)."""
    options = _options(optimizer, mode, staleness_bound, push_period, pull_period,
                       easgd_alpha, easgd_period, backup_workers)
    _client.require_servers("kolo.torch.ps")
    options["validators"] = _native.ps_validators()
    group = None
    if group_size is not None:
        group = _groups.Group(group_size, options)
        options["pushers"] = len(group.groups)
    return _PsOptimizer(optimizer, named_parameters, options, group)


stats = _client.stats


def _on_worker0(what, fn):
    """Runs fn on worker 0 while the other workers wait (a broadcast before
    and after); an error there is raised on every worker, with its text."""
    _functions.broadcast_object(None, root_rank=0, name="ps.%s.begin" % what)
    error = None
    if _native.rank() == 0:
        try:
            fn()
        except kolo.KoloError as e:
            error = (type(e).__name__, str(e))
    error = _functions.broadcast_object(error, root_rank=0, name="ps.%s.end" % what)
    if error is not None:
        kind = getattr(kolo, error[0], kolo.KoloError)
        raise kind(error[1] if _native.rank() == 0
                   else "ps.%s failed on worker 0: %s" % (what, error[1]))


def _optimizer(what):
    if _current is None:
        raise ValueError("ps.%s needs a ps.DistributedOptimizer first" % what)
    return _current


def _no_validator_ranks(what):
    v = _native.ps_validators()
    if v > 0:
        raise ValueError("ps.%s is collective over every worker and the %d validator "
                         "rank(s) (kolorun --validators) do not take part: not supported "
                         "with validator ranks" % (what, v))


def save(path):
    """Checkpoints the servers' parameters, optimizer state and version into
    directory `path` (docs/parameter_server.md, "Checkpoints"). Every worker
    calls it, between steps; worker 0 asks the servers while the others
    wait. The servers write their shard files (temporary file, then rename),
    worker 0 the manifest, renamed last: an interrupted save leaves the
    previous checkpoint whole."""
    _optimizer("save")
    _no_validator_ranks("save")
    _on_worker0("save", lambda: _native.ps_save(str(path)))


def load(path):
    """Loads a checkpoint written by save(): every worker calls it, between
    steps. The manifest must fit this job (mode, optimizer, servers, tensor
    sizes; an error names every difference); a missing or torn shard file is
    an error naming it, and the servers are then left as they were. Every
    worker ends with the loaded parameters in its model."""
    opt = _optimizer("load")
    _no_validator_ranks("load")
    with torch.no_grad():
        _on_worker0("load", lambda: _native.ps_load(str(path), opt._addresses()))
        opt.pull()


def Validator(fn, every_s, model=None, target=None, higher_is_better=True, patience=None,
              min_delta=0.0):
    """Evaluates a snapshot of the parameters in a background thread of this
    worker every ``every_s`` seconds, without stopping the training; records
    (seconds, version, metric) in ``.history``; with ``target`` or
    ``patience`` it stops the training of every worker (ps.should_stop()).
    ``fn(model_copy)`` when ``model`` is given, else ``fn(list of tensors)``,
    returns the metric. See ps_validator.py.

    On a validator rank (kolorun --validators V; is_validator()) it does not
    return until every trainer has called ps.finish(): it pulls and
    evaluates every ``every_s`` seconds in this thread, the last time on
    the final parameters, and returns the Validator with its history."""
    opt = _optimizer("Validator")
    v = _validator.Validator(fn, every_s, opt, model=model, target=target,
                             higher_is_better=higher_is_better, patience=patience,
                             min_delta=min_delta)
    if is_validator():
        v.serve()
        return v
    opt._validators.append(v)
    return v


is_validator = _client.is_validator


def finish():
    """This worker is done with the servers (the goodbye hvd.shutdown would
    send, sent now). With validator ranks, every trainer calls it at the
    end of training, before hvd.shutdown: the validators end their loop
    when all trainers have (hvd.shutdown waits for every worker, validators
    included)."""
    _optimizer("finish")
    _native.ps_finish()


def should_stop():
    """True once a Validator (on any worker) has stopped the training; every
    worker sees it at its next step (sync: all after the same step)."""
    opt = _optimizer("should_stop")
    if opt._group is not None and opt._group.stop:
        return True
    return _native.ps_stop_requested()

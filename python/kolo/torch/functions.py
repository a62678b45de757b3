"""Model-level helpers: broadcasting parameters, optimizer state and Python
objects, gathering objects, and averaging metrics across ranks."""

import io
import pickle

import torch

from kolo import _native
from kolo.torch import collectives as C
from kolo.torch import differentiable as D
from kolo.torch import errors
from kolo.torch.process_sets import global_process_set


def _named_tensors(params, what):
    """Horovod accepts a state_dict (dict), or a list of (name, tensor) pairs
    or of tensors; also any iterable such as model.named_parameters()."""
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda kv: str(kv[0]))
    else:
        try:
            items = list(params)
        except TypeError:
            raise errors.invalid_argument(
                "%s: invalid params of type %s" % (what, type(params).__name__))
        items = [p if isinstance(p, tuple) else (None, p) for p in items]
    for name, p in items:
        if p is not None and not isinstance(p, torch.Tensor):
            raise errors.invalid_argument(
                "%s: '%s' is a %s, not a tensor" % (what, name, type(p).__name__))
    return items


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites, in place, every tensor of ``params`` with root_rank's.

    ``params``: ``model.state_dict()``, ``model.named_parameters()`` or a list
    of tensors. Every rank must pass the same names in any order (a dict is
    sorted by name); unnamed tensors are matched by position.
    """
    items = _named_tensors(params, "broadcast_parameters")
    handles = []
    try:
        for i, (name, p) in enumerate(items):
            if p is None:
                continue
            op_name = "broadcast_parameters.%s" % (name if name is not None else i)
            handles.append(C.broadcast_async_(p, root_rank, name=op_name,
                                              process_set=process_set))
    except Exception:
        _drain(handles)
        raise
    first = _drain(handles)
    if first is not None:
        raise first


def _drain(handles):
    """Synchronizes every handle; returns the first error (or None)."""
    first = None
    for h in handles:
        try:
            C.synchronize(h)
        except Exception as e:  # wait for all before raising
            if first is None:
                first = e
    return first


def _unpickled(data):
    """The object torch.save wrote into ``data`` (bytes from the ranks of
    this job, as Horovod's objects are): any picklable object, so not
    torch.load's weights-only mode (its default since torch 2.6)."""
    return torch.load(io.BytesIO(data), weights_only=False)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's ``obj`` (root_rank is a global rank, as in
    Horovod) on every rank of the set (pickled; tensors included). ``name``
    defaults to the type name of the object, as in Horovod."""
    name = name if name is not None else type(obj).__name__
    base = "broadcast_object.%s" % name
    is_root = _native.rank() == root_rank
    if is_root:
        buf = io.BytesIO()
        torch.save(obj, buf, pickle_protocol=pickle.HIGHEST_PROTOCOL)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload = None
        size = torch.zeros(1, dtype=torch.int64)
    D.broadcast_(size, root_rank, name=base + ".size", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    D.broadcast_(payload, root_rank, name=base + ".data", process_set=process_set)
    if is_root:
        return obj
    return _unpickled(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's ``obj``, in rank order."""
    name = name if name is not None else type(obj).__name__
    base = "allgather_object.%s" % name
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    data = buf.getvalue()
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
        torch.empty(0, dtype=torch.uint8)
    size = torch.tensor([payload.numel()], dtype=torch.int64)
    h_sizes = C.allgather_async(size, name=base + ".size", process_set=process_set)
    h_data = C.allgather_async(payload, name=base + ".data", process_set=process_set)
    sizes = C.synchronize(h_sizes).tolist()
    gathered = C.synchronize(h_data).numpy().tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(_unpickled(gathered[offset:offset + n]))
        offset += n
    return out


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state (per-parameter buffers such as
    momentum, and the hyperparameters of each param group) equal to
    root_rank's.

    As in Horovod, an optimizer without state yet (a fresh one) first takes
    one step of the wrapped optimizer with zero gradients (parameters that
    require a gradient and have none get a zero ``grad``; sparse for
    SparseAdam), so that its state exists on every rank. The root's
    ``state_dict()`` is then broadcast as an object (entries that are None or
    not tensors included) and loaded on the other ranks. ``root_rank`` is a
    global rank.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise errors.invalid_argument(
            "broadcast_optimizer_state: LBFGS is not supported")
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer)
    state = optimizer.state_dict() if _native.rank() == root_rank else None
    state = broadcast_object(state, root_rank,
                             name="broadcast_optimizer_state",
                             process_set=process_set)
    if _native.rank() != root_rank:
        mine = optimizer.state_dict()["param_groups"]
        theirs = state["param_groups"]
        if [len(g["params"]) for g in mine] != [len(g["params"]) for g in theirs]:
            raise errors.mismatch(
                "broadcast_optimizer_state: rank %d has parameter groups of "
                "sizes %s, root rank %d has %s" %
                (process_set.rank(), [len(g["params"]) for g in mine],
                 root_rank, [len(g["params"]) for g in theirs]))
        optimizer.load_state_dict(state)


def _initialize_state(optimizer):
    """One step of the wrapped optimizer (never the distributed step, which
    would reduce gradients) with zero gradients, to create its state. As in
    Horovod every gradient is a zero tensor afterwards (a gradient left by an
    interrupted step must not move the parameters, differently on each rank);
    beyond Horovod the parameters are put back as they were, so weight decay
    does not move them either."""
    params = [p for group in optimizer.param_groups for p in group["params"]
              if p.requires_grad]
    saved = [(p, p.detach().clone()) for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.SparseAdam):
            p.grad = p.grad.to_sparse()
    step = getattr(optimizer, "_kolo_local_step", optimizer.step)
    step()
    with torch.no_grad():
        for p, data in saved:
            p.copy_(data)


def metric_average(value, name=None, process_set=global_process_set):
    """The average over ranks of a Python number or 0-d tensor, as a float
    (for printing global loss and accuracy)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().double().cpu()
    else:
        value = torch.tensor(float(value), dtype=torch.float64)
    out = D.allreduce(value, name=name if name is None else "metric." + name,
                      op=C.Average, process_set=process_set)
    return float(out.item()) if out.numel() == 1 else out

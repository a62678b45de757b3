"""Checkpoints of sharded training: ``save(path, model, opt)``,
``load(path, model, opt)`` and ``consolidate(path)``.

``path`` is a directory holding:

- ``shard-<rank>-of-<N>.<tag>.pt``, one per rank: for each piece the rank
  owns (layout.py), the parameter's name, the element range
  ``[begin, end)`` of the flattened parameter, those elements of the
  parameter and of each elementwise state entry (Adam's moments, momentum),
  and the scalar entries (``step``);
- ``index.pt``: format and version, world size, stage, the optimizer's
  class, every trainable parameter's name, shape and dtype, the param
  groups (hyperparameters and parameter names, in the wrapped optimizer's
  original order), the shard file names with the ranges each holds, and
  the model's other entries (buffers, frozen parameters) from the first
  rank.

Writing is atomic: the shards get a fresh tag, each is written to a
temporary file, flushed and renamed; then the first rank replaces
``index.pt`` the same way and removes the shards of the previous save. A
reader sees the old index and its shards or the new ones.

``load`` works on any world size: each rank reads the shards overlapping
its pieces (on the saved world size, only its own) and copies the
overlapping ranges, so a checkpoint re-shards when the number of ranks
changes. A checkpoint of another model (a name or shape that differs) is
refused on every rank, naming the parameter. ``consolidate`` needs no job:
it writes one ordinary model ``state_dict`` (and the optimizer's, in the
form the unwrapped optimizer loads) that plain PyTorch reads.
"""

import glob
import os
import uuid

import torch

from kolo.torch import errors
from kolo.torch.checkpoint import _write_atomically
from kolo.torch.functions import allgather_object, broadcast_object
from kolo.torch.zero import wrap as zwrap
from kolo.torch.zero.state import split_entry

FORMAT = "kolo-zero-checkpoint"
VERSION = 1
INDEX = "index.pt"


def _agree(error, process_set, what):
    """Raises the first rank's error (if any rank had one) on every rank."""
    everyone = allgather_object(error, name="zero.checkpoint." + what,
                                process_set=process_set)
    for e in everyone:
        if e is not None:
            raise errors.invalid_argument(e)


def _extras(model, opt):
    """The model's state_dict entries that are not trainable parameters of
    the optimizer (buffers, frozen parameters)."""
    mine = {id(p) for p in opt._zero_params}
    entries = model.state_dict(keep_vars=True)
    keys = [k for k, v in entries.items() if id(v) not in mine]
    wrapped = any(getattr(entries[k], "_kolo_zero_unit", None) is not None for k in keys)
    return keys, wrapped


def save(path, model, opt):
    """Writes the checkpoint of ``model`` and its zero ``opt`` into the
    directory ``path``. Collective (every rank of the optimizer's set)."""
    opt.wait_params()
    ps = opt.process_set
    size, rank = ps.size(), ps.rank()
    records = []
    for _, pc, t in opt._pieces:
        elementwise, scalars = split_entry(t, opt.state.get(t, {}))
        records.append({"name": opt._names[pc.param], "begin": pc.begin, "end": pc.end,
                        "param": t.detach().clone(),
                        "state": {k: v.detach().clone() for k, v in elementwise.items()},
                        "scalars": scalars})
    tag = broadcast_object(uuid.uuid4().hex[:12] if rank == 0 else None,
                           root_rank=ps.ranks[0], name="zero.checkpoint.tag", process_set=ps)
    fname = "shard-%05d-of-%05d.%s.pt" % (rank, size, tag)
    error = None
    try:
        os.makedirs(path, exist_ok=True)
        _write_atomically({"format": FORMAT, "version": VERSION, "rank": rank,
                           "pieces": records}, os.path.join(path, fname))
    except OSError as e:
        error = "kolo.torch.zero.save: cannot write '%s': %s" % (os.path.join(path, fname), e)
    _agree(error, ps, "save.shards")
    ranges = allgather_object([(r["name"], r["begin"], r["end"]) for r in records],
                              name="zero.checkpoint.ranges", process_set=ps)
    keys, wrapped = _extras(model, opt)
    with zwrap.full_parameters(model) if wrapped else _nothing():
        entries = model.state_dict()
        extras = {k: entries[k].clone() for k in keys}
    if rank == 0:
        groups = []
        for g, names in zip(opt.param_groups, opt._group_names):
            groups.append(dict({k: v for k, v in g.items() if k != "params"}, params=names))
        index = {"format": FORMAT, "version": VERSION, "world_size": size, "stage": opt.stage,
                 "optimizer": type(opt).__name__,
                 "params": [(opt._names[p], list(_shape(p)), str(p.dtype))
                            for p in opt._zero_params],
                 "groups": groups,
                 "shards": ["shard-%05d-of-%05d.%s.pt" % (r, size, tag) for r in range(size)],
                 "ranges": ranges, "extras": extras}
        try:
            _write_atomically(index, os.path.join(path, INDEX))
            keep = set(index["shards"])
            for old in glob.glob(os.path.join(path, "shard-*.pt")):
                if os.path.basename(old) not in keep:
                    os.unlink(old)
        except OSError as e:
            error = "kolo.torch.zero.save: cannot write '%s': %s" % (
                os.path.join(path, INDEX), e)
    _agree(error, ps, "save.index")
    return path


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _shape(p):
    from kolo.torch.zero.optimizer import full_shape
    return full_shape(p)


def _read_index(path):
    target = os.path.join(path, INDEX)
    index = torch.load(target, map_location="cpu")
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError("'%s' is not a kolo.torch.zero checkpoint index" % target)
    if index.get("version") != VERSION:
        raise ValueError("'%s' has format version %r; this kolo reads %d"
                         % (target, index.get("version"), VERSION))
    return index


def _compare(index, opt, path):
    """None, or why the checkpoint does not fit this model."""
    saved = {n: (s, d) for n, s, d in index["params"]}
    for p in opt._zero_params:
        name = opt._names[p]
        here = (list(_shape(p)), str(p.dtype))
        if name not in saved:
            return ("checkpoint '%s' is from another model: parameter '%s' is not in it"
                    % (path, name))
        if saved[name] != here:
            return ("checkpoint '%s' is from another model: parameter '%s' is %s %s there "
                    "and %s %s here" % (path, name, saved[name][1], saved[name][0],
                                        here[1], here[0]))
    extra = sorted(set(saved) - {opt._names[p] for p in opt._zero_params})
    if extra:
        return ("checkpoint '%s' is from another model: it has parameters %s that this "
                "model lacks" % (path, ", ".join(extra[:8])))
    if len(index["groups"]) != len(opt.param_groups):
        return ("checkpoint '%s' has %d param groups, the optimizer %d" %
                (path, len(index["groups"]), len(opt.param_groups)))
    return None


def load(path, model, opt):
    """Restores ``model`` and its zero ``opt`` from the directory ``path``,
    re-sharding when the world size differs. Collective."""
    opt.wait_params()
    ps = opt.process_set
    index, error = None, None
    try:
        index = _read_index(path)
        error = _compare(index, opt, path)
    except (OSError, ValueError, RuntimeError, EOFError) as e:
        error = "kolo.torch.zero.load: cannot read '%s': %s" % (path, e)
    _agree(error, ps, "load.index")
    targets = {}
    for _, pc, t in opt._pieces:
        targets.setdefault(opt._names[pc.param], []).append((pc.begin, pc.end, t))
    copied = {id(t): 0 for _, _, t in opt._pieces}
    try:
        for fname, ranges in zip(index["shards"], index["ranges"]):
            if not any(name in targets and any(b < e2 and b2 < e for b2, e2, _ in targets[name])
                       for name, b, e in ranges):
                continue
            shard = torch.load(os.path.join(path, fname), map_location="cpu")
            for rec in shard["pieces"]:
                for b, e, t in targets.get(rec["name"], ()):
                    lo, hi = max(b, rec["begin"]), min(e, rec["end"])
                    if lo >= hi:
                        continue
                    src = slice(lo - rec["begin"], hi - rec["begin"])
                    dst = slice(lo - b, hi - b)
                    with torch.no_grad():
                        t[dst].copy_(rec["param"][src])
                    entry = opt.state[t]
                    for k, v in rec["state"].items():
                        if k not in entry:
                            entry[k] = torch.zeros(t.shape, dtype=v.dtype)
                        entry[k][dst].copy_(v[src])
                    for k, v in rec["scalars"].items():
                        entry[k] = v.clone() if isinstance(v, torch.Tensor) else v
                    copied[id(t)] += hi - lo
        short = [opt._names[pc.param] for _, pc, t in opt._pieces if copied[id(t)] != t.numel()]
        if short:
            error = "kolo.torch.zero.load: '%s' lacks elements of %s (a shard is missing)" % (
                path, ", ".join(short[:8]))
    except (OSError, ValueError, RuntimeError, EOFError, KeyError) as e:
        error = "kolo.torch.zero.load: cannot read a shard of '%s': %s" % (path, e)
    _agree(error, ps, "load.shards")
    for g, saved in zip(opt.param_groups, index["groups"]):
        g.update({k: v for k, v in saved.items() if k != "params"})
    keys, wrapped = _extras(model, opt)
    if keys:
        with zwrap.full_parameters(model, write_back=True) if wrapped else _nothing():
            model.load_state_dict({k: index["extras"][k] for k in keys if k in index["extras"]},
                                  strict=False)
    if opt.stage < 3:
        opt._allgather_params()
    return path


def consolidate(path, output=None):
    """Writes the checkpoint in ``path`` as one ordinary model state_dict to
    ``output`` (default ``<path>/consolidated.pt``) and the optimizer's
    state_dict, as the unwrapped optimizer saves it, beside it
    (``consolidated.optimizer.pt``). Needs no job. Returns both dicts."""
    index = _read_index(path)
    full, state = {}, {}
    for name, shape, dtype in index["params"]:
        full[name] = torch.zeros(shape, dtype=getattr(torch, dtype.replace("torch.", "")))
        state[name] = {}
    seen = {name: 0 for name in full}
    for fname in index["shards"]:
        shard = torch.load(os.path.join(path, fname), map_location="cpu")
        for rec in shard["pieces"]:
            name, b, e = rec["name"], rec["begin"], rec["end"]
            full[name].view(-1)[b:e].copy_(rec["param"])
            seen[name] += e - b
            for k, v in rec["state"].items():
                if k not in state[name]:
                    state[name][k] = torch.zeros(full[name].shape, dtype=v.dtype)
                state[name][k].view(-1)[b:e].copy_(v)
            for k, v in rec["scalars"].items():
                state[name][k] = v
    short = [n for n in full if seen[n] != full[n].numel()]
    if short:
        raise ValueError("kolo.torch.zero.consolidate: '%s' lacks elements of %s" %
                         (path, ", ".join(short[:8])))
    model_sd = dict(index["extras"])
    model_sd.update(full)
    opt_sd = {"state": {}, "param_groups": []}
    i = 0
    for g in index["groups"]:
        ids = []
        for name in g["params"]:
            if state.get(name):
                opt_sd["state"][i] = state[name]
            ids.append(i)
            i += 1
        opt_sd["param_groups"].append(dict(g, params=ids))
    output = output or os.path.join(path, "consolidated.pt")
    stem = output[:-3] if output.endswith(".pt") else output
    _write_atomically(model_sd, output)
    _write_atomically(opt_sd, stem + ".optimizer.pt")
    return model_sd, opt_sd

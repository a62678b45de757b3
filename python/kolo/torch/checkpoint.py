"""Checkpoints of a training job: ``save(path, state)`` and ``load(path,
state)``, called by every rank.

What is written: the state's ``state_dict()`` (a TorchState: each model,
optimizer, ElasticSampler and learning-rate scheduler by its state_dict, and
the other attributes such as epoch and step as they are), the world size,
and every rank's random-number generators (torch, Python's ``random`` and
NumPy's), gathered to rank 0. Rank 0 writes it with ``torch.save`` to a
temporary file in the same directory, flushes it to disk, and renames it
over ``path``: a reader sees the old file or the new one, never a torn one.

``path`` may name attributes of the state as format fields, e.g.
``"ckpt/epoch{epoch:03d}.pt"``; with ``keep_last=K`` the older files of the
same pattern (the fields replaced by wildcards) beyond the K newest are
removed after the new one is in place. ``load`` of such a pattern reads the
newest existing file.

``load`` reads the file on rank 0, loads it into the state, commits it and
synchronizes every rank from rank 0 (so only rank 0 needs the file); each
rank then gets back its own generators' states when the world size is the
one saved (else rank r takes those of saved rank r mod the saved size).
Errors (an unwritable directory, a missing or damaged file, a state whose
entries differ from the file's) are raised on every rank with the same
message, naming the path. See docs/elastic.md.
"""

import glob
import os
import random
import re

import torch

import kolo
from kolo.torch import errors

FORMAT = "kolo-checkpoint"
VERSION = 1


def _hvd():
    import kolo.torch as hvd
    return hvd


def _rng_state():
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy
        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    return state


def _set_rng_state(state):
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "numpy" in state:
        import numpy
        numpy.random.set_state(state["numpy"])


def _fields(state):
    return {name: getattr(state, name) for name in getattr(state, "_saved_state", {})}


def _pattern_glob(path):
    return re.sub(r"\{[^{}]*\}", "*", path)


def _write_atomically(obj, path):
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prune(pattern, keep_last):
    files = sorted(glob.glob(_pattern_glob(pattern)), key=lambda f: (os.path.getmtime(f), f))
    for old in files[:-keep_last]:
        os.unlink(old)


def _agree(error, what):
    """Rank 0's outcome on every rank: raises the same error everywhere."""
    error = _hvd().broadcast_object(error, root_rank=0, name="kolo.checkpoint." + what)
    if error is not None:
        raise errors.invalid_argument(error)


def save(path, state, keep_last=None):
    """Writes a checkpoint of ``state`` (a TorchState) to ``path`` (see the
    module doc); every rank calls it. Returns the path written."""
    if keep_last is not None and (type(keep_last) is not int or keep_last < 1):
        raise errors.invalid_argument(
            "checkpoint.save: keep_last must be a positive int, got %r" % (keep_last,))
    hvd = _hvd()
    rngs = hvd.allgather_object(_rng_state(), name="kolo.checkpoint.rng")
    target, error = None, None
    if hvd.rank() == 0:
        try:
            target = path.format(**_fields(state))
            _write_atomically({"format": FORMAT, "version": VERSION,
                               "world_size": hvd.size(), "state": state.state_dict(),
                               "rng": rngs}, target)
            if keep_last is not None:
                _prune(path, keep_last)
        except (OSError, KeyError, ValueError, IndexError) as e:
            error = "checkpoint.save: cannot write '%s': %s" % (target or path, e)
    _agree(error, "save")
    return hvd.broadcast_object(target, root_rank=0, name="kolo.checkpoint.saved")


def _newest(path):
    if re.search(r"\{[^{}]*\}", path):
        files = glob.glob(_pattern_glob(path))
        if not files:
            raise FileNotFoundError("no file matches '%s'" % _pattern_glob(path))
        return max(files, key=lambda f: (os.path.getmtime(f), f))
    return path


def _read(path):
    target = _newest(path)
    # kolo's own format (tensors, NumPy and Python RNG states, plain
    # values): not loadable in torch's weights-only mode, the default of
    # torch.load since torch 2.6. Load checkpoints you trust, as with torch.
    data = torch.load(target, map_location="cpu", weights_only=False)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("'%s' is not a kolo checkpoint" % target)
    if data.get("version") != VERSION:
        raise ValueError("'%s' has format version %r; this kolo reads %d"
                         % (target, data.get("version"), VERSION))
    return target, data


def load(path, state):
    """Loads the checkpoint at ``path`` (or the newest matching it) into
    ``state`` on every rank (see the module doc). Returns the path read."""
    hvd = _hvd()
    target, rngs, error = None, None, None
    if hvd.rank() == 0:
        try:
            target, data = _read(path)
            state.load_state_dict(data["state"])
            rngs = data["rng"]
        except (OSError, KeyError, ValueError, RuntimeError, EOFError) as e:
            error = "checkpoint.load: cannot load '%s': %s" % (target or path, e)
    _agree(error, "load")
    state.save()
    state.sync()
    rngs = hvd.broadcast_object(rngs, root_rank=0, name="kolo.checkpoint.rng")
    _set_rng_state(rngs[hvd.rank() % len(rngs)])
    return hvd.broadcast_object(target, root_rank=0, name="kolo.checkpoint.loaded")


__all__ = ["save", "load"]

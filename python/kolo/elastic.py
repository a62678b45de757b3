"""Elastic training, the part every framework binding shares (kolo.torch.elastic,
kolo.tensorflow.elastic, kolo.keras.elastic build on it).

- ``run_fn(func, reset)``: the retry loop behind each binding's ``run``
  decorator. It calls ``func(state, ...)`` until it returns. Before each call
  the state is synchronized from rank 0 (unless the last interruption said it
  need not be). When a peer is lost (``is_peer_failure``) the state is rolled
  back to its last commit; when the hosts change (HostsUpdatedInterrupt) it
  is kept. Either way ``reset()`` re-forms the job (the binding's shutdown and
  init: a new generation), the state's reset hooks and callbacks run, and
  ``func`` is called again. Errors that say the program itself is wrong
  (InvalidArgumentError, MismatchError, ...) are not retried: they propagate.
- ``State`` and ``ObjectState``: what survives a reset. ``commit()`` saves
  and checks for host changes, ``restore()`` puts the last commit back,
  ``sync()`` makes every rank equal to rank 0. Plain Python values travel
  pickled through kolo's runtime (``broadcast_object``, on NumPy buffers), so
  the base classes need no framework; subclasses add models, optimizers and
  variables.
- Host updates: the elastic launcher's changes reach the state through
  ``notify_hosts_updated`` (or kolorun's counters, polled by rank 0);
  ``check_host_updates`` raises HostsUpdatedInterrupt on every rank at the
  same step.

See docs/elastic.md.
"""

import copy
import functools
import io
import pickle
import queue

import numpy as np

import kolo
from kolo import _native
from kolo.errors import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["run_fn", "State", "ObjectState", "broadcast_object",
           "is_peer_failure", "notify_hosts_updated",
           "HorovodInternalError", "HostsUpdatedInterrupt"]

# Host changes announced to this process (timestamp, removed-only flag), in
# arrival order. The elastic launcher's listener puts them here through
# notify_hosts_updated(); check_host_updates() drains them.
_host_updates = queue.Queue()


def notify_hosts_updated(timestamp, removed_only=False):
    """Announces that the job's hosts changed at ``timestamp`` (a number that
    grows with every change). The next ``commit()`` or
    ``check_host_updates()`` raises HostsUpdatedInterrupt on every rank."""
    _host_updates.put((timestamp, bool(removed_only)))


def _poll_launcher():
    """Turns the elastic launcher's host-update counters into a notification:
    kolorun counts every change its --host-discovery-script makes to the
    hosts; counters above the ones this world was formed with mean a change
    since. The counter is the timestamp (it only grows)."""
    generation, base_updates, base_additions = _native.elastic_world()
    if generation == 0:
        return  # not an elastic job
    updates, additions = _native.elastic_host_updates()
    if updates > base_updates:
        notify_hosts_updated(timestamp=updates, removed_only=additions == base_additions)


def broadcast_object(obj, root_rank=0, name="kolo.elastic.object"):
    """Returns root_rank's ``obj`` (pickled) on every rank of the job: two
    broadcasts through kolo's runtime, the size then the bytes."""
    import kolo.numpy as kn  # numpy is all it needs
    is_root = _native.rank() == root_rank
    payload = np.frombuffer(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL),
                            dtype=np.uint8) if is_root else None
    size = np.array([0 if payload is None else payload.size], dtype=np.int64)
    kn.broadcast_(size, root_rank, name=name + ".size")
    if payload is None:
        payload = np.empty(int(size[0]), dtype=np.uint8)
    else:
        payload = payload.copy()  # frombuffer is read-only
    if payload.size:
        kn.broadcast_(payload, root_rank, name=name + ".data")
    return obj if is_root else pickle.load(io.BytesIO(payload.tobytes()))


def is_peer_failure(err):
    """Whether ``err`` means "a peer failed" (roll back and re-form), not "this
    program is wrong". HorovodInternalError is kolo.KoloError itself, so a
    program raising it to simulate a failure is recognised by its exact
    class."""
    return isinstance(err, (kolo.PeerLostError, kolo.KoloTimeoutError)) or \
        type(err) is kolo.KoloError


def run_fn(func, reset):
    """Wraps the elastic training function ``func(state, ...)`` in the retry
    loop (module docstring); ``reset()`` shuts the binding down and
    initializes it again.

    The function must not start with a collective before it touches the
    state: new ranks sync the state first, so collectives belong inside the
    training loop, as in Horovod."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            except kolo.KoloError as e:
                if not is_peer_failure(e):
                    raise
                state.restore()
                skip_sync = False
            reset()
            state.on_reset()

    return wrapper


class State:
    """What survives a reset: subclasses say how to save, restore and sync."""

    def __init__(self):
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called, in order, after every reset (ranks lost, added
        or removed), before the state is synchronized."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state in host memory, then checks for host changes."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank, together, when rank 0
        has been told that the hosts changed since the last check."""
        if _native.rank() == 0:
            _poll_launcher()
        prev = last = self._last_updated_timestamp
        removed_only = True
        seen = False
        while True:
            try:
                timestamp, removed = _host_updates.get_nowait()
            except queue.Empty:
                break
            if timestamp > last:
                last = timestamp
                removed_only = removed_only and removed
                seen = True
        # Rank 0's view decides, so that every rank raises at the same step.
        prev, last, removed_only = broadcast_object(
            (prev, last, removed_only and seen), root_rank=0,
            name="kolo.elastic.host_updates")
        self._last_updated_timestamp = last
        if last > prev:
            raise HostsUpdatedInterrupt(removed_only)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before the callbacks and the sync."""


class ObjectState(State):
    """Plain Python values, given as keyword arguments and kept as
    attributes; ``sync()`` broadcasts rank 0's committed values."""

    def __init__(self, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__()

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = broadcast_object(
                self._saved_state, root_rank=0, name="kolo.elastic.objects")
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))

"""Process sets (Horovod's name for teams): collectives over a subset of ranks.

Shared by every framework binding (kolo.torch, kolo.tensorflow): a set
added through one is the set of the other.

A ProcessSet lists global ranks. ``add_process_set`` is called by every rank
with the same list (as in Horovod); the members create the set in the native
runtime (its own background thread and communicator), the other ranks only
record that they are not members. Operations on a set that does not include
the calling rank fail with a clear error instead of hanging.
"""

import threading

from kolo import _native

from kolo import errors

_lock = threading.Lock()
_registered = {}  # process_set_id -> ProcessSet (members only)


class ProcessSet:
    """A set of global ranks that run collectives among themselves.

    ``ProcessSet([0, 2])`` only describes the set; it becomes usable after
    ``add_process_set`` (or ``init(process_sets=[...])``) on every rank.
    ``process_set_id`` is None until then, and stays None on ranks that are
    not members.
    """

    def __init__(self, ranks):
        if isinstance(ranks, ProcessSet):
            ranks = ranks.ranks
        try:
            ranks = [int(r) for r in ranks]
        except TypeError:
            raise errors.invalid_argument(
                "ProcessSet takes a list of global ranks (mpi4py communicators "
                "are not supported), got %r" % (ranks,))
        if len(set(ranks)) != len(ranks):
            raise errors.invalid_argument(
                "ProcessSet ranks must be distinct, got %s" % ranks)
        self.ranks = sorted(ranks)
        self.process_set_id = None
        self._member = False

    def _native_id(self, what):
        """The id to pass to the native layer; raises when unusable here."""
        if self.process_set_id is None:
            if self._member or not self.ranks:
                raise errors.invalid_argument(
                    "%s: process set %s has not been added; call "
                    "add_process_set() on every rank first"
                    % (what, self.ranks))
            raise errors.invalid_argument(
                "%s: rank %d is not a member of process set %s"
                % (what, _native.rank(), self.ranks))
        return self.process_set_id

    def size(self):
        """Number of ranks in the set."""
        if self.process_set_id is None:
            return len(self.ranks)
        return _native.process_set_size(self.process_set_id)

    def rank(self):
        """This rank's index inside the set, or -1 if it is not a member."""
        if self.process_set_id is None:
            return -1
        return _native.process_set_rank(self.process_set_id)

    def included(self):
        """Whether the calling rank belongs to the set."""
        return self.rank() >= 0

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (
            self.process_set_id, self.ranks)


class _GlobalProcessSet(ProcessSet):
    """Every rank; id 0. Its ranks are known once kolo is initialised."""

    def __init__(self):
        self._member = True
        self.process_set_id = 0

    @property
    def ranks(self):
        return list(range(_native.size()))

    def size(self):
        return _native.size()

    def rank(self):
        return _native.rank()

    def __repr__(self):
        return "ProcessSet(process_set_id=0, global)"


global_process_set = _GlobalProcessSet()


def add_process_set(process_set):
    """Registers a process set. Collective: every rank calls it with the same
    ranks (non-members return at once). Returns the ProcessSet."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set is global_process_set or process_set.process_set_id is not None:
        raise errors.invalid_argument(
            "process set %s is already registered" % (process_set.ranks,))
    size = _native.size()
    bad = [r for r in process_set.ranks if r < 0 or r >= size]
    if bad or not process_set.ranks:
        raise errors.invalid_argument(
            "process set %s: ranks must be within [0, %d)" %
            (process_set.ranks, size))
    me = _native.rank()
    if me in process_set.ranks:
        set_id = _native.process_set_create(process_set.ranks)
        process_set.process_set_id = set_id
        process_set._member = True
        with _lock:
            _registered[set_id] = process_set
    return process_set


def remove_process_set(process_set):
    """Removes a process set added earlier. Collective over its members
    (non-members may call it too; it does nothing for them). Returns True if
    this rank removed it."""
    if process_set is global_process_set:
        raise errors.invalid_argument("the global process set cannot be removed")
    set_id = process_set.process_set_id
    if set_id is None:
        return False
    _native.process_set_destroy(set_id)
    with _lock:
        _registered.pop(set_id, None)
    process_set.process_set_id = None
    process_set._member = False
    return True


def _forget_all():
    """Called by shutdown(): native sets are gone with the runtime."""
    with _lock:
        for ps in _registered.values():
            ps.process_set_id = None
            ps._member = False
        _registered.clear()


def _native_id(process_set, what):
    if process_set is None:
        return 0
    if isinstance(process_set, int):  # a raw id, as some callers pass
        return process_set
    return process_set._native_id(what)


__all__ = ["ProcessSet", "add_process_set", "remove_process_set",
           "global_process_set"]

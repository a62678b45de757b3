"""The one front end of kolo's asynchronous operations: handles, names,
completion. kolo.torch and kolo.numpy both submit through it.

Names (Horovod's rule): an operation given no name is called
``<kind>.noname.<n>``, with one counter n for every unnamed operation of the
process, of any kind and process set (1, 2, ...). Ranks that issue the same
unnamed operations in the same order therefore generate the same names, as
in Horovod. Unlike Horovod's handle numbers, named operations do not advance
the counter, so named operations that only some ranks issue (on a process
set, or before a join) never shift the others' generated names; a rank that
issues an extra unnamed operation does, and the runtime then reports the
mismatch by name. A join of the global process set re-aligns the counters:
every rank continues from the largest count of any rank (a rank that joined
early skipped the unnamed operations the others issued meanwhile).

Handles: every submission returns a :class:`Handle` (kolo.torch's in-place
allreduce, in its common case, a ``kolo._native.TensorHandle``, the same
contract implemented in C: python/native/tensor_handles.cc). ``synchronize(h)``
waits, releases the native operation and returns the result (calling it
again returns the same result, or raises the same error); ``poll(h)`` says
whether it has finished. A handle keeps the buffers the runtime reads or
writes alive until the operation ends. A handle dropped while its operation
is pending hands those buffers to an orphan list, reaped at later
submissions, so dropping a handle never frees memory the runtime still
uses. Handles from before ``shutdown()`` are refused after it (the native
handle numbers start again after a new ``init()``).

Thread-safety: submission, poll and synchronize may be called from any
thread (autograd hooks call them from the backward pass); one handle must be
synchronized by one thread at a time.
"""

import itertools
import threading

from kolo import _native

_wait_release = _native.wait_release
_numbers = itertools.count(1)  # next() is atomic under the GIL
_last_unnamed = 0  # the last number given out (an approximation across threads)
_numbers_lock = threading.Lock()  # catch_up_unnamed() against itself
_generation = 0  # bumped by forget_all() (shutdown)

# Handles dropped while pending: (native ids, buffers) until they finish.
_orphans = []
_orphans_lock = threading.Lock()


def op_name(kind, name):
    """``name`` checked, or Horovod's generated ``<kind>.noname.<n>``."""
    if name is None:
        global _last_unnamed
        n = _last_unnamed = next(_numbers)
        return "%s.noname.%d" % (kind, n)
    if type(name) is not str or not name:
        raise _native.InvalidArgumentError(
            "%s: name must be a non-empty string, got %r" % (kind, name))
    return name


def unnamed_count():
    """How many unnamed operations this process has issued."""
    return _last_unnamed


def catch_up_unnamed(count):
    """After a join: continue generated names from ``count`` (the most any
    rank of the job has issued), so that ranks which skipped unnamed
    operations while others ran them generate the same names again."""
    global _numbers, _last_unnamed
    with _numbers_lock:
        if count > _last_unnamed:
            _last_unnamed = count
            _numbers = itertools.count(count + 1)


def _as_tuple(ids):
    return (ids,) if type(ids) is int else ids


def _release_quietly(ids):
    for i in ids:
        try:
            _native.release(i)
        except Exception:  # noqa: BLE001 - kolo shut down: nothing to free
            pass


def reap_orphans():
    """Releases orphaned operations that have finished (and their buffers)."""
    with _orphans_lock:
        keep = []
        for ids, buffers in _orphans:
            try:
                if not all(_native.poll(i) for i in ids):
                    keep.append((ids, buffers))
                    continue
            except Exception:  # noqa: BLE001 - kolo shut down: nothing pending
                continue
            _release_quietly(ids)
        _orphans[:] = keep


class Handle:
    """One submitted operation (one native operation, or several that finish
    together, such as a grouped allreduce). Pass it to synchronize() or
    poll(); ``name`` is the operation's (base) name."""

    # _state: 0 pending, 1 finished (_result is the result), 2 failed
    # (_result is the error). _result is unset while pending.
    __slots__ = ("name", "_ids", "_keep", "_finish", "_generation", "_state",
                 "_result")

    def __init__(self, ids, name, keep, finish):
        """``ids``: the native handles (a tuple), or one native handle (an
        int) whose result is ``keep`` (finish None); ``keep``: what must stay
        alive until they finish; ``finish(keep, ids)``: builds the result
        after a successful wait (the native handles are still valid while
        it runs), or None when the result is ``keep`` itself."""
        self.name = name
        self._ids = ids
        self._keep = keep
        self._finish = finish
        self._generation = _generation
        self._state = 0

    def poll(self):
        """True once every native operation has finished (well or not)."""
        if self._state:
            return True
        if self._generation != _generation:
            self._raise_stale()
        for i in _as_tuple(self._ids):
            if not _native.poll(i):
                return False
        return True

    def wait(self):
        """Waits, builds the result, releases the native operations; returns
        the result or raises the operation's error (the first, for several)."""
        if not self._state:
            if self._generation != _generation:
                self._raise_stale()
            self._complete()
        if self._state == 2:
            raise self._result
        return self._result

    def _complete(self):
        ids = self._ids
        if type(ids) is int:
            # The hot path (an in-place allreduce): the result is the kept
            # tensor, so the native handle can go in the same call.
            try:
                _wait_release(ids)
                self._result = self._keep
                self._state = 1
            except Exception as e:  # noqa: BLE001 - the handle fails with it
                self._result = e
                self._state = 2
            self._keep = None
            return
        error = None
        for i in ids:
            try:
                _native.wait(i)
            except Exception as e:  # wait for all, keep the first
                if error is None:
                    error = e
        if error is None:
            finish = self._finish
            try:
                self._result = self._keep if finish is None else finish(self._keep, ids)
                self._state = 1
            except Exception as e:  # noqa: BLE001 - the handle fails with it
                error = e
        if error is not None:
            self._result = error
            self._state = 2
        _release_quietly(ids)
        self._keep = self._finish = None

    def _raise_stale(self):
        raise _native.InvalidArgumentError(
            "handle of '%s' was created before kolo was shut down; its "
            "operation no longer exists" % self.name)

    def __del__(self):
        if self._state or self._generation != _generation:
            return
        ids = _as_tuple(self._ids)
        try:
            if all(_native.poll(i) for i in ids):
                _release_quietly(ids)
                return
        except Exception:  # noqa: BLE001 - kolo shut down
            return
        with _orphans_lock:
            _orphans.append((ids, self._keep))

    def __repr__(self):
        return "<kolo handle '%s'%s>" % (self.name, " done" if self._state else "")


def submitted(ids, name, keep, finish):
    """A Handle for native operations just submitted (reaps orphans first)."""
    if _orphans:
        reap_orphans()
    return Handle(ids, name, keep, finish)


def synchronize(handle):
    """Waits for ``handle`` and returns its result (raises its error)."""
    if type(handle) is not Handle:
        raise _native.InvalidArgumentError(
            "synchronize: expected a handle returned by an *_async call, got %r"
            % (handle,))
    ids = handle._ids
    if type(ids) is not int or handle._state or handle._generation != _generation:
        return handle.wait()
    # The hot path (a pending in-place allreduce), Handle.wait and
    # Handle._complete inlined: two Python calls fewer per operation.
    try:
        _wait_release(ids)
    except Exception as e:  # noqa: BLE001 - the handle fails with it
        handle._result = e
        handle._state = 2
        handle._keep = None
        raise
    result = handle._result = handle._keep
    handle._state = 1
    handle._keep = None
    return result


# The same, in C (kolo._native, python/native/tensor_handles.cc): a
# TensorHandle (kolo.torch's in-place allreduce) is waited there, any other
# handle by the function above.
_native.setup_handles(synchronize)
_synchronize_py = synchronize
synchronize = _native.synchronize
_TensorHandle = _native.TensorHandle


def poll(handle):
    """True once ``handle``'s operation has finished; synchronize() then
    returns at once."""
    if type(handle) is not Handle and type(handle) is not _TensorHandle:
        raise _native.InvalidArgumentError(
            "poll: expected a handle returned by an *_async call, got %r" % (handle,))
    return handle.poll()


def forget_all():
    """Called at shutdown: the native operations are gone with the runtime;
    handles created before are refused from now on."""
    global _generation
    _generation += 1
    _native.forget_handles()
    with _orphans_lock:
        _orphans.clear()

"""The placement planner: which saved tensors leave the device, given a
byte budget, and in which order they come back. Device-neutral: it sees
only entries (a save index and a size) and tells a *mover* what to do, so
the same decisions run on a GPU (copies to pinned host memory) and on the
CPU (copies into a separate pool, kolo.torch.lms.movers.CpuMover).

Contract
- ``save(nbytes, movable, payload)`` is called once per new saved storage
  in forward order and returns its Entry (``entry.index`` counts up from
  0). ``use(entry)`` is called before backward reads the entry;
  ``release(entry)`` once nothing needs it any more.
- The budget: ``meter(nbytes, new)`` says how many device bytes would be
  in use with ``nbytes`` more (``new``: bytes not yet allocated, i.e. a
  copy back; False: the saved tensor already exists). On the CPU this is
  the planner's own ``resident`` count (bytes of entries on the device),
  on a GPU ``torch.cuda.memory_allocated() (+ nbytes if new)``.
- Mover calls (made while the caller holds its lock): ``offload(e)``
  (device -> host; the device bytes may be freed once issued),
  ``prefetch(e)`` (host -> device, asynchronous), ``fetch(e)`` (host ->
  device, needed now), ``ready(e)`` (a prefetched entry is about to be
  read: wait for its copy), ``forget(e)`` (an offloaded entry was
  released: drop its host copy).
- Not thread-safe: the caller serializes (activations.py holds a lock).

The algorithm
- Forward (``save``): if the budget would be exceeded by the new entry,
  resident movable entries are offloaded oldest first (lowest index: the
  backward pass reads saved tensors in reverse order, so the oldest is
  needed last) until the overshoot is covered; if that is not enough and
  the new entry is movable, it goes to the host at once. Entries that are
  not movable (small ones, parameters are not even seen) stay and count;
  a budget they alone exceed is recorded in ``stats["over_budget"]``.
- Backward (``use``): an offloaded entry that was not prefetched is
  fetched now (a miss; room is made as in forward). Then the window is
  refilled: the offloaded entries below the one in use are prefetched in
  decreasing index order (the reverse of the save order) while fewer than
  ``prefetch`` prefetched entries wait to be read and the next one fits the
  budget. The first that does not fit stops the refill (the order is never
  skipped), the next ``use`` tries again.
"""

import bisect
import math

RESIDENT = "resident"      # on the device
OFFLOADED = "offloaded"    # on the host only
PREFETCHED = "prefetched"  # copied back ahead of use, not yet read
RELEASED = "released"


class Entry:
    """One saved storage: ``index`` (save order), ``nbytes``, ``movable``,
    ``state``, ``used`` (read by backward at least once) and the caller's
    ``payload``."""

    __slots__ = ("index", "nbytes", "movable", "state", "used", "payload")

    def __init__(self, index, nbytes, movable, payload):
        self.index, self.nbytes, self.movable = index, nbytes, movable
        self.state, self.used, self.payload = None, False, payload  # placed by save

    def __repr__(self):
        return "Entry(%d, %d B, %s)" % (self.index, self.nbytes, self.state)


class Planner:
    """See the module docstring. ``limit`` in bytes (math.inf: never
    offload), ``prefetch`` the window (>= 0), ``mover`` the copies,
    ``meter`` the device usage (None: the planner's own resident count)."""

    def __init__(self, limit, prefetch, mover, meter=None):
        self.limit = math.inf if limit is None else limit
        self.prefetch = prefetch
        self.mover = mover
        self.meter = meter or (lambda nbytes, new: self.resident + nbytes)
        self.resident = 0         # bytes of RESIDENT and PREFETCHED entries
        self._next = 0
        self._on_device = {}      # index -> entry (RESIDENT or PREFETCHED)
        self._offloaded = []      # sorted indices of OFFLOADED entries
        self._by_index = {}       # index -> entry, every live entry
        self._waiting = 0         # PREFETCHED entries not yet read
        self.stats = {"saved": 0, "saved_bytes": 0, "offloaded": 0,
                      "offloaded_bytes": 0, "prefetched": 0, "fetched": 0,
                      "peak_resident": 0, "peak_waiting": 0, "over_budget": 0}
        self.offload_log = []     # indices in the order they were offloaded
        self.return_log = []      # (index, "prefetch"|"fetch") in order

    # --- forward ------------------------------------------------------------

    def save(self, nbytes, movable, payload=None):
        e = Entry(self._next, int(nbytes), bool(movable), payload)
        self._next += 1
        self._by_index[e.index] = e
        self.stats["saved"] += 1
        self.stats["saved_bytes"] += e.nbytes
        over = self.meter(e.nbytes, False) - self.limit
        if over > 0:
            over -= self._make_room(over, exclude=e)
        if over > 0 and e.movable:
            self._offload(e)
        else:
            self._place(e, RESIDENT)
            if over > 0:
                self.stats["over_budget"] += 1
        return e

    # --- backward -----------------------------------------------------------

    def use(self, e):
        """``e`` is about to be read: make it resident, refill the window."""
        if e.state == OFFLOADED:
            over = self.meter(e.nbytes, True) - self.limit
            if over > 0:
                over -= self._make_room(over, exclude=e)
                if over > 0:
                    self.stats["over_budget"] += 1
            self._unlist_offloaded(e)
            self.mover.fetch(e)
            self.return_log.append((e.index, "fetch"))
            self.stats["fetched"] += 1
            self._place(e, RESIDENT)
        elif e.state == PREFETCHED:
            self.mover.ready(e)
            self._waiting -= 1
            e.state = RESIDENT
        e.used = True
        self._refill(e.index)

    def _refill(self, below):
        """Prefetch offloaded entries under index ``below``, highest first."""
        i = bisect.bisect_left(self._offloaded, below)
        while i > 0 and self._waiting < self.prefetch:
            cand = self._by_index[self._offloaded[i - 1]]
            if self.meter(cand.nbytes, True) > self.limit:
                return
            i -= 1
            del self._offloaded[i]
            self.mover.prefetch(cand)
            self.return_log.append((cand.index, "prefetch"))
            self.stats["prefetched"] += 1
            self._waiting += 1
            self._place(cand, PREFETCHED)
            self.stats["peak_waiting"] = max(self.stats["peak_waiting"], self._waiting)

    def release(self, e):
        """Nothing will read ``e`` again (its saved tensors were freed)."""
        if e.state in (RESIDENT, PREFETCHED):
            self.resident -= e.nbytes
            self._on_device.pop(e.index, None)
            if e.state == PREFETCHED:
                self._waiting -= 1
        elif e.state == OFFLOADED:
            self._unlist_offloaded(e)
            self.mover.forget(e)
        e.state = RELEASED
        self._by_index.pop(e.index, None)

    # --- helpers ------------------------------------------------------------

    def _place(self, e, state):
        e.state = state
        self._on_device[e.index] = e
        self.resident += e.nbytes
        self.stats["peak_resident"] = max(self.stats["peak_resident"], self.resident)

    def _offload(self, e):
        if e.state in (RESIDENT, PREFETCHED):
            self._on_device.pop(e.index, None)
            self.resident -= e.nbytes
        self.mover.offload(e)
        e.state = OFFLOADED
        bisect.insort(self._offloaded, e.index)
        self.offload_log.append(e.index)
        self.stats["offloaded"] += 1
        self.stats["offloaded_bytes"] += e.nbytes

    def _unlist_offloaded(self, e):
        i = bisect.bisect_left(self._offloaded, e.index)
        if i < len(self._offloaded) and self._offloaded[i] == e.index:
            del self._offloaded[i]

    def _make_room(self, need, exclude):
        """Offloads resident movable entries, oldest first, until ``need``
        bytes are freed (entries already read by backward and prefetched
        ones are left: they are about to be used). Returns bytes freed."""
        freed = 0
        for idx in sorted(self._on_device):
            if freed >= need:
                break
            e = self._on_device[idx]
            if e is exclude or not e.movable or e.used or e.state != RESIDENT:
                continue
            self._offload(e)
            freed += e.nbytes
        return freed

"""Messages between ranks over kolo process sets, for kolo.hpo.

Two primitives, both pickled Python objects carried by kolo's own
collectives (kolo.numpy, so no framework is needed):

- ``broadcast_object(obj, root, process_set, name)``: the root's object on
  every member of the set (a team sharing its trial's suggestions).
- ``process_set(ranks)``: the job's one process set of those ranks.
- ``Link``: the owner of the study (rank 0) and one other rank, as a
  two-rank process set. Each ``exchange(outgoing)`` is one allgather of the
  two sides' pickled lists: both sides call it, each gets the other's list.
  The owner and the rank call it at a steady tick whether or not they have
  something to say, so no operation waits long on an idle peer (a request
  could otherwise wait a whole trial for the owner's answer, and kolo's
  stall check would report it), and a peer that dies surfaces at the next
  tick as kolo.PeerLostError naming it.

The allgather concatenates the two payloads in set-rank order (owner
first, since the owner is rank 0); each side knows its own length, so the
other's bytes are what is left.
"""

import pickle

import numpy as np

import kolo.numpy as kn


def _encode(obj):
    return np.frombuffer(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL), dtype=np.uint8).copy()


_sets = {}  # sorted global ranks -> ProcessSet, made once per job


def process_set(ranks):
    """The kolo process set of ``ranks``, made on first use and then shared
    by every Study and PBT of the job (a set is a background thread and a
    communicator on each member). Collective over the members: every rank
    asks for the same sets in the same order (non-members return at once)."""
    import kolo
    from kolo.process_sets import add_process_set
    key = tuple(sorted(ranks))
    known = _sets.get(key)
    if known is None or (known.process_set_id is None and kolo.rank() in key):
        _sets[key] = add_process_set(list(key))  # new, or gone with a shutdown
    return _sets[key]


def broadcast_object(obj, is_root, process_set, name):
    """The object of the set's first rank (set rank 0, where ``is_root``)
    on every rank of ``process_set``: two broadcasts, the size then the
    bytes."""
    root = 0  # kolo.numpy's roots are ranks within the set
    payload = _encode(obj) if is_root else None
    size = np.array([0 if payload is None else payload.size], dtype=np.int64)
    kn.broadcast_(size, root, name=name + ".size", process_set=process_set)
    if payload is None:
        payload = np.empty(int(size[0]), dtype=np.uint8)
    kn.broadcast_(payload, root, name=name + ".data", process_set=process_set)
    return obj if is_root else pickle.loads(payload.tobytes())


def allgather_object(obj, process_set, name):
    """Every member's ``obj``, in set-rank order: the sizes, then the bytes."""
    mine = _encode(obj)
    sizes = kn.allgather(np.array([mine.size], dtype=np.int64), name=name + ".size",
                         process_set=process_set)
    data = kn.allgather(mine, name=name + ".data", process_set=process_set)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out


class Link:
    """The owner's end or the other rank's end of a two-rank process set.

    ``peer``: the global rank at the other end. ``owner_side``: whether this
    end is the owner (rank 0). Not thread-safe: one thread drives a link.
    """

    def __init__(self, process_set, peer, owner_side):
        self.process_set = process_set
        self.peer = peer
        self.owner_side = owner_side
        self._name = "kolo.hpo.link.%d" % (peer if owner_side else kolo_rank())

    def start(self, outgoing):
        """Submits one exchange carrying ``outgoing`` (a list); returns what
        ``finish`` takes."""
        mine = _encode(outgoing)
        handle = kn.allgather_async(mine, name=self._name, process_set=self.process_set)
        return handle, mine.size

    def done(self, started):
        """Whether the exchange has finished (``finish`` then returns at once)."""
        return kn.poll(started[0])

    def finish(self, started):
        """Waits for the exchange; returns the peer's list. Raises
        kolo.PeerLostError (or another kolo.KoloError) when the peer is gone."""
        handle, mine = started
        data = kn.synchronize(handle)
        theirs = data[mine:] if self.owner_side else data[:data.size - mine]
        return pickle.loads(theirs.tobytes())

    def exchange(self, outgoing):
        return self.finish(self.start(outgoing))


def kolo_rank():  # late import: kolo.hpo loads before kolo is initialised
    import kolo
    return kolo.rank()

"""Elastic training with a sharded optimizer: the committed state survives
the loss of ranks and is re-sharded when the world changes
(kolo.torch.elastic.TorchState uses this for a kolo.torch.zero
DistributedOptimizer; see docs/zero.md, "Elastic training").

``Snapshot.take(opt)`` then ``keep()`` (at every commit; collective):
  - this rank's block of every bucket (layout.py): the parameters' elements
    (at stage 3 the unit's shard, the only copy of those parameters) and
    each elementwise state entry (momentum, Adam's moments), packed into
    one byte buffer whose layout is the same on every rank (the entries of
    each bucket are agreed by an allgather);
  - a copy of the buffer of the next rank in the ring (rank r keeps the
    block of r + 1 mod N), by one alltoall in which each rank sends its
    buffer to the previous rank only; so the committed state survives the
    loss of any set of ranks of which no two are neighbours in the ring;
  - every parameter's scalar entries (Adam's ``step``) and the names of its
    elementwise entries, from every rank (the same allgather).
  Memory: two blocks per rank, ``2 (1 + K) Ψ / N`` elements with K
  elementwise entries (Adam: K = 2), against the ``(1 + K) Ψ`` that a full
  copy of the state would take.

``Snapshot.restore(opt)`` (local): the own block back into the pieces, on
the world of the commit.

``Snapshot.reshard(opt)`` (collective over the new world):
  1. every rank tells its rank and world size at the commit and the
     commit's number, the optimizer's id and a digest of its stage and
     parameters (an allgather; the old ranks' must agree, the digests
     everywhere). A rank that joined the job (``joining()``: its optimizer
     was built in an elastic generation after the first) has no commit;
     the first old rank then sends the commit's layout and scalar entries
     (one more allgather in which only it contributes) and the joiner
     takes the old ranks' id;
  2. each old rank's block is held by a survivor: its own, or the copy on
     its ring predecessor; the first survivor holding it (in new rank
     order) provides it (a joiner provides nothing). A block nobody holds
     (two neighbours lost) is an error naming the old ranks;
  3. the optimizer takes its shares of the new world (layout.Bucket.place);
  4. bucket by bucket, each rank contributes the blocks it provides (one
     allgather of bytes, so at most one bucket's state is in flight); every
     rank reassembles each entry's old flat vector and copies its new
     range into fresh state tensors, and the parameters into the model
     (stages 1 and 2: whole, as every rank keeps whole parameters; stage 3:
     the unit's new shard);
  5. the scalar entries are set; then a new snapshot of the new world is
     taken.
"""

import hashlib

import torch

from kolo import _native
from kolo.torch import collectives as C
from kolo.torch import errors
from kolo.torch.functions import allgather_object
from kolo.torch.zero.state import split_entry

PARAM = "\0param"  # the entry of the parameters themselves (not a state key)
_ALIGN = 8


def _dtype(name):
    return getattr(torch, name.replace("torch.", ""))


def joining(process_set):
    """Whether a zero optimizer built now on ``process_set`` is built by a
    worker joining a running elastic job: the global process set in an
    elastic world of generation > 1 (a worker of the first world built its
    optimizers there; one that starts later finds a later generation, while
    the others train and build nothing, so it must not start collectives
    of its own)."""
    from kolo.torch.process_sets import global_process_set
    return process_set is global_process_set and _native.elastic_world()[0] > 1


def _digest(opt):
    """What every rank's optimizer must agree on (stage, names, shapes,
    dtypes), hashed."""
    return hashlib.sha256(repr(opt._agreement).encode()).hexdigest()[:16]


class Snapshot:
    """One commit of a zero optimizer's state (module docstring)."""

    def __init__(self):
        self.commit = 0
        self.pending = None

    # --- commit -------------------------------------------------------------

    def take(self, opt):
        """Packs this rank's blocks, exchanges the ring copies and every
        parameter's scalar entries into a pending commit; ``keep()`` makes
        it the commit. Collective: a failure here (a rank lost) leaves the
        last commit whole, which is why TorchState takes every zero
        snapshot before it saves anything else. Until ``keep()`` both
        commits are in memory (four blocks per rank)."""
        new = Snapshot()
        new._pack(opt)
        new.commit = self.commit + 1
        self.pending = new

    def keep(self):
        """The pending commit becomes the commit (local)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self.__dict__.update(pending.__dict__)

    def _pack(self, opt):
        opt.wait_params()
        ps = opt.process_set
        mine_keys, mine_names = {}, {}
        for b, pc, t in opt._pieces:
            elementwise, scalars = split_entry(t, opt.state.get(t, {}))
            mine_keys.setdefault(b.index, {}).update(
                {k: str(v.dtype) for k, v in elementwise.items()})
            entry = mine_names.setdefault(opt._names[pc.param], ({}, set()))
            entry[0].update({k: (v.clone() if isinstance(v, torch.Tensor) else v)
                             for k, v in scalars.items()})
            entry[1].update(elementwise)
        everyone = allgather_object((mine_keys, mine_names), name="zero.elastic.keys",
                                    process_set=ps)
        keys, self.scalars, self.elementwise = {}, {}, {}
        for ks, names in everyone:
            for i, d in ks.items():
                keys.setdefault(i, {}).update(d)
            for name, (scalars, elementwise) in names.items():
                for k, v in scalars.items():
                    self.scalars.setdefault(name, {}).setdefault(k, v)
                self.elementwise.setdefault(name, set()).update(elementwise)
        # Layout: bucket-major; per bucket the parameters, then the sorted
        # state keys; each entry b.shard elements at an aligned byte offset.
        self.layout, self.spans, at = [], [], 0
        for b in opt._buckets:
            start = at
            entries = [(PARAM, b.dtype)] + [(k, _dtype(d)) for k, d in
                                            sorted(keys.get(b.index, {}).items())]
            for key, dtype in entries:
                nbytes = b.shard * torch.empty(0, dtype=dtype).element_size()
                self.layout.append((b.index, key, dtype, at, b.shard))
                at += -(-nbytes // _ALIGN) * _ALIGN
            self.spans.append((start, at))
        self.size, self.rank = ps.size(), ps.rank()
        self.own = torch.zeros(at, dtype=torch.uint8)
        pieces = opt._pieces_of
        for index, key, dtype, off, n in self.layout:
            b = opt._buckets[index]
            dst = self._view(self.own, off, dtype, n)
            if key == PARAM:
                if getattr(b, "unit", None) is not None:
                    dst.copy_(b.unit.shard_buf)
                else:
                    for pc in b.pieces:
                        at = pc.bucket_begin - b.begin
                        dst[at:at + pc.numel].copy_(pc.param.data.view(-1)[pc.begin:pc.end])
                continue
            for _, pc, t in pieces[index]:
                value = opt.state.get(t, {}).get(key)
                if value is not None:
                    at = pc.bucket_begin - b.begin
                    dst[at:at + pc.numel].copy_(value)
        self.next = self._ring_copy(ps)

    def _ring_copy(self, ps):
        """The buffer of the next rank in the ring (rank r sends its own to
        r - 1)."""
        if self.size == 1:
            return None
        splits = [0] * self.size
        splits[(self.rank - 1) % self.size] = self.own.numel()
        out = C.synchronize(C.alltoall_async(self.own, splits=splits,
                                             name="zero.elastic.ring", process_set=ps))
        received = out[0] if isinstance(out, (tuple, list)) else out
        if received.numel() != self.own.numel():
            raise errors.mismatch(
                "kolo.torch.zero elastic commit: rank %d received %d bytes from rank %d, "
                "expected %d (the optimizers differ across ranks)" %
                (self.rank, received.numel(), (self.rank + 1) % self.size, self.own.numel()))
        return received

    @staticmethod
    def _view(buf, off, dtype, n):
        size = torch.empty(0, dtype=dtype).element_size()
        return buf[off:off + n * size].view(dtype)

    # --- restore on the same world ------------------------------------------

    def restore(self, opt):
        """The committed own block back into the pieces (the world of the
        commit; local)."""
        if opt._gathers is not None:
            opt._gathers.drop()  # the commit's parameters replace what was in flight
        opt.state.clear()
        for b in opt._buckets:
            self._fill_bucket(opt, b, lambda key: self._block(self.own, b.index, key),
                              whole=False)

    def _block(self, buf, index, key):
        for i, k, dtype, off, n in self.layout:
            if i == index and k == key:
                return self._view(buf, off, dtype, n)
        raise KeyError(key)

    def _fill_bucket(self, opt, b, entry_of, whole):
        """Sets bucket ``b``'s parameters and its pieces' state from
        ``entry_of(key)``: the entry's elements of the bucket's flat vector,
        all of them (``whole``) or this rank's block only."""
        base = 0 if whole else b.begin
        flat = entry_of(PARAM)
        with torch.no_grad():
            if getattr(b, "unit", None) is not None:
                b.unit.shard_buf.zero_()
                b.unit.shard_buf[:b.owned].copy_(flat[b.begin - base:b.end - base])
            elif whole:
                for p, off, n in zip(b.params, b.offsets, b.numels):
                    p.data.view(-1).copy_(flat[off:off + n])
            else:
                for pc in b.pieces:
                    at = pc.bucket_begin - base
                    pc.param.data.view(-1)[pc.begin:pc.end].copy_(flat[at:at + pc.numel])
        for _, pc, t in opt._pieces_of[b.index]:
            name = opt._names[pc.param]
            entry = opt.state[t]
            at = pc.bucket_begin - base
            for k in sorted(self.elementwise.get(name, ())):
                entry[k] = entry_of(k)[at:at + pc.numel].clone()
            for k, v in self.scalars.get(name, {}).items():
                entry[k] = v.clone() if isinstance(v, torch.Tensor) else v

    # --- re-shard on a new world --------------------------------------------

    def reshard(self, opt):
        """Re-forms ``opt`` for the process set's current world from the
        commit (module docstring). Collective over the new world. Returns
        whether anything changed (False: the same world, no rollback)."""
        ps = opt.process_set
        me = ps.rank()
        held = getattr(self, "size", None) is not None
        who = allgather_object(
            (self.commit, self.size, self.rank, opt._id, _digest(opt)) if held else
            (None, None, None, opt._id, _digest(opt)),
            name="zero.elastic.who", process_set=ps)
        ranks = ps.ranks
        old = [r for r, w in enumerate(who) if w[1] is not None]
        if not old:
            raise errors.invalid_argument(
                "kolo.torch.zero elastic re-shard: no rank of %s holds a commit of the "
                "zero optimizer's state (every rank joined after the job started)" % ranks)
        first = who[old[0]]
        for r, w in enumerate(who):
            if w[4] != first[4]:
                raise errors.mismatch(
                    "kolo.torch.zero elastic re-shard: rank %d's optimizer differs from rank "
                    "%d's (stage, parameter names, shapes or dtypes; digests %s and %s)" %
                    (ranks[r], ranks[old[0]], w[4], first[4]))
        if any(who[r][:2] != first[:2] or who[r][3] != first[3] for r in old):
            raise errors.mismatch(
                "kolo.torch.zero elastic re-shard: the ranks hold different commits "
                "(commit numbers %s, world sizes %s, optimizer ids %s by rank %s)" %
                ([who[r][0] for r in old], [who[r][1] for r in old],
                 [who[r][3] for r in old], [ranks[r] for r in old]))
        old_size = first[1]
        same = len(old) == len(who) == old_size and all(w[2] == r for r, w in enumerate(who))
        if same:
            return False  # the live state (restored already, or kept) stands
        if len(old) < len(who):
            # Joiners: the commit's layout and scalar entries from the first
            # old rank; they take the old ranks' commit number and id.
            meta = allgather_object(
                (self.layout, self.spans, self.scalars, self.elementwise) if me == old[0]
                else None, name="zero.elastic.join", process_set=ps)[old[0]]
            if not held:
                self.layout, self.spans, self.scalars, self.elementwise = meta
                self.commit, self.size, self.rank = first[0], old_size, None
                self.own = self.next = None
                opt._take_id(first[3])
        provider = {}  # old rank -> (new rank, whether from the ring copy)
        for r in old:
            provider.setdefault(who[r][2], (r, False))
        for r in old:
            provider.setdefault((who[r][2] + 1) % old_size, (r, True))
        lost = [o for o in range(old_size) if o not in provider]
        if lost:
            raise errors.invalid_argument(
                "kolo.torch.zero elastic re-shard: the committed blocks of old ranks %s "
                "(of %d) are lost with them and their ring neighbours; restart from a "
                "checkpoint (kolo.torch.zero.save)" % (lost, old_size))
        order = sorted(provider, key=lambda o: (provider[o][0], o))
        opt._relayout()
        full = {}
        for index, (start, end) in enumerate(self.spans):
            parts = [(self.next if provider[o][1] else self.own)[start:end]
                     for o in order if provider[o][0] == me]
            mine = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8)
            got = C.synchronize(C.allgather_async(
                mine, name="zero.elastic.bucket.%d" % index, process_set=ps))
            span = end - start
            if got.numel() != span * old_size:
                raise errors.mismatch(
                    "kolo.torch.zero elastic re-shard: bucket %d gathered %d bytes, "
                    "expected %d" % (index, got.numel(), span * old_size))
            by_old = {o: got[i * span:(i + 1) * span] for i, o in enumerate(order)}
            full.clear()
            for i, key, dtype, off, n in self.layout:
                if i != index:
                    continue
                full[key] = torch.cat([self._view(by_old[o], off - start, dtype, n)
                                       for o in range(old_size)])
            self._fill_bucket(opt, opt._buckets[index], full.__getitem__, whole=True)
        return True

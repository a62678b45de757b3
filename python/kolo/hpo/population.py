"""PBT's coordinator: rank 0 keeps the population's scores, plans each
exploit step and notices lost members (pbt.py, docs/hpo.md).

Every rank other than 0 reaches it over its link (channel.Link, through
service.Client; rank 0 through service.LocalClient), as a Study's ranks
reach the study's owner; the same OwnerService thread serves it.

Requests (the reply is ``("ok", value)`` or ``("err", exception)``):

- ``("scores", interval, member, score, hyperparams, step)``, from each
  member's leader at an exploit step: the reply waits until every member
  still alive and still training (none of its ranks has said bye) has
  sent its score for that interval, then is
  ``{"scores": {member: (score, hyperparams, step)}, "plan": [(loser,
  winner)], "failed": {member: why}}`` (the same for every member), or
  ``("failed", why)`` when the asking member has failed meanwhile.
- ``("failed", member, why)``: a rank of ``member`` lost a peer (its team
  can no longer train); the member fails, the population goes on.
- ``("bye", record)``: the rank has finished (``record``: its member's
  lineage as it saw it); the reply, once every rank has said bye or is
  lost, is the population's lineage (``lineage()``).

A member fails when a rank of its team is lost: the owner's link to that
rank breaks (``peer_lost``), or a rank of the team reports it. A failed
member takes no further part: later plans rank only the members left, and
its lineage says why it failed and which ranks were lost.
"""

import threading
import time

from kolo.hpo.owner import PENDING, RequestOwner


class PopulationOwner(RequestOwner):
    """Serves a PBT population (module docstring). Thread-safe (one lock).
    ``plan(scores, interval)`` is the PBT's exploit plan; ``explore(hp,
    interval, member)`` its exploration (both the same on every rank)."""

    def __init__(self, teams, plan, explore, log=print):
        self.lock = threading.RLock()
        self.teams = {i: list(r) for i, r in enumerate(teams)}
        self.plan = plan
        self.explore = explore
        self.log = log
        self.t0 = time.time()
        self.size = sum(len(r) for r in teams)
        self.failed = {}   # member -> why
        self.dead = {}     # rank -> message
        self.scores = {}   # interval -> {member: (score, hyperparams, step)}
        self.waiting = {}  # interval -> ranks waiting for its plan
        self.records = {}  # member -> (rank, record) from its lowest rank
        self.notes = {}    # member -> the steps the owner saw (no record: lost)
        self.byes = set()
        self.done = set()  # members whose ranks have begun to say bye
        self.local_reply = None  # set by LocalClient

    # ---- requests ----------------------------------------------------------

    def _dispatch(self, rank, req):
        kind = req[0]
        if kind == "scores":
            _, interval, member, score, hyperparams, step = req
            if member in self.failed:
                return ("failed", self.failed[member])
            self.scores.setdefault(interval, {})[member] = (score, hyperparams, step)
            self.waiting.setdefault(interval, set()).add(rank)
            return PENDING
        if kind == "failed":
            self._fail(req[1], req[2])
            return None
        if kind == "bye":
            record = req[1]
            if record is not None:
                known = self.records.get(record["member"])
                if known is None or rank < known[0]:
                    self.records[record["member"]] = (rank, record)
            self.byes.add(rank)
            self.done.add(self._member_of(rank))
            return PENDING
        raise ValueError("kolo.hpo.PBT: unknown request %r from rank %d" % (kind, rank))

    # ---- lost members ------------------------------------------------------

    def _member_of(self, rank):
        for member, ranks in self.teams.items():
            if rank in ranks:
                return member
        return None

    def _fail(self, member, why):
        if member in self.failed:
            return
        self.failed[member] = why
        left = [m for m in sorted(self.teams) if m not in self.failed]
        self.log("kolo.hpo: PBT member %d failed (%s); the population goes on with "
                 "members %s" % (member, why, left))

    def peer_lost(self, rank, message):
        """The owner's link to ``rank`` failed: the rank is gone."""
        with self.lock:
            if rank in self.dead:
                return
            self.dead[rank] = message
            member = self._member_of(rank)
            if member is not None:
                self._fail(member, "rank %d was lost: %s" % (rank, message))

    # ---- replies -----------------------------------------------------------

    def resolve(self):
        """Replies now ready for waiting requests: ``{rank: reply}``."""
        out = {}
        with self.lock:
            for interval in sorted(self.waiting):
                got = self.scores.get(interval, {})
                live = [m for m in sorted(self.teams)
                        if m not in self.failed and m not in self.done]
                if any(m not in got for m in live):
                    continue
                out.update(self._plan_step(interval, {m: got[m] for m in live}))
            if self.byes and all(r in self.byes or r in self.dead
                                 for r in range(self.size)):
                lineage = self.lineage()
                out.update({r: ("ok", lineage) for r in self.byes if r not in self.dead})
                self.byes.clear()
        return out

    def _plan_step(self, interval, scores):
        plan = self.plan({m: v[0] for m, v in scores.items()}, interval)
        parents = {loser: winner for loser, winner in plan}
        for m, (score, hp, step) in scores.items():
            parent = parents.get(m)
            after = self.explore(scores[parent][1], interval, m) if parent is not None else hp
            self.notes.setdefault(m, []).append({
                "step": step, "score": score, "hyperparams": dict(after), "parent": parent,
                "seconds": None, "time": time.time() - self.t0})
        reply = {"scores": scores, "plan": plan, "failed": dict(self.failed)}
        out = {}
        for r in self.waiting.pop(interval):
            if r in self.dead:  # nobody waits there any more
                continue
            member = self._member_of(r)
            out[r] = ("ok", ("failed", self.failed[member]) if member in self.failed
                      else reply)
        self.scores.pop(interval, None)
        return out

    def lineage(self):
        """Every member's record (its lowest surviving rank's, else what the
        owner saw), with ``failed`` (why, or None) and ``lost_ranks``."""
        out = []
        for m in sorted(self.teams):
            ranks = self.teams[m]
            if m in self.records:
                record = dict(self.records[m][1])
            else:
                notes = self.notes.get(m, [])
                record = {"member": m, "ranks": ranks, "history": notes,
                          "final_score": None,
                          "hyperparams": notes[-1]["hyperparams"] if notes else None}
            lost = [r for r in ranks if r in self.dead]
            why = self.failed.get(m)
            if lost:  # the owner's own word names the rank
                why = "rank %d was lost: %s" % (lost[0], self.dead[lost[0]])
            record["failed"] = why
            record["lost_ranks"] = lost
            if why is not None:
                record["final_score"] = None
            out.append(record)
        return out

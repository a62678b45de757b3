"""Carrying requests to the study's owner and its replies back.

On rank 0, ``OwnerService`` runs one thread that keeps one exchange under
way on every link (one per other rank, channel.Link) and polls them: when
a link's exchange finishes, it hands each request to
``StudyOwner.handle`` and at once starts the link's next exchange,
carrying the replies. Each link thus goes at its own rank's pace. A link
whose exchange fails (kolo.PeerLostError) is dead:
``StudyOwner.peer_lost`` fails that rank's team trial. A link is closed
after the exchange that carried the reply to the rank's ``bye``.

On the other ranks, ``Client`` runs the matching thread; ``call(request)``
queues the request, wakes the thread and waits for the reply. The thread
exchanges every ``TICK`` while idle and straight on while a request is in
flight, so a call costs about two exchanges.

On rank 0 itself, ``LocalClient`` calls the owner directly.
"""

import itertools
import threading
import time

import kolo

from kolo.hpo.owner import PENDING

TICK = 0.02   # seconds between a rank's idle exchanges
POLL = 0.002  # seconds between the owner's polls of its links when none moved


def _raise_or_value(reply):
    status, value = reply
    if status == "err":
        raise value
    return value


class OwnerService:
    """Rank 0's thread serving ``links`` ({rank: Link}) with ``owner``."""

    def __init__(self, owner, links):
        self.owner = owner
        self.links = dict(links)
        self.outbox = {r: [] for r in links}
        self.pending = {}    # rank -> (request id, kind) waiting for its reply
        self.bye_queued = set()  # ranks whose outbox holds the reply to their bye
        self.closing = set()     # ranks whose bye reply is in flight
        self.inflight = {}       # rank -> the exchange under way
        self.error = None
        self._thread = threading.Thread(target=self._run, name="kolo.hpo.owner",
                                        daemon=True)

    def start(self):
        self._thread.start()

    def join(self):
        self._thread.join()

    def _run(self):
        try:
            for r in list(self.links):
                self._post(r)
            while self.links:
                progressed = False
                for r in list(self.inflight):
                    if self.links[r].done(self.inflight[r]):
                        self._receive(r, self.inflight.pop(r))
                        progressed = True
                self._resolve()
                if not progressed:
                    time.sleep(POLL)
        except Exception as e:  # a bug: every rank waiting on us must learn it
            self.error = e
            raise

    def _post(self, r):
        """Starts rank r's next exchange, carrying its outbox."""
        out, self.outbox[r] = self.outbox[r], []
        if r in self.bye_queued:
            self.bye_queued.discard(r)
            self.closing.add(r)
        try:
            self.inflight[r] = self.links[r].start(out)
        except kolo.KoloError as e:
            self._lost(r, e)

    def _receive(self, r, started):
        try:
            incoming = self.links[r].finish(started)
        except kolo.KoloError as e:
            self._lost(r, e)
            return
        if r in self.closing:  # that exchange carried the bye's reply
            del self.links[r]
            return
        for req_id, req in incoming:
            reply = self.owner.handle(r, req)
            if reply is PENDING:
                self.pending[r] = (req_id, req[0])
            else:
                self.outbox[r].append((req_id, reply))
        self._post(r)

    def _resolve(self):
        for r, reply in self.owner.resolve().items():
            if r in self.pending:
                req_id, kind = self.pending.pop(r)
                self.outbox[r].append((req_id, reply))
                if kind == "bye":
                    self.bye_queued.add(r)
            else:
                self.owner.local_reply(r, reply)

    def _lost(self, r, err):
        self.links.pop(r, None)
        self.inflight.pop(r, None)
        self.pending.pop(r, None)
        self.owner.peer_lost(r, str(err))


class Client:
    """A non-owner rank's end: ``call`` from any thread; one ticking thread."""

    def __init__(self, link):
        self.link = link
        self._lock = threading.Lock()
        self._queue = []
        self._waiting = {}  # id -> [event, reply]
        self._ids = itertools.count()
        self._closed = False
        self._error = None
        self._rank = kolo.rank()
        self._wake = threading.Event()  # a request is queued
        self._thread = threading.Thread(target=self._run, name="kolo.hpo.client",
                                        daemon=True)
        self._thread.start()

    def call(self, request):
        event = threading.Event()
        slot = [event, None]
        with self._lock:
            if self._error is not None:
                raise self._error
            req_id = next(self._ids)
            self._waiting[req_id] = slot
            self._queue.append((req_id, request))
        self._wake.set()
        event.wait()
        if slot[1] is None:
            raise self._error
        return _raise_or_value(slot[1])

    def _run(self):
        bye = None
        while True:
            self._wake.clear()
            with self._lock:
                out, self._queue = self._queue, []
                for req_id, req in out:
                    if req[0] == "bye":
                        bye = req_id
            try:
                incoming = self.link.exchange(out)
            except kolo.KoloError as e:
                self._fail(kolo.PeerLostError(
                    "kolo.hpo: rank %d lost the study's owner (rank 0): %s"
                    % (self._rank, e)))
                return
            done = False
            with self._lock:
                for req_id, reply in incoming:
                    slot = self._waiting.pop(req_id, None)
                    if slot is not None:
                        slot[1] = reply
                        slot[0].set()
                    done = done or req_id == bye
                idle = not self._waiting
            if done:
                return
            if idle:
                self._wake.wait(TICK)

    def _fail(self, err):
        with self._lock:
            self._error = err
            for slot in self._waiting.values():
                slot[0].set()
            self._waiting.clear()

    def join(self):
        self._thread.join()


class LocalClient:
    """Rank 0's own team: calls the owner in-process. A reform request
    waits until the service thread resolves it."""

    def __init__(self, owner):
        self.owner = owner
        owner.local_reply = self._reply
        self._reform_reply = None
        self._event = threading.Event()

    def _reply(self, rank, reply):
        self._reform_reply = reply
        self._event.set()

    def call(self, request):
        reply = self.owner.handle(kolo.rank(), request)
        if reply is not PENDING:
            return _raise_or_value(reply)
        while not self._event.wait(TICK):
            for r, rep in self.owner.resolve().items():
                self._reply(r, rep)  # no service thread (a one-rank job)
        self._event.clear()
        return _raise_or_value(self._reform_reply)

    def join(self):
        pass

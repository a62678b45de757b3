"""ps.Validator: validation off the critical path (docs/parameter_server.md,
"Validation").

A Validator lives on one worker. After an optimizer step, when at least
``every_s`` seconds have passed since the last snapshot and the previous
evaluation has finished, the training thread copies the parameters (a
model's state_dict when ``model`` is given) and their version and hands them
to a background thread, then goes on training at once. The background
thread evaluates ``fn`` on the snapshot (``fn(model_copy)`` with ``model``,
else ``fn(list_of_tensors)``), which returns a number, and records
(seconds since the Validator started, version, metric) in ``history``.

Stopping: with ``target``, when a metric reaches it (``>=`` with
``higher_is_better``, else ``<=``); with ``patience=P``, when P evaluations
in a row have not improved on the best by more than ``min_delta``. The
decision is made in the background thread; the training thread then asks
the servers to stop the training (kolo_ps_request_stop), so
``ps.should_stop()`` turns true on every worker at its next step (sync: on
all after the same step). Only the training thread talks to the servers:
the client is not thread-safe.
"""

import copy
import threading
import time

import torch

from kolo import _native


class Validator:
    """See the module's documentation."""

    def __init__(self, fn, every_s, optimizer, model=None, target=None,
                 higher_is_better=True, patience=None, min_delta=0.0):
        if not callable(fn):
            raise ValueError("Validator: fn must be callable, got %r" % (fn,))
        if not every_s >= 0:
            raise ValueError("Validator: every_s=%r (expected seconds >= 0)" % (every_s,))
        if patience is not None and (int(patience) != patience or patience < 1):
            raise ValueError("Validator: patience=%r (expected an integer >= 1)"
                             % (patience,))
        self._fn = fn
        self._every = float(every_s)
        self._opt = optimizer
        self._live = model
        self._model = copy.deepcopy(model) if model is not None else None
        self._target = target
        self._higher = bool(higher_is_better)
        self._patience = patience
        self._min_delta = float(min_delta)
        self._t0 = time.monotonic()
        self._last = None  # when the last snapshot was taken
        self.history = []  # (seconds, version, metric)
        self.best = None
        self._since_best = 0
        self._decided = None  # why to stop, set by the background thread
        self._requested = False
        self._error = None
        self._lock = threading.Lock()
        self._work = None  # (snapshot, version) waiting for the thread
        self._busy = False
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kolo-ps-validator",
                                        daemon=True)
        self._thread.start()

    # ---- the training thread -------------------------------------------------

    def after_step(self):
        """Called by the optimizer after each step: hands a snapshot to the
        background thread when one is due, and sends the stop request once
        the thread has decided."""
        with self._lock:
            if self._error is not None:
                error, self._error = self._error, None
                raise RuntimeError("ps.Validator: fn raised: %r" % (error,)) from error
            decided, busy = self._decided, self._busy
        if decided is not None and not self._requested:
            self._requested = True
            _native.ps_request_stop()
        now = time.monotonic()
        if busy or decided is not None or (
                self._last is not None and now - self._last < self._every):
            return
        self._last = now
        with torch.no_grad():
            if self._model is not None:
                snapshot = {k: v.detach().clone()
                            for k, v in self._live.state_dict().items()}
            else:
                snapshot = [p.detach().clone() for p in self._opt._params]
        version = _native.ps_version()
        with self._lock:
            self._work = (snapshot, version)
            self._busy = True
            self._wake.notify()

    def should_stop(self):
        """True once the servers say a worker asked to stop (kolo.torch.ps
        should_stop, which also reads a group leader's word). Not at once
        when this Validator decides: in sync mode every worker must stop
        after the same step, the one the servers name."""
        group = self._opt._group
        return (group is not None and group.stop) or _native.ps_stop_requested()

    @property
    def reason(self):
        """Why this Validator decided to stop (None while it has not)."""
        return self._decided

    def wait(self, timeout=None):
        """Waits until no evaluation is running or queued; True when idle."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wake.wait(left)
        return True

    def close(self):
        """Stops the background thread after the evaluation it is running."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        self._thread.join()

    # ---- a dedicated validator rank (kolorun --validators V) ------------------

    def serve(self):
        """On a validator rank: pull, evaluate, record, every ``every_s``
        seconds, until the servers say every trainer has finished; the last
        evaluation is of the final parameters. Asks the servers to stop the
        training when the target or the patience says so."""
        self.close()  # no background thread here: this thread evaluates
        while True:
            began = time.monotonic()
            self._opt.pull()
            over = _native.ps_training_over()
            version = _native.ps_version()
            if self._live is not None:
                self._live.eval()
                with torch.no_grad():
                    metric = float(self._fn(self._live))
            else:
                metric = float(self._fn([p.detach() for p in self._opt._params]))
            self.history.append((time.monotonic() - self._t0, version, metric))
            if self._decided is None:
                self._judge(metric)
            if self._decided is not None and not self._requested:
                self._requested = True
                _native.ps_request_stop()
            if over:
                return
            time.sleep(max(0.0, self._every - (time.monotonic() - began)))

    # ---- the background thread -----------------------------------------------

    def _run(self):
        while True:
            with self._lock:
                while self._work is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                snapshot, version = self._work
                self._work = None
            try:
                metric = float(self._evaluate(snapshot))
            except Exception as e:  # reported on the training thread
                with self._lock:
                    self._error = e
                    self._busy = False
                    self._wake.notify_all()
                continue
            with self._lock:
                self.history.append((time.monotonic() - self._t0, version, metric))
                self._judge(metric)
                self._busy = False
                self._wake.notify_all()

    def _evaluate(self, snapshot):
        if self._model is None:
            return self._fn(snapshot)
        self._model.load_state_dict(snapshot)
        with torch.no_grad():
            return self._fn(self._model)

    def _judge(self, metric):
        better = (lambda a, b: a > b + self._min_delta) if self._higher else (
            lambda a, b: a < b - self._min_delta)
        if self.best is None or better(metric, self.best):
            self.best = metric
            self._since_best = 0
        else:
            self._since_best += 1
        if self._target is not None and (metric >= self._target if self._higher
                                         else metric <= self._target):
            self._decided = "metric %g reached the target %g" % (metric, self._target)
        elif self._patience is not None and self._since_best >= self._patience:
            self._decided = ("no improvement on %g for %d evaluations"
                             % (self.best, self._since_best))

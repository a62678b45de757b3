"""A pipeline stage's events: ``StageTrace`` records each forward, backward,
send and receive of a micro-batch, as (kind, micro-batch, start, end) in
``events`` (time.perf_counter seconds) and, while kolo's timeline runs
(``KOLO_TIMELINE`` / ``start_timeline``), as a span on that timeline.

Timeline format: one track per stage, "pipeline stage S", in the rank's
process; spans named FORWARD, BACKWARD, SEND, RECV (per micro-batch, args
``micro_batch``, ``stage``, ``peer`` (the other rank, for SEND/RECV) and
``tensor`` ("activation" or "gradient")) and SEND_WAIT (the end of a step,
waiting for the stage's own sends to complete; micro-batch -1). The spans
of a stage never overlap: a stage runs one thing at a time.

Kinds in ``events``: "forward", "backward", "send" (posting a message),
"recv" (waiting for one), "send_wait". ``cpu`` holds, for each event at
the same index, the CPU seconds the stage's thread used in it
(time.thread_time): a span longer than its CPU time was descheduled (or
waited) for the difference.
"""

import contextlib
import time

from kolo import timeline as _timeline

PHASES = {"forward": "FORWARD", "backward": "BACKWARD", "send": "SEND",
          "recv": "RECV", "send_wait": "SEND_WAIT"}


class StageTrace:
    def __init__(self, stage):
        self.stage = stage
        self.track = "pipeline stage %d" % stage
        self.events = []
        self.cpu = []
        self._live = False

    def reset(self):
        """At the start of a step: forgets the last step's events and looks
        once whether the timeline runs."""
        self.events = []
        self.cpu = []
        self._live = _timeline.active()

    @contextlib.contextmanager
    def span(self, kind, m, **args):
        if self._live:
            _timeline.begin(self.track, PHASES[kind], micro_batch=m, stage=self.stage,
                            **args)
        c0, t0 = time.thread_time(), time.perf_counter()
        try:
            yield
        finally:
            self.events.append((kind, m, t0, time.perf_counter()))
            self.cpu.append(time.thread_time() - c0)
            if self._live:
                _timeline.end(self.track)

    def busy(self, kinds=("forward", "backward")):
        """Seconds spent in events of ``kinds`` in the last step."""
        return sum(e - s for k, _, s, e in self.events if k in kinds)

    def cpu_busy(self, kinds=("forward", "backward")):
        """CPU seconds of the stage's thread in events of ``kinds``."""
        return sum(c for (k, _, _, _), c in zip(self.events, self.cpu) if k in kinds)

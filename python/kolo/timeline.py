"""Spans of the caller's own phases on kolo's timeline (``KOLO_TIMELINE`` or
``start_timeline``), beside the runtime's collectives: e.g. a pipeline
stage's FORWARD of micro-batch 3 (kolo.torch.pipeline records these).

Contract
- ``begin(track, phase, **args)`` opens a span named ``phase`` on the track
  ``track`` of this rank's process in the trace (a row, made at its first
  event), with ``args`` (values written as strings) as the event's args;
  ``end(track)`` closes the track's innermost open span. Timestamps are
  taken at the call, on the runtime's clock.
- Without a running timeline both do nothing; ``active()`` says whether one
  runs, so a caller can skip formatting its arguments.
- Spans on one track must nest (end closes the latest begin); use one
  track per concurrent activity.
- An empty track or phase raises InvalidArgumentError; before ``init``
  (or after ``shutdown``) the calls raise as other kolo calls do.
"""

import contextlib

from kolo import _native


def active():
    """True while a timeline is being written on this rank."""
    return _native.timeline_active()


def begin(track, phase, **args):
    _native.timeline_begin(str(track), str(phase),
                           [(str(k), str(v)) for k, v in args.items()])


def end(track):
    _native.timeline_end(str(track))


@contextlib.contextmanager
def span(track, phase, **args):
    """``begin`` on entry, ``end`` on exit (an exception included)."""
    begin(track, phase, **args)
    try:
        yield
    finally:
        end(track)


__all__ = ["active", "begin", "end", "span"]

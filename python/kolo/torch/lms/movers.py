"""Movers: the copies the placement planner (planner.py) asks for, between
a saved storage on the device and its copy in host memory.

A planner entry's ``payload`` is an activations.Storage: ``base`` (a 1-d
tensor over the whole device storage, or None while offloaded) and
``host`` (the host copy, or None). Every copy is a span on kolo's
timeline, track "lms copies" (OFFLOAD, PREFETCH, FETCH with the entry's
index and bytes), beside the compute (track "lms compute").

- CpuMover: the device is the CPU. "Host memory" is a separate pool of
  copies whose bytes it counts (``pool_bytes``); the device storage is
  dropped on offload, so what the planner counts as resident is what the
  hooks really hold. Copies are synchronous.
- CudaMover: copies on one side stream. Offload: the side stream waits
  for the compute stream (the tensor was produced there), copies into
  pinned host memory, and the device block is handed to the caching
  allocator with ``record_stream`` (not reused before the copy ends).
  Prefetch: a device buffer filled from the pinned copy on the side
  stream, an event recorded; ``ready`` makes the compute stream wait for
  that event (no host synchronization) and records the buffer's use
  there. With ``timing`` every copy is bracketed by CUDA events, so
  ``copy_seconds()`` is the GPU time spent copying (the GPU check).
"""

from kolo.torch.lms import spans

TRACK = "lms copies"


class CpuMover:
    def __init__(self):
        self.pool_bytes = 0
        self.peak_pool_bytes = 0

    def offload(self, e):
        s = e.payload
        with spans.span(TRACK, "OFFLOAD", entry=e.index, bytes=e.nbytes):
            s.host = s.base.clone()
        s.base = None
        self.pool_bytes += e.nbytes
        self.peak_pool_bytes = max(self.peak_pool_bytes, self.pool_bytes)

    def _back(self, e, phase):
        s = e.payload
        with spans.span(TRACK, phase, entry=e.index, bytes=e.nbytes):
            s.base = s.host.clone()
        s.host = None
        self.pool_bytes -= e.nbytes

    def prefetch(self, e):
        self._back(e, "PREFETCH")

    def fetch(self, e):
        self._back(e, "FETCH")

    def ready(self, e):
        pass

    def forget(self, e):
        """The entry was released while offloaded: its pool copy goes."""
        if e.payload.host is not None:
            e.payload.host = None
            self.pool_bytes -= e.nbytes


class CudaMover:
    def __init__(self, device, timing=False):
        import torch
        self._torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.timing = timing
        self._timers = []
        self.pool_bytes = 0
        self.peak_pool_bytes = 0

    def _timed(self):
        if not self.timing:
            return None
        start = self._torch.cuda.Event(enable_timing=True)
        end = self._torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        self._timers.append((start, end))
        return end

    def offload(self, e):
        torch, s = self._torch, e.payload
        base = s.base
        with spans.span(TRACK, "OFFLOAD", entry=e.index, bytes=e.nbytes):
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                end = self._timed()
                host = torch.empty(base.shape, dtype=base.dtype, pin_memory=True)
                host.copy_(base, non_blocking=True)
                if end is not None:
                    end.record(self.stream)
            base.record_stream(self.stream)
        s.host, s.base, s.event = host, None, None
        self.pool_bytes += e.nbytes
        self.peak_pool_bytes = max(self.peak_pool_bytes, self.pool_bytes)

    def _back(self, e, phase):
        torch, s = self._torch, e.payload
        with spans.span(TRACK, phase, entry=e.index, bytes=e.nbytes):
            with torch.cuda.stream(self.stream):
                end = self._timed()
                base = torch.empty(s.host.shape, dtype=s.host.dtype, device=self.device)
                base.copy_(s.host, non_blocking=True)
                if end is not None:
                    end.record(self.stream)
                event = torch.cuda.Event()
                event.record(self.stream)
        # The pinned block's reuse waits for the copy (the caching host
        # allocator records an event for non-blocking copies from it).
        s.base, s.host, s.event = base, None, event
        self.pool_bytes -= e.nbytes

    def prefetch(self, e):
        self._back(e, "PREFETCH")

    def fetch(self, e):
        self._back(e, "FETCH")
        self.ready(e)

    def ready(self, e):
        s = e.payload
        if s.event is not None:
            current = self._torch.cuda.current_stream(self.device)
            current.wait_event(s.event)
            s.base.record_stream(current)
            s.event = None

    def forget(self, e):
        if e.payload.host is not None:
            e.payload.host = None
            self.pool_bytes -= e.nbytes

    def copy_seconds(self):
        """GPU seconds spent in copies so far (``timing`` only); synchronizes."""
        self.stream.synchronize()
        total = sum(a.elapsed_time(b) for a, b in self._timers) / 1e3
        return total

    def reset_timing(self):
        self.stream.synchronize()
        self._timers = []

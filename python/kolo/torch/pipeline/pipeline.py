"""Pipeline parallelism: a ``torch.nn.Sequential`` split into stages, one per
rank of a process set, micro-batches flowing forward and their gradients
back over kolo's point-to-point messages (kolo.torch.point_to_point).

Contract
- Every rank of the pipeline builds ``Pipeline(...)`` with the same
  arguments (collective over the process set): the ranks agree once, at
  construction, on the split, the schedule, the chunks and the checkpoint
  mode; a disagreement, or a bad argument on any rank, raises
  ValueError on every rank naming the ranks and the values.
- Stage s is the s-th rank of the process set (kolo's global ranks in list
  order) and owns the layers ``[bounds[s], bounds[s+1])``.
- ``train_step(batch, loss_fn, targets)`` runs one step of the schedule:
  the batch (first stage) and the targets (last stage) are split into
  ``chunks`` equal micro-batches along dimension 0; the last stage adds
  ``loss_fn(output, target) / chunks`` for each; gradients accumulate into
  the stage's parameters' ``.grad``. Returns the step's loss on the last
  stage (the sum of the micro-batches' scaled losses), None elsewhere.
  ``step(optimizer)`` then applies and clears them.
- ``pipe(x)``: a forward pass without gradients; the output (micro-batches
  concatenated) on the last stage, None elsewhere.
- Shapes: at the first step every stage sends its successor a descriptor
  of its output (dtype, shape), and an answer travels back from the last
  stage, so a stage that fails there (returns something other than a
  tensor, a batch that does not split) fails every stage with an error
  naming it. Later steps send only tensors: their shapes must stay those
  of the first step.
- ``events``: (kind, micro-batch, start, end) of the last step
  (time.perf_counter seconds), kind one of "forward", "backward", "recv"
  (waiting for a message), "send" (posting one) per micro-batch, and
  "send_wait" (micro-batch -1: the end of the step, waiting for the
  stage's own sends). While kolo's timeline runs (KOLO_TIMELINE,
  ``start_timeline``) the same spans go on it, on a track "pipeline stage
  S" of the rank (pipeline/trace.py). ``write_trace(path)`` writes the
  events alone as a Chrome trace.
- ``peak_held``: the most micro-batches whose activations the stage held
  at once in the last training step; ``peak_activation_bytes``: the most
  bytes of activations it held at once (autograd's saved tensors and the
  stage's kept inputs and outputs, each storage once, parameters and the
  user's batch and targets not counted; pipeline/activations.py).
- Activation checkpointing (``checkpoint``): "never" keeps each
  micro-batch's graph until its backward; "always" keeps only a stage's
  input and recomputes the forward in the backward
  (torch.utils.checkpoint, random state preserved); "except_last"
  checkpoints every micro-batch but the last (whose backward comes first
  in GPipe's drain).
"""

import torch
from torch.utils.checkpoint import checkpoint as _checkpoint

from kolo.torch import functions as _functions
from kolo.torch import point_to_point as _p2p
from kolo.torch.pipeline import schedules
from kolo.torch.pipeline.activations import ActivationMeter
from kolo.torch.pipeline.trace import StageTrace
from kolo.torch.process_sets import global_process_set

CHECKPOINTS = ("never", "except_last", "always")
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
           torch.int64, torch.uint8, torch.bool, torch.int8, torch.int16]
_MAX_DIMS = 8
_TAG_ACT, _TAG_GRAD, _TAG_SHAPE, _TAG_ANSWER = 1, 2, 3, 4
_TENSOR = {_TAG_ACT: "activation", _TAG_GRAD: "gradient"}
# Descriptor and answer codes.
_OK, _NOT_TENSOR, _BAD_BATCH, _RAISED = 0, 1, 2, 3


def _layers(module):
    if isinstance(module, torch.nn.Sequential):
        return list(module.children())
    if isinstance(module, (list, tuple)) and all(
            isinstance(m, torch.nn.Module) for m in module):
        return list(module)
    raise ValueError("Pipeline: module must be a torch.nn.Sequential or a list of "
                     "modules, got %s" % type(module).__name__)


def _bounds(n, stages, split_points, balance):
    """The stages' layer boundaries [0, ..., n]; ValueError when wrong."""
    if (split_points is None) == (balance is None):
        raise ValueError("Pipeline: give split_points or balance (one of them)")
    if balance is not None:
        balance = list(balance)
        if len(balance) != stages or any(int(b) < 1 for b in balance) or \
                sum(balance) != n:
            raise ValueError(
                "Pipeline: balance %s must give %d stages of at least one layer "
                "each, %d layers in all" % (balance, stages, n))
        bounds = [0]
        for b in balance:
            bounds.append(bounds[-1] + int(b))
        return bounds
    points = list(split_points)
    if len(points) != stages - 1:
        raise ValueError("Pipeline: %d split points for %d stages (need %d)" %
                         (len(points), stages, stages - 1))
    bounds = [0] + [int(p) for p in points] + [n]
    for a, b in zip(bounds, bounds[1:]):
        if not a < b:
            raise ValueError(
                "Pipeline: split points %s are outside the model of %d layers or not "
                "increasing (each stage needs a layer: 0 < p1 < ... < %d)" %
                (points, n, n))
    return bounds


class Pipeline(torch.nn.Module):
    """See the module's docstring."""

    def __init__(self, module, split_points=None, balance=None, chunks=1,
                 schedule="gpipe", checkpoint="never", process_set=None):
        super().__init__()
        self.process_set = process_set or global_process_set
        self.ranks = list(self.process_set.ranks)
        self.stages = len(self.ranks)
        self.stage = self.process_set.rank()
        if self.stage < 0:
            raise ValueError("Pipeline: this rank is not in the process set %s" %
                             self.ranks)
        error, bounds = None, None
        try:
            layers = _layers(module)
            bounds = _bounds(len(layers), self.stages, split_points, balance)
            if schedule not in schedules.SCHEDULES:
                raise ValueError("Pipeline: schedule %r (expected one of %s)" %
                                 (schedule, schedules.SCHEDULES))
            if checkpoint not in CHECKPOINTS:
                raise ValueError("Pipeline: checkpoint %r (expected one of %s)" %
                                 (checkpoint, CHECKPOINTS))
            if type(chunks) is not int or chunks < 1:
                raise ValueError("Pipeline: chunks must be a positive int, got %r" %
                                 (chunks,))
        except ValueError as e:
            error = str(e)
        self._agree(error, (bounds, schedule, chunks, checkpoint))
        self.bounds, self.schedule, self.chunks, self.checkpoint = \
            bounds, schedule, chunks, checkpoint
        self.module = torch.nn.Sequential(*layers[bounds[self.stage]:
                                                 bounds[self.stage + 1]])
        self.is_first = self.stage == 0
        self.is_last = self.stage == self.stages - 1
        self._shapes = None  # (dtype, shape) of this stage's input micro-batch
        self._out = None     # ... and of its output
        self._pending = []   # sends not yet synchronized
        self.trace = StageTrace(self.stage)  # the last step's events
        self.meter = ActivationMeter(self.module.parameters())
        self.peak_held = 0   # most micro-batch graphs held at once, last step
        self.peak_activation_bytes = 0

    @property
    def events(self):
        """(kind, micro-batch, start, end) of the last step."""
        return self.trace.events

    # -- agreement ------------------------------------------------------------

    def _agree(self, error, config):
        everyone = _functions.allgather_object(
            (error, config), name="kolo.pipeline.config", process_set=self.process_set)
        errors = [(self.ranks[i], e) for i, (e, _) in enumerate(everyone) if e]
        if errors:
            raise ValueError("; ".join("rank %d: %s" % (r, e) for r, e in errors))
        names = ("split (layer bounds)", "schedule", "chunks", "checkpoint")
        for i, (_, theirs) in enumerate(everyone):
            for name, a, b in zip(names, config, theirs):
                if a != b:
                    raise ValueError(
                        "Pipeline: ranks disagree on the %s: rank %d has %r, rank %d "
                        "has %r" % (name, self.ranks[self.stage], a, self.ranks[i], b))

    # -- messages -------------------------------------------------------------

    def _send(self, tensor, stage, tag, m):
        with self.trace.span("send", m, peer=self.ranks[stage], tensor=_TENSOR[tag]):
            self._pending.append(_p2p.isend(tensor, self.ranks[stage], tag=tag,
                                            process_set=self.process_set))

    def _recv(self, dtype, shape, stage, tag):
        t = torch.empty(shape, dtype=dtype)
        return _p2p.recv(t, self.ranks[stage], tag=tag, process_set=self.process_set)

    def _recv_traced(self, dtype, shape, stage, tag, m):
        with self.trace.span("recv", m, peer=self.ranks[stage], tensor=_TENSOR[tag]):
            return self._recv(dtype, shape, stage, tag)

    def _flush(self):
        for h in self._pending:
            _p2p._ops.synchronize(h)
        self._pending = []

    def _describe(self, status, tensor=None, detail=0):
        d = torch.zeros(3 + _MAX_DIMS, dtype=torch.int64)
        d[0], d[1] = status, detail
        if tensor is not None:
            d[2] = _DTYPES.index(tensor.dtype)
            d[3] = tensor.dim()
            d[4:4 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
        return d

    def _failure(self, status, stage, what=""):
        rank = self.ranks[stage]
        if status == _RAISED:
            return RuntimeError("pipeline stage %d (rank %d) raised %s in its first "
                                "forward pass" % (stage, rank, what or "an error"))
        if status == _NOT_TENSOR:
            return TypeError("pipeline stage %d (rank %d) returned %s, expected a "
                             "torch.Tensor" % (stage, rank, what or "something else"))
        return ValueError("pipeline stage %d (rank %d): the batch does not split into "
                          "%d equal micro-batches%s" % (stage, rank, self.chunks,
                                                        what and ": " + what))

    # -- one micro-batch --------------------------------------------------------

    def _forward_one(self, m, inputs, keep, grad):
        if self.is_first:
            x = inputs[m]
        else:
            x = self._recv_traced(self._shapes[0], self._shapes[1], self.stage - 1,
                                  _TAG_ACT, m)
            if grad and x.is_floating_point():
                x.requires_grad_(True)
        ckpt = grad and (self.checkpoint == "always" or (
            self.checkpoint == "except_last" and m < self.chunks - 1))
        first = self._out is None
        try:
            with torch.set_grad_enabled(grad), self.trace.span("forward", m), \
                    self.meter.saving():
                if ckpt:
                    y = _checkpoint(self.module, x, use_reentrant=False)
                else:
                    y = self.module(x)
        except Exception as e:
            if first:  # every stage learns of it, then this one raises it
                self._fail_forward(_RAISED, self.stage, type(e).__name__, e)
            raise
        if not isinstance(y, torch.Tensor):
            if first:
                self._fail_forward(_NOT_TENSOR, self.stage, type(y).__name__)
            raise self._failure(_NOT_TENSOR, self.stage, type(y).__name__)
        if first:
            self._out = (y.dtype, tuple(y.shape))
            if not self.is_last:
                _p2p.send(self._describe(_OK, y), self.ranks[self.stage + 1], _TAG_SHAPE,
                          self.process_set)
        if not self.is_last:
            self._send(y.detach(), self.stage + 1, _TAG_ACT, m)
        if first:
            self._answer()
        keep[m] = (x, y, self.meter.hold(x), self.meter.hold(y))
        return y

    def _backward_one(self, m, keep, loss_fn, targets, losses):
        x, y, _, _ = keep.pop(m)  # the holders go with this frame
        if self.is_last:
            with self.trace.span("backward", m):
                loss = loss_fn(y, targets[m]) / self.chunks
                losses.append(loss.detach())
                loss.backward()
        elif self._out[0].is_floating_point and y.requires_grad:
            g = self._recv_traced(self._out[0], self._out[1], self.stage + 1,
                                  _TAG_GRAD, m)
            with self.trace.span("backward", m):
                torch.autograd.backward(y, g)
        # else: nothing flows back through an integer activation
        if not self.is_first and x.requires_grad:
            self._send(x.grad, self.stage - 1, _TAG_GRAD, m)

    # -- the first step: shapes ----------------------------------------------

    def _answer(self):
        """After the first output's descriptor went on: passes the answer from
        the last stage back (see the module's docstring)."""
        if not self.is_last:
            answer = self._recv(torch.int64, (3,), self.stage + 1, _TAG_ANSWER)
        else:
            answer = torch.tensor([_OK, 0, 0])
        if not self.is_first:
            _p2p.send(answer, self.ranks[self.stage - 1], _TAG_ANSWER, self.process_set)
        if answer[0].item() != _OK:
            raise self._failure(int(answer[0]), int(answer[1]))

    def _fail_forward(self, status, stage, what="", exc=None):
        """A failure in the first step: tell the successors and wait for the
        answer to come back, so every stage raises it."""
        if not self.is_last:
            _p2p.send(self._describe(status, detail=stage), self.ranks[self.stage + 1],
                      _TAG_SHAPE, self.process_set)
            self._recv(torch.int64, (3,), self.stage + 1, _TAG_ANSWER)
        if not self.is_first:
            _p2p.send(torch.tensor([status, stage, 0]), self.ranks[self.stage - 1],
                      _TAG_ANSWER, self.process_set)
        if exc is not None:
            raise exc
        raise self._failure(status, stage, what)

    def _receive_shapes(self):
        d = self._recv(torch.int64, (3 + _MAX_DIMS,), self.stage - 1, _TAG_SHAPE)
        if d[0].item() != _OK:
            self._fail_forward(int(d[0]), int(d[1]))
        ndim = int(d[3])
        self._shapes = (_DTYPES[int(d[2])], tuple(int(v) for v in d[4:4 + ndim]))

    # -- a step -----------------------------------------------------------------

    def _split(self, batch, what):
        if batch is None or not isinstance(batch, torch.Tensor) or batch.dim() == 0 \
                or batch.shape[0] % self.chunks:
            shape = None if not isinstance(batch, torch.Tensor) else tuple(batch.shape)
            return None, "%s of shape %s" % (what, shape)
        return list(batch.chunk(self.chunks)), None

    def _start(self, batch):
        inputs = None
        if self.is_first:
            inputs, problem = self._split(batch, "input")
            if problem:
                if self._out is None:
                    self._fail_forward(_BAD_BATCH, 0, problem)
                raise self._failure(_BAD_BATCH, 0, problem)
        elif self._shapes is None:
            self._receive_shapes()
        return inputs

    def train_step(self, batch, loss_fn, targets=None):
        """One training step (see the module's docstring)."""
        self.trace.reset()
        self.meter.reset(exclude=(batch, targets))
        inputs = self._start(batch)
        target_chunks = None
        if self.is_last:
            target_chunks, problem = self._split(targets, "targets")
            if problem:
                raise self._failure(_BAD_BATCH, self.stage, problem)
        keep, losses = {}, []
        self.peak_held = 0
        for kind, m in schedules.order(self.schedule, self.stage, self.stages,
                                       self.chunks):
            if kind == "F":
                self._forward_one(m, inputs, keep, True)
                self.peak_held = max(self.peak_held, len(keep))
            else:
                self._backward_one(m, keep, loss_fn, target_chunks, losses)
        with self.trace.span("send_wait", -1):
            self._flush()
        self.peak_activation_bytes = self.meter.peak
        return torch.stack(losses).sum() if self.is_last else None

    def forward(self, batch=None):
        """A forward pass without gradients: the output on the last stage."""
        self.trace.reset()
        inputs = self._start(batch)
        keep, outs = {}, []
        for m in range(self.chunks):
            outs.append(self._forward_one(m, inputs, keep, False))
            keep.clear()
        with self.trace.span("send_wait", -1):
            self._flush()
        return torch.cat(outs) if self.is_last else None

    def write_trace(self, path):
        """Writes the last step's events as a Chrome trace (Perfetto): one
        track per stage, a span per forward, backward, send and receive of
        each micro-batch. Ranks sharing a file system give different paths."""
        import json
        t0 = min((e[2] for e in self.events), default=0.0)
        spans = [{"name": "%s %d" % (kind, m), "cat": kind, "ph": "X",
                  "pid": self.ranks[self.stage], "tid": self.stage,
                  "ts": (start - t0) * 1e6, "dur": (end - start) * 1e6}
                 for kind, m, start, end in self.events]
        with open(path, "w") as f:
            json.dump({"traceEvents": spans}, f)

    def step(self, optimizer):
        """``optimizer.step()`` then ``optimizer.zero_grad()``."""
        optimizer.step()
        optimizer.zero_grad()

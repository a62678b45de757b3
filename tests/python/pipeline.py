"""kolo.torch.pipeline on 4 ranks:
    kolorun -np 4 /usr/bin/python3 tests/python/pipeline.py
Exactness: the gradients of a pipelined step (4 stages over every rank, and
2 stages in two process sets at once; GPipe and 1F1B; checkpointing never,
except_last, always) equal, bit for bit in float64, those of the
unpipelined model run over the same micro-batches. Bad use (split points
outside the model, ranks disagreeing on the schedule, a stage returning a
tuple) raises on every rank. Mesh(2, 2) trains with the stage gradients
averaged across replicas. kolo's timeline holds every stage's FORWARD,
BACKWARD, SEND and RECV spans per micro-batch; 1F1B's peak activation
bytes are (P - s) micro-batches' against GPipe's M, within P/M of GPipe's
plus one micro-batch. Prints "pipeline ok" on every rank."""

import json
import os
import tempfile

import torch

import kolo.torch as kolo
from kolo.torch.pipeline import Mesh, Pipeline, bubble_fraction
from kolo.torch.pipeline.schedules import SCHEDULES, replay

kolo.init()
me, n = kolo.rank(), kolo.size()
assert n == 4, "run on 4 ranks"
torch.set_default_dtype(torch.float64)
CHUNKS, BATCH = 4, 8


def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 10), torch.nn.Tanh(),
        torch.nn.Linear(10, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3), torch.nn.Tanh())


def loss_fn(out, target):
    return torch.nn.functional.mse_loss(out, target)


g = torch.Generator().manual_seed(7)
x, y = torch.randn(BATCH, 6, generator=g), torch.randn(BATCH, 3, generator=g)

# The reference: the whole model on one rank, the same micro-batches in order.
ref = model()
for xm, ym in zip(x.chunk(CHUNKS), y.chunk(CHUNKS)):
    (loss_fn(ref(xm), ym) / CHUNKS).backward()
ref_grads = [p.grad for p in ref.parameters()]
ref_loss = sum(loss_fn(ref(xm), ym).item() / CHUNKS
               for xm, ym in zip(x.chunk(CHUNKS), y.chunk(CHUNKS)))


def check(pipe, layers_before):
    """This stage's gradients equal the reference's for its layers."""
    offset = sum(2 for m in list(model().children())[:layers_before]
                 if isinstance(m, torch.nn.Linear))
    for i, p in enumerate(pipe.module.parameters()):
        assert torch.equal(p.grad, ref_grads[offset + i]), (
            pipe.schedule, pipe.checkpoint, pipe.stage, i,
            (p.grad - ref_grads[offset + i]).abs().max())


pair = kolo.add_process_set([0, 1]), kolo.add_process_set([2, 3])
mine = pair[0] if me < 2 else pair[1]
for schedule in ("gpipe", "1f1b"):
    for ckpt in ("never", "except_last", "always"):
        for stages, ps, split in ((4, None, [2, 4, 6]), (2, mine, [4])):
            pipe = Pipeline(model(), split_points=split, chunks=CHUNKS,
                            schedule=schedule, checkpoint=ckpt, process_set=ps)
            loss = pipe.train_step(x, loss_fn, y)
            check(pipe, pipe.bounds[pipe.stage])
            if pipe.is_last:
                assert abs(loss.item() - ref_loss) < 1e-12, (loss.item(), ref_loss)
            # A second step reuses the negotiated shapes.
            pipe.module.zero_grad()
            pipe.train_step(x, loss_fn, y)
            check(pipe, pipe.bounds[pipe.stage])
            kinds = {(k, m) for k, m, _, _ in pipe.events}
            assert ("forward", CHUNKS - 1) in kinds and ("backward", 0) in kinds
            assert pipe.is_last or ("send", 0) in kinds
            assert pipe.is_first or ("recv", 0) in kinds
            out = pipe(x)
            if pipe.is_last:
                assert torch.allclose(out, ref(x))


def expect(exc, text, fn):
    try:
        fn()
    except exc as e:
        assert text in str(e), str(e)
        return
    raise AssertionError("no %s: %s" % (exc.__name__, text))


# Bad use: an error on every rank, no hang.
expect(ValueError, "outside the model",
       lambda: Pipeline(model(), split_points=[2, 4, 9], chunks=2))
expect(ValueError, "ranks disagree on the schedule",
       lambda: Pipeline(model(), balance=[2, 2, 2, 2], chunks=2,
                        schedule="1f1b" if me == 2 else "gpipe"))


class Pair(torch.nn.Module):
    def forward(self, t):
        return t, t


layers = list(model().children())
layers.insert(4, Pair())
expect(TypeError, "pipeline stage 1 (rank 1) returned",
       lambda: Pipeline(layers, split_points=[2, 5, 7], chunks=2).train_step(
           x, loss_fn, y))
# A stage that raises in its first forward: its error there, a RuntimeError
# naming it on the others.
if me == 2:
    expect(TypeError, "must be Tensor", lambda: Pipeline(
        layers, split_points=[2, 4, 7], chunks=2).train_step(x, loss_fn, y))
else:
    expect(RuntimeError, "pipeline stage 2 (rank 2) raised", lambda: Pipeline(
        layers, split_points=[2, 4, 7], chunks=2).train_step(x, loss_fn, y))

# Mesh: 2 stages x 2 replicas; each replica its own data; after a step the
# replicas of a stage hold the same parameters.
mesh = Mesh(stages=2, replicas=2)
pipe = Pipeline(model(), split_points=[4], chunks=2, schedule="1f1b",
                process_set=mesh.pipeline_set)
opt = mesh.distributed_optimizer(torch.optim.SGD(pipe.module.parameters(), lr=0.1),
                                 pipe)
for step in range(2):
    pipe.train_step(x + mesh.replica, loss_fn, y)
    pipe.step(opt)
flat = torch.cat([p.detach().reshape(-1) for p in pipe.module.parameters()])
theirs = kolo.allgather(flat.unsqueeze(0), process_set=mesh.replica_set)
assert torch.equal(theirs[0], theirs[1])
with tempfile.TemporaryDirectory() as d:
    pipe.write_trace(os.path.join(d, "trace.json"))
    with open(os.path.join(d, "trace.json")) as f:
        cats = {e["cat"] for e in json.load(f)["traceEvents"]}
    assert cats >= {"forward", "backward", "send", "recv"}, cats
# Mesh(order="replicas"): rank s * R + r is stage s of replica r, so a
# stage's replicas are neighbours; the same training keeps them equal.
mesh = Mesh(stages=2, replicas=2, order="replicas")
assert (mesh.stage, mesh.replica) == (kolo.rank() // 2, kolo.rank() % 2), \
    (kolo.rank(), mesh.stage, mesh.replica)
pipe = Pipeline(model(), split_points=[4], chunks=2, schedule="gpipe",
                process_set=mesh.pipeline_set)
opt = mesh.distributed_optimizer(torch.optim.SGD(pipe.module.parameters(), lr=0.1),
                                 pipe)
pipe.train_step(x + mesh.replica, loss_fn, y)
pipe.step(opt)
flat = torch.cat([p.detach().reshape(-1) for p in pipe.module.parameters()])
theirs = kolo.allgather(flat.unsqueeze(0), process_set=mesh.replica_set)
assert torch.equal(theirs[0], theirs[1])
expect(ValueError, "order 'columns'", lambda: Mesh(2, 2, order="columns"))

# The timeline: every stage's FORWARD and BACKWARD of every micro-batch, and
# its SEND and RECV of activations (forward) and gradients (backward) with
# the neighbouring stages, as spans on kolo's timeline (one file per rank).
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "timeline.%d.json" % me)
    pipe = Pipeline(model(), split_points=[2, 4, 6], chunks=CHUNKS, schedule="1f1b")
    pipe.train_step(x, loss_fn, y)  # the shapes' negotiation, not traced
    kolo.start_timeline(path)
    pipe.train_step(x, loss_fn, y)
    kolo.stop_timeline()
    with open(path) as f:
        trace = json.load(f)
tracks = {e["tid"]: e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
ours = [e for e in trace if e.get("ph") in ("B", "E") and
        tracks.get(e["tid"]) == "pipeline stage %d" % me]
spans, open_spans = [], []
for e in ours:  # B/E in order on the track: no overlap, no span left open
    if e["ph"] == "B":
        assert not open_spans, (me, e, open_spans)
        open_spans.append(e)
    else:
        b = open_spans.pop()
        assert e["ts"] >= b["ts"], (b, e)
        spans.append((b["name"], int(b["args"]["micro_batch"]), b["args"].get("peer"),
                      b["args"].get("tensor")))
assert not open_spans and all(e["pid"] == me for e in ours), me
got = {s[:2] for s in spans}
for m in range(CHUNKS):
    assert {("FORWARD", m), ("BACKWARD", m)} <= got, (me, m, sorted(got))
msgs = sorted(s for s in spans if s[0] in ("SEND", "RECV"))
expected = []
for m in range(CHUNKS):
    if me > 0:
        expected += [("RECV", m, str(me - 1), "activation"), ("SEND", m, str(me - 1),
                                                               "gradient")]
    if me < n - 1:
        expected += [("SEND", m, str(me + 1), "activation"), ("RECV", m, str(me + 1),
                                                               "gradient")]
assert msgs == sorted(expected), (me, msgs, sorted(expected))
assert [name for name, m, _, _ in spans if m == -1] == ["SEND_WAIT"], spans
# The events are the timeline's spans (kinds and micro-batches, in order).
assert [(k, m) for k, m, _, _ in pipe.events] == [
    ({"FORWARD": "forward", "BACKWARD": "backward", "SEND": "send", "RECV": "recv",
      "SEND_WAIT": "send_wait"}[name], m) for name, m, _, _ in spans]
# Each event's CPU time: one per event, never more than its wall time.
assert len(pipe.trace.cpu) == len(pipe.events) and all(
    0 <= c <= (e - s) + 0.002 for c, (_, _, s, e) in zip(pipe.trace.cpu, pipe.events)), \
    list(zip(pipe.trace.cpu, pipe.events))

# Activation memory, measured in bytes: a micro-batch's activations are the
# same on every micro-batch, GPipe holds all M of them at once, 1F1B at
# most P - s (stage s): within P/M of GPipe's peak plus one micro-batch.
M8 = 8
xs, ys = torch.randn(8 * M8, 6, generator=g), torch.randn(8 * M8, 3, generator=g)
peak = {}
for schedule, chunks, batch, targets in (("gpipe", 1, xs[:8], ys[:8]),
                                         ("gpipe", M8, xs, ys), ("1f1b", M8, xs, ys)):
    pipe = Pipeline(model(), split_points=[2, 4, 6], chunks=chunks, schedule=schedule)
    pipe.train_step(batch, loss_fn, targets)
    peak[schedule, chunks] = (pipe.peak_activation_bytes, pipe.peak_held)
    assert pipe.meter.current == 0, (schedule, pipe.meter.current)  # all released
one, gpipe, f1b = peak["gpipe", 1][0], peak["gpipe", M8][0], peak["1f1b", M8][0]
assert one > 0 and gpipe == M8 * one, (me, one, gpipe)
assert peak["gpipe", M8][1] == M8 and peak["1f1b", M8][1] == n - me, (me, peak)
assert f1b == (n - me) * one, (me, f1b, one)
assert f1b <= n / M8 * gpipe + one, (me, f1b, gpipe, one)
if me == 0:
    print("activation bytes, stage 0, P %d M %d: one micro-batch %d, GPipe %d, 1F1B %d"
          % (n, M8, one, gpipe, f1b), flush=True)
# The schedules replayed on given costs (bench/pipeline_schedule.py's
# "replay"): equal costs give the bubble, (P-1)/(M+P-1), on every stage;
# a slower last stage idles the others by its extra time.
for schedule in SCHEDULES:
    for P, M in ((2, 1), (2, 8), (3, 5), (4, 8)):
        step, idle = replay(schedule, [[1.0] * M] * P, [[2.0] * M] * P)
        assert step == 3.0 * (M + P - 1), (schedule, P, M, step)
        assert all(abs(i - bubble_fraction(P, M)) < 1e-12 for i in idle), idle
    step, idle = replay(schedule, [[1.0, 1.0], [1.0, 1.0]], [[2.0, 2.0], [3.0, 3.0]])
    assert step == 11.0 and abs(idle[0] - 5 / 11) < 1e-12 and \
        abs(idle[1] - 3 / 11) < 1e-12, (schedule, step, idle)
expect(ValueError, "2 lists of 3 costs", lambda: replay("gpipe", [[1] * 3] * 2,
                                                         [[1] * 3, [1] * 2]))
kolo.barrier()
print("pipeline ok", flush=True)

"""kolo.torch.pipeline on 4 ranks:
    kolorun -np 4 /usr/bin/python3 tests/python/pipeline.py
Exactness: the gradients of a pipelined step (4 stages over every rank, and
2 stages in two process sets at once; GPipe and 1F1B; checkpointing never,
except_last, always) equal, bit for bit in float64, those of the
unpipelined model run over the same micro-batches. Bad use (split points
outside the model, ranks disagreeing on the schedule, a stage returning a
tuple) raises on every rank. Mesh(2, 2) trains with the stage gradients
averaged across replicas. Prints "pipeline ok" on every rank."""

import json
import os
import tempfile

import torch

import kolo.torch as kolo
from kolo.torch.pipeline import Mesh, Pipeline

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
kolo.barrier()
print("pipeline ok", flush=True)

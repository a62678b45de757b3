"""kolo.torch.zero under elastic training: a rank leaves (or joins) and
the sharded state is re-sharded onto the new world. Run by
tests/python/CMakeLists.txt through elastic_run.sh with KOLO_DETERMINISTIC=1,
in its kill case (`kolorun --min-np 2 -np 3`, worker 1 SIGKILLs itself at
step 5 of the first world; the survivors roll back to the step-4 commit),
its host-removed case (worker 0 drops a host from the discovery script's
list at step 3; the commit of step 4 raises HostsUpdatedInterrupt and the
two others go on without a rollback) and its host-added case (`-np 2`,
worker 0 adds a host at step 3; a third worker starts there, builds its
models and optimizers from scratch and joins the two others' re-shard of
the step-4 commit in its first sync).

One elastic job trains, side by side on the same batches, six float64
models of the same initial values, all in one TorchState: with Adam, plain
kolo.torch.DistributedOptimizer and zero stages 1, 2 and 3; with SGD and
momentum, plain and zero stage 2. The layers' sizes (117, 98, 16 elements)
divide by neither 3 nor 2 and the stage 1/2 buckets are ~100 elements, so
parameters are split between ranks differently in the two worlds.

Checked on every rank of the second world (the joiner included):
- when training resumes after the reset (the re-sharding happens in
  TorchState.reset on the old ranks and in a joiner's first sync), each
  zero optimizer's consolidated state and parameters equal, bit for bit,
  those of the last commit of the first world as rank 0 kept them (the
  victim's block comes from its ring neighbour's copy; a joiner had none);
- at the end, each zero model's parameters and its optimizer's whole state
  equal the plain model's and optimizer's bit for bit (elementwise
  optimizers on the same averaged gradients compute the same numbers in
  any sharding), and the loss of the last epoch is below the first's.
Each worker then prints "worker W done: rank R of N, steps S, params H"
as elastic_train.py does (elastic_run.sh compares them).
"""

import argparse
import hashlib
import os
import signal
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd
from kolo.torch import zero

p = argparse.ArgumentParser()
p.add_argument("--victim", type=int, default=1)
p.add_argument("--at", type=int, default=5)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--world", type=int, default=3, help="the first world's size")
p.add_argument("--samples", type=int, default=384)
p.add_argument("--step-sleep", type=float, default=0.0,
               help="seconds of pretended compute per step")
p.add_argument("--rewrite", nargs=2, metavar=("FILE", "TEXT"),
               help="instead of a failure, worker 0 writes TEXT ('\\n' for new lines) "
                    "into FILE (the discovery script's hosts) at step --at")
args = p.parse_args()

WORKER = int(os.environ["KOLO_ELASTIC_WORKER"])
BATCH = 16
BUCKET_MB = 800 / 2 ** 20   # ~100 float64 elements per bucket at stages 1 and 2

hvd.init()
torch.set_default_dtype(torch.float64)
g = torch.Generator().manual_seed(1)
data = torch.randn(args.samples, 8, generator=g)
labels = (data.sum(1) > 0).long()


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 13), torch.nn.ReLU(), torch.nn.Linear(13, 7),
                               torch.nn.ReLU(), torch.nn.Linear(7, 2))


def adam(model):
    return torch.optim.Adam(model.parameters(), lr=0.01 * hvd.size())


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)


models, opts = {}, {}
for name, make, stage in [("adam_plain", adam, 0), ("adam_z1", adam, 1), ("adam_z2", adam, 2),
                          ("adam_z3", adam, 3), ("sgd_plain", sgd, 0), ("sgd_z2", sgd, 2)]:
    model = build()
    if stage == 3:
        zero.wrap(model)
    if stage == 0:
        opt = hvd.DistributedOptimizer(make(model), named_parameters=model.named_parameters())
    else:
        opt = zero.DistributedOptimizer(make(model), named_parameters=model.named_parameters(),
                                        stage=stage, bucket_mb=BUCKET_MB)
    models[name], opts[name] = model, opt
ZEROS = [n for n in models if "_z" in n]
PLAIN_OF = {n: n.split("_")[0] + "_plain" for n in ZEROS}

sampler = hvd.elastic.ElasticSampler(list(range(len(data))), seed=2)
objects = {}
for name in models:
    objects["m_" + name], objects["o_" + name] = models[name], opts[name]
state = hvd.elastic.TorchState(sampler=sampler, epoch=0, step=0, losses=[], **objects)
checked = [False]
committed = [None]


def consolidated(name):
    """(full parameters by name, full optimizer state by name); collective."""
    model, opt = models[name], opts[name]
    with zero.full_parameters(model):
        params = {n: q.detach().clone() for n, q in model.named_parameters()}
    return params, opt.gathered_state()


def equal(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    return a == b


def on_reset():
    # No collectives here: a joining worker runs no reset callbacks.
    print("worker %d reset: now rank %d of %d, step %d" % (WORKER, hvd.rank(), hvd.size(),
                                                         state.step), flush=True)


def check_reshard():
    """Every zero optimizer's consolidated state equals rank 0's view of
    the first world's last commit (collective)."""
    view = hvd.broadcast_object(committed[0], root_rank=0, name="test.committed")
    for name in ZEROS:
        got = consolidated(name)
        assert equal(got, view[name]), "%s: the re-sharded state differs from the commit" % name
    print("worker %d: zero state re-sharded from %d to %d ranks equals the commit" %
          (WORKER, args.world, hvd.size()), flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    first_world = hvd.size() == args.world
    if not first_world and not checked[0]:
        checked[0] = True
        check_reshard()
    while state.epoch < args.epochs:
        indices = list(state.sampler)
        for b in range(0, len(indices) - BATCH + 1, BATCH):
            if args.rewrite and first_world and WORKER == 0 and state.step == args.at:
                with open(args.rewrite[0], "w") as f:
                    f.write(args.rewrite[1].replace("\\n", "\n") + "\n")
                print("worker 0 rewrote the hosts at step %d" % state.step, flush=True)
            elif (not args.rewrite and first_world and WORKER == args.victim
                  and state.step == args.at):
                print("worker %d kills itself" % WORKER, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if args.step_sleep:
                time.sleep(args.step_sleep)
            idx = indices[b:b + BATCH]
            for name, model in models.items():
                opts[name].zero_grad()
                loss = F.cross_entropy(model(data[idx]), labels[idx])
                loss.backward()
                opts[name].step()
                if name == "adam_z3":
                    state.losses.append((state.epoch, loss.item()))
            state.sampler.record_batch(b // BATCH, BATCH)
            state.step += 1
            if state.step % 2 == 0:
                # The consolidated view is taken before the commit (a rank
                # lost while taking it rolls back to the previous commit,
                # whose view is still the one kept); commit() is save()
                # then check_host_updates(), which raises on a host update.
                view = {n: consolidated(n) for n in ZEROS} if first_world else None
                state.save()
                committed[0] = view or committed[0]
                state.check_host_updates()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
for name in ZEROS:
    plain_model, plain_opt = models[PLAIN_OF[name]], opts[PLAIN_OF[name]]
    params, opt_state = consolidated(name)
    names = dict((q, n) for n, q in plain_model.named_parameters())
    for n, q in plain_model.named_parameters():
        assert torch.equal(params[n], q.detach()), "%s: parameter %s differs from plain by %g" % (
            name, n, (params[n] - q.detach()).abs().max())
    for q, s in plain_opt.state.items():
        assert equal(opt_state[names[q]], dict(s)), \
            "%s: optimizer state of %s differs from plain" % (name, names[q])
first = [l for e, l in state.losses if e == 0]
last = [l for e, l in state.losses if e == args.epochs - 1]
assert sum(last) / len(last) < sum(first) / len(first), (first, last)
assert checked[0], "worker %d never trained in a second world" % WORKER
flat = torch.cat([q.detach().reshape(-1) for q in models["adam_plain"].parameters()])
digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]
print("worker %d: zero stages 1-3 equal plain bit for bit; mean loss %.4f in epoch 0, "
      "%.4f in the last" % (WORKER, sum(first) / len(first), sum(last) / len(last)), flush=True)
print("worker %d done: rank %d of %d, steps %d, params %s" % (
    WORKER, hvd.rank(), hvd.size(), state.step, digest), flush=True)
hvd.shutdown()

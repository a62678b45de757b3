"""Elastic training through a lost rank (issue 18), run by
tests/python/CMakeLists.txt under `kolorun --min-np 2 -np 3`.

Every rank trains a small model with kolo.torch.DistributedOptimizer on a
synthetic dataset through ElasticSampler, committing the state every 2
steps. The worker named by --victim ends itself with SIGKILL (or raises, with
--raise) at step --at of the first world. The others must see the failure,
roll back to the last commit, re-form a world of 2 in the same processes,
and finish the epochs with identical parameters; each survivor prints
"worker W done: rank R of N, steps S, params H". The victim prints the time
it kills itself and each survivor the time of its first step after the
reset (bench/elastic_recovery.sh reads them).
"""

import argparse
import hashlib
import os
import signal
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--victim", type=int, default=1)
p.add_argument("--at", type=int, default=5)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--world", type=int, default=3, help="the first world's size")
p.add_argument("--width", type=int, default=16, help="hidden units (the model's size)")
p.add_argument("--step-sleep", type=float, default=0.0,
               help="seconds of pretended compute per step")
p.add_argument("--raise", dest="raise_", action="store_true",
               help="the victim raises an exception instead of being killed")
p.add_argument("--rewrite", nargs=2, metavar=("FILE", "TEXT"),
               help="instead of a failure, worker 0 writes TEXT ('\\n' for new lines) "
                    "into FILE (the discovery script's hosts) at step --at")
args = p.parse_args()

WORKER = int(os.environ["KOLO_ELASTIC_WORKER"])
BATCH = 16

hvd.init()
torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
data = torch.randn(384, 8, generator=g)
labels = (data.sum(1) > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(8, args.width), torch.nn.ReLU(),
                            torch.nn.Linear(args.width, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size()),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(len(data))), seed=2)
state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler, epoch=0, step=0)
after_reset = [False]


def on_reset():
    after_reset[0] = True
    print("worker %d reset: now rank %d of %d, step %d" % (WORKER, hvd.rank(), hvd.size(),
                                                         state.step), flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    first_world = hvd.size() == args.world
    while state.epoch < args.epochs:
        indices = list(state.sampler)
        for b in range(0, len(indices) - BATCH + 1, BATCH):
            if args.rewrite and first_world and WORKER == 0 and state.step == args.at:
                with open(args.rewrite[0], "w") as f:
                    f.write(args.rewrite[1].replace("\\n", "\n") + "\n")
                print("worker 0 rewrote the hosts at step %d" % state.step, flush=True)
            elif (not args.rewrite and first_world and WORKER == args.victim
                  and state.step == args.at):
                if args.raise_:
                    raise ValueError("worker %d gives up at step %d" % (WORKER, state.step))
                print("worker %d kills itself at %.6f" % (WORKER, time.time()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            idx = indices[b:b + BATCH]
            if args.step_sleep:
                time.sleep(args.step_sleep)
            opt.zero_grad()
            F.cross_entropy(model(data[idx]), labels[idx]).backward()
            opt.step()
            if after_reset[0]:
                after_reset[0] = False
                print("worker %d first step after the reset at %.6f" % (WORKER, time.time()),
                      flush=True)
            state.sampler.record_batch(b // BATCH, BATCH)
            state.step += 1
            if state.step % 2 == 0:
                state.commit()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]
print("worker %d done: rank %d of %d, steps %d, params %s" % (
    WORKER, hvd.rank(), hvd.size(), state.step, digest), flush=True)
hvd.shutdown()

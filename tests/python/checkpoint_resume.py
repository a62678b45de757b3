"""A job stopped and resumed from a checkpoint ends bit for bit where an
uninterrupted job ends (issue 18), on 2 ranks with KOLO_DETERMINISTIC=1.

The training uses everything a checkpoint must carry: a model with dropout
(the ranks' torch generators), an ElasticSampler that shuffles (its
position in the epoch), SGD with momentum (the optimizer's state), a
learning-rate schedule, and Python's and NumPy's generators (noise added to
each batch).

  checkpoint_resume.py --steps N --out F                 N steps, parameters to F
  checkpoint_resume.py --steps N --stop-at K --ckpt P    K steps, save to P, exit
  checkpoint_resume.py --steps N --resume P --out F      load P, go on to N steps

tests/python/checkpoint_resume.sh runs the three and compares the files.
"""

import argparse
import random

import numpy
import torch
import torch.nn.functional as F

import kolo.torch as hvd

BATCH = 8


def build():
    torch.manual_seed(1234)
    random.seed(hvd.rank())
    numpy.random.seed(hvd.rank())
    torch.manual_seed(100 + hvd.rank())  # dropout differs per rank
    g = torch.Generator().manual_seed(7)
    data = torch.randn(240, 10, generator=g)
    labels = torch.randint(0, 3, (240,), generator=g)
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(),
                                torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))
    torch.manual_seed(100 + hvd.rank())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)
    sampler = hvd.elastic.ElasticSampler(list(range(len(data))), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler,
                                   scheduler=sched, epoch=0, step=0)
    return state, data, labels


def train(state, data, labels, until):
    while state.step < until:
        indices = list(state.sampler)  # this rank's rest of the epoch
        for b in range(0, len(indices), BATCH):
            if state.step >= until:
                return
            idx = indices[b:b + BATCH]
            x = data[idx] + float(random.random()) * 0.01 + float(numpy.random.rand()) * 0.01
            state.optimizer.zero_grad()
            F.cross_entropy(state.model(x), labels[idx]).backward()
            state.optimizer.step()
            state.scheduler.step()
            state.sampler.record_batch(b // BATCH, len(idx))
            state.step += 1
            if state.sampler.processed_num >= len(data):
                break
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--stop-at", type=int)
    p.add_argument("--ckpt")
    p.add_argument("--resume")
    p.add_argument("--out")
    a = p.parse_args()
    hvd.init()
    state, data, labels = build()
    if a.resume:
        hvd.checkpoint.load(a.resume, state)
        print("rank %d resumed at step %d epoch %d" % (hvd.rank(), state.step, state.epoch))
    train(state, data, labels, a.stop_at if a.stop_at else a.steps)
    if a.stop_at:
        hvd.checkpoint.save(a.ckpt, state)
        print("rank %d saved at step %d" % (hvd.rank(), state.step))
    if a.out and hvd.rank() == 0:
        flat = torch.cat([p.detach().reshape(-1) for p in state.model.parameters()])
        with open(a.out, "w") as f:
            f.write(" ".join(float(v).hex() for v in flat.tolist()) + "\n")
    hvd.shutdown()


if __name__ == "__main__":
    main()

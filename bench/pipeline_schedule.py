"""Measures, per stage of a kolo.torch.pipeline.Pipeline, the idle fraction
of a training step and the peak number of micro-batches whose activations
are held, for GPipe and 1F1B:
    kolorun -np P /usr/bin/python3 bench/pipeline_schedule.py [M] [width]
Idle = the step's wall time minus the stage's forward and backward compute
(Pipeline.events), over the wall time; the theory is (P-1)/(M+P-1). The
peak activation bytes are the largest number of micro-batch graphs held at
once (Pipeline.peak_held) times one micro-batch's saved activations.
Compute-bound: stages of equal cost, small activations. Meaningful only
with one core per rank and nothing else running."""

import sys
import time

import torch

import kolo.torch as kolo
from kolo.torch.pipeline import Pipeline, bubble_fraction

kolo.init()
P = kolo.size()
M = int(sys.argv[1]) if len(sys.argv) > 1 else 8
WIDTH = int(sys.argv[2]) if len(sys.argv) > 2 else 512
torch.set_num_threads(1)
layers = []
for _ in range(P):
    layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
x, y = torch.randn(16 * M, WIDTH), torch.randn(16 * M, WIDTH)
loss_fn = torch.nn.functional.mse_loss
for schedule in ("gpipe", "1f1b"):
    pipe = Pipeline(torch.nn.Sequential(*layers), balance=[2] * P, chunks=M,
                    schedule=schedule)
    pipe.train_step(x, loss_fn, y)  # negotiation, warm-up
    idles, peaks = [], []
    for _ in range(5):
        kolo.barrier()
        t0 = time.perf_counter()
        pipe.train_step(x, loss_fn, y)
        wall = time.perf_counter() - t0
        busy = sum(e - s for k, _, s, e in pipe.events if k in ("forward", "backward"))
        idles.append(1 - busy / wall)
        peaks.append(pipe.peak_held)
    idle = sorted(idles)[len(idles) // 2]
    act_bytes = 16 * WIDTH * 8 * 2  # a micro-batch's Linear input and Tanh output
    print("%s stage %d/%d M %d: idle %.3f (theory %.3f), peak held %d micro-batches "
          "(~%d KiB of activations)" % (schedule, pipe.stage, P, M, idle,
                                        bubble_fraction(P, M), max(peaks),
                                        max(peaks) * act_bytes // 1024), flush=True)

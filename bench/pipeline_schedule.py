"""Measures, per stage of a kolo.torch.pipeline.Pipeline, the idle fraction
of a training step and the peak activation memory, for GPipe and 1F1B:
    kolorun -np P /usr/bin/python3 bench/pipeline_schedule.py [M] [width]
        [--model linear|sleep] [--ms T] [--steps S] [--no-input-grad]

Idle = the step's wall time minus the stage's forward and backward spans
(Pipeline.events), over the step's wall time, which runs from the first
stage's start to the last stage's end (the theory's step; the ranks must
share a host's clock); the theory is (P-1)/(M+P-1) for stages of equal
cost. idle_own_end is the same over the stage's own start to end (the
earlier measurement, too low for the later stages, which finish first).
Parts of the step: waiting for messages (recv), posting them (send),
waiting for the stage's own sends at the end (send_wait). Peak
activations: Pipeline.peak_activation_bytes (bytes, measured) and
peak_held (micro-batches), against GPipe's bound P/M x GPipe + one
micro-batch.

Models (two layers per stage, so every stage costs the same):
- linear: Linear(width, width) + Tanh, micro-batches of 16 rows, one torch
  thread per rank. The batch requires grad, so the first stage computes
  its input's gradient as the other stages do (otherwise its backward is a
  quarter cheaper, and the slower stages idle it for that:
  --no-input-grad shows it). Meaningful
  with one free core per rank.
- sleep: each layer sleeps T ms in its forward and T ms in its backward
  (no computation): the schedule and kolo's messages alone, independent
  of the cores, so more stages than cores can be measured.
Prints one line per schedule and stage (rank order) on rank 0.
"""

import argparse
import time

import torch

import kolo.torch as kolo
from kolo.torch.pipeline import Pipeline, bubble_fraction


class _Sleep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        time.sleep(seconds)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad.clone(), None


class SleepLayer(torch.nn.Module):
    def __init__(self, ms):
        super().__init__()
        self.seconds = ms / 1000.0

    def forward(self, x):
        return _Sleep.apply(x, self.seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("chunks", nargs="?", type=int, default=8)
    ap.add_argument("width", nargs="?", type=int, default=512)
    ap.add_argument("--model", choices=("linear", "sleep"), default="linear")
    ap.add_argument("--ms", type=float, default=5.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--no-input-grad", action="store_true",
                    help="the batch without requires_grad: a cheaper first stage")
    a = ap.parse_args()
    kolo.init()
    P, M = kolo.size(), a.chunks
    torch.set_num_threads(1)
    layers = []
    for _ in range(P):
        if a.model == "linear":
            layers += [torch.nn.Linear(a.width, a.width), torch.nn.Tanh()]
        else:
            layers += [SleepLayer(a.ms), SleepLayer(a.ms)]
    x = torch.randn(16 * M, a.width, requires_grad=not a.no_input_grad)
    y = torch.randn(16 * M, a.width)
    loss_fn = torch.nn.functional.mse_loss
    lines, peaks = [], {}
    for schedule in ("gpipe", "1f1b"):
        pipe = Pipeline(torch.nn.Sequential(*layers), balance=[2] * P, chunks=M,
                        schedule=schedule)
        pipe.train_step(x, loss_fn, y)  # negotiation, warm-up
        rows = []
        for _ in range(a.steps):
            kolo.barrier()
            t0 = time.perf_counter()
            pipe.train_step(x, loss_fn, y)
            t1 = time.perf_counter()
            # The step runs from the first stage's start to the last stage's
            # end (perf_counter: CLOCK_MONOTONIC, one clock for the ranks of
            # a host). A stage's own end is too early a mark: the last stage
            # is done (P-1) backwards before the first.
            ends = kolo.allgather_object((t0, t1))
            wall = max(e for _, e in ends) - min(s for s, _ in ends)
            parts = {k: pipe.trace.busy((k,)) / wall
                     for k in ("recv", "send", "send_wait")}
            busy = pipe.trace.busy()
            rows.append((1 - busy / wall, parts, wall, 1 - busy / (t1 - t0)))
        rows.sort(key=lambda r: r[0])
        idle, parts, wall, own = rows[len(rows) // 2]  # the median step
        peaks[schedule] = pipe.peak_activation_bytes
        mine = [schedule, pipe.stage, idle, own, parts["recv"], parts["send"],
                parts["send_wait"], wall, pipe.peak_held, pipe.peak_activation_bytes]
        lines.append(kolo.allgather_object(mine, name="bench.%s" % schedule))
    # One micro-batch's activations: GPipe's peak over M (each is the same).
    one = peaks["gpipe"] / M
    bound = P / M * peaks["gpipe"] + one
    if kolo.rank() == 0:
        print("P %d M %d model %s (width %d, %s ms), median of %d steps; theory %.3f" %
              (P, M, a.model, a.width, a.ms if a.model == "sleep" else "-", a.steps,
               bubble_fraction(P, M)))
        print("schedule stage idle idle_own_end | recv send send_wait | step_ms "
              "held peak_bytes")
        for per_rank in lines:
            for s, st, idle, own, r, se, sw, wall, held, b in per_rank:
                print("%-5s %d %.3f %.3f | %.3f %.3f %.3f | %.1f %d %d" %
                      (s, st, idle, own, r, se, sw, wall * 1e3, held, b))
    gathered = kolo.allgather_object((peaks, bound), name="bench.peaks")
    if kolo.rank() == 0:
        for st, (pk, bd) in enumerate(gathered):
            print("stage %d: 1F1B peak %d bytes, GPipe %d, bound P/M x GPipe + one "
                  "micro-batch %d: %s" % (st, pk["1f1b"], pk["gpipe"], bd,
                                          "within" if pk["1f1b"] <= bd else "OVER"))


if __name__ == "__main__":
    main()

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
import json
import os
import time

import torch

import kolo.torch as kolo
from kolo.torch.pipeline import Pipeline, bubble_fraction
from kolo.torch.pipeline.schedules import replay
from kolo.torch.pipeline.trace import PHASES


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


def thread_cpu():
    """{thread id: (name, CPU seconds)} of this process's threads (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def costs(events, chunks):
    """Per micro-batch forward and backward seconds of one stage's step."""
    f, b = [0.0] * chunks, [0.0] * chunks
    for kind, m, start, end in events:
        if kind == "forward":
            f[m] += end - start
        elif kind == "backward":
            b[m] += end - start
    return f, b


def measure(pipe, every, schedule, chunks, t0, t1, cpu):
    """One stage's figures of one step; ``every``: each rank's (start, end,
    costs) of the step; ``cpu``: the thread's CPU seconds in the step."""
    # The step runs from the first stage's start to the last stage's end
    # (perf_counter: CLOCK_MONOTONIC, one clock for the ranks of a host),
    # as in the theory, where the first stage's first forward opens the
    # step. The other stages may leave the barrier before it (skew): they
    # wait for its first message then, outside the theory's step.
    # A stage's own end is too early a mark: the last stage is done (P-1)
    # backwards before the first.
    first = every[0][0]
    last = max(e for _, e, _ in every)
    wall = last - first
    busy = pipe.trace.busy()
    f, b = costs(pipe.events, chunks)
    # The same passes, replayed with instant messages: the idle that the
    # schedule and this step's measured costs explain.
    _, ideal = replay(schedule, [c[0] for _, _, c in every], [c[1] for _, _, c in every])
    row = {"idle": 1 - busy / wall, "replay": ideal[pipe.stage], "wall": wall,
           # The earlier window, from the first rank out of the barrier.
           "idle_first_rank": 1 - busy / (last - min(s for s, _, _ in every)),
           "idle_own": 1 - busy / (t1 - t0),
           # Forward and backward time in which the thread did not run.
           "desched": (busy - pipe.trace.cpu_busy()) / wall,
           "f": sum(f) / chunks, "b": sum(b) / chunks, "skew": t0 - first,
           # Time of the stage's own step outside every span (the pipeline's
           # own Python between passes), and the CPU time of it.
           "gap": (t1 - t0 - pipe.trace.busy(tuple(PHASES))) / wall,
           "gap_cpu": (cpu - pipe.trace.cpu_busy(tuple(PHASES))) / wall}
    for k in ("recv", "send", "send_wait"):
        row[k] = pipe.trace.busy((k,)) / wall
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("chunks", nargs="?", type=int, default=8)
    ap.add_argument("width", nargs="?", type=int, default=512)
    ap.add_argument("--model", choices=("linear", "sleep"), default="linear")
    ap.add_argument("--ms", type=float, default=5.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--dump", metavar="PREFIX",
                    help="write every measured step's events to PREFIX.<rank>.json")
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
    lines, peaks, dump = [], {}, {}
    for schedule in ("gpipe", "1f1b"):
        pipe = Pipeline(torch.nn.Sequential(*layers), balance=[2] * P, chunks=M,
                        schedule=schedule)
        pipe.train_step(x, loss_fn, y)  # negotiation, warm-up
        rows, steps = [], []
        cpu0 = thread_cpu()
        for _ in range(a.steps):
            kolo.barrier()
            c0, t0 = time.thread_time(), time.perf_counter()
            pipe.train_step(x, loss_fn, y)
            t1, c1 = time.perf_counter(), time.thread_time()
            every = kolo.allgather_object((t0, t1, costs(pipe.events, M)))
            rows.append(measure(pipe, every, schedule, M, t0, t1, c1 - c0))
            steps.append({"t0": t0, "t1": t1, "events": pipe.events,
                          "cpu": pipe.trace.cpu})
        cpu1 = thread_cpu()
        threads = sorted(((cpu1[t][1] - cpu0.get(t, ("", 0.0))[1]) / a.steps, cpu1[t][0])
                         for t in cpu1)
        threads = [(n, c) for c, n in reversed(threads) if c > 0][:4]
        dump[schedule] = steps
        # The median step by length: the same step on every rank.
        order = sorted(range(len(rows)), key=lambda i: (rows[i]["wall"], i))
        row = rows[order[len(rows) // 2]]
        row.update(schedule=schedule, stage=pipe.stage, held=pipe.peak_held,
                   peak=pipe.peak_activation_bytes, threads=threads)
        peaks[schedule] = pipe.peak_activation_bytes
        lines.append(kolo.allgather_object(row, name="bench.%s" % schedule))
    if a.dump:
        with open("%s.%d.json" % (a.dump, kolo.rank()), "w") as fh:
            json.dump(dump, fh)
    # One micro-batch's activations: GPipe's peak over M (each is the same).
    one = peaks["gpipe"] / M
    bound = P / M * peaks["gpipe"] + one
    if kolo.rank() == 0:
        print("P %d M %d model %s (width %d, %s ms), median of %d steps; theory %.3f" %
              (P, M, a.model, a.width, a.ms if a.model == "sleep" else "-", a.steps,
               bubble_fraction(P, M)))
        print("schedule stage idle replay | from_first_rank own_end | recv send "
              "send_wait gap gap_cpu desched | step_ms F_ms B_ms skew_ms | held "
              "peak_bytes | thread CPU ms per step")
        for per_rank in lines:
            for r in per_rank:
                print("%-5s %d %.3f %.3f | %.3f %.3f | %.3f %.3f %.3f %.3f %.3f %.3f | "
                      "%.1f %.2f %.2f %.2f | %d %d | %s" %
                      (r["schedule"], r["stage"], r["idle"], r["replay"],
                       r["idle_first_rank"], r["idle_own"], r["recv"], r["send"],
                       r["send_wait"], r["gap"], r["gap_cpu"], r["desched"],
                       r["wall"] * 1e3, r["f"] * 1e3,
                       r["b"] * 1e3, r["skew"] * 1e3, r["held"], r["peak"],
                       " ".join("%s:%.1f" % (n, c * 1e3) for n, c in r["threads"])))
    gathered = kolo.allgather_object((peaks, bound), name="bench.peaks")
    if kolo.rank() == 0:
        for st, (pk, bd) in enumerate(gathered):
            print("stage %d: 1F1B peak %d bytes, GPipe %d, bound P/M x GPipe + one "
                  "micro-batch %d: %s" % (st, pk["1f1b"], pk["gpipe"], bd,
                                          "within" if pk["1f1b"] <= bd else "OVER"))


if __name__ == "__main__":
    main()

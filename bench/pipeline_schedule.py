"""Measures, per stage of a kolo.torch.pipeline.Pipeline, the idle fraction
of a training step and the peak activation memory, for GPipe and 1F1B:
    kolorun -np P [--bind-to core] /usr/bin/python3 bench/pipeline_schedule.py [M] [width]
        [--model linear|sleep] [--ms T] [--steps S] [--no-input-grad]
        [--malloc steady|default] [--lost-ms L] [--dump PREFIX]

Idle = the step's wall time minus the stage's forward and backward spans
(Pipeline.events), over the step's wall time, which runs from the first
stage's start to the last stage's end (the theory's step; the ranks must
share a host's clock); the theory is (P-1)/(M+P-1) for stages of equal
cost. Other columns, each a fraction of the step unless named:
- replay: the idle that schedules.replay gives for the step's own
  measured pass times with instant messages (what unequal passes explain;
  idle - replay is what messages and the time between passes add);
- from_first_rank: idle over a step that starts when the first rank
  leaves the barrier (the bench's earlier window: a rank that leaves
  kolo's barrier before the first stage starts (skew_ms, negative) idled
  the first stage for it); own_end: over the stage's own start to end;
- recv (waiting for messages), send (posting them), send_wait (the
  stage's own sends at the end), gap (the stage's own step outside every
  span) and gap_cpu (the thread's CPU time in it);
- desched: time inside the passes when the thread was off the CPU (wall
  minus thread CPU time: other processes ran);
- step_ms, F_ms, B_ms (mean pass), faults (the thread's minor page
  faults in the step), the threads' CPU time per step (/proc).
Steps: the median step by length of all steps ("all") and of the
undisturbed steps ("clean"): those in which no stage's thread was off the
CPU for more than --lost-ms in one pass or outside its passes.

Peak activations: Pipeline.peak_activation_bytes (bytes, measured) and
peak_held (micro-batches), against GPipe's bound P/M x GPipe + one
micro-batch.

Models (two layers per stage, so every stage costs the same):
- linear: Linear(width, width) + Tanh, micro-batches of 16 rows, one torch
  thread per rank. The batch requires grad, so the first stage computes
  its input's gradient as the other stages do (otherwise its backward is a
  quarter cheaper, and the slower stages idle it for that:
  --no-input-grad shows it). --malloc steady (the default) keeps glibc
  from returning freed memory to the kernel (steady_malloc), so that no
  pass pays page faults that others do not. Meaningful with one free core
  per rank; kolorun --bind-to core gives each rank its own core
  (docs/pipeline.md, "CPU binding").
- sleep: each layer sleeps T ms in its forward and T ms in its backward
  (no computation): the schedule and kolo's messages alone, independent
  of the cores, so more stages than cores can be measured.
Prints one line per steps kind, schedule and stage on rank 0.
"""

import argparse
import json
import os
import resource
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


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def steady_malloc():
    """Keeps freed memory in the process (no trimming of the heap, no
    mmap for blocks under 256 MiB), so that a backward pass does not take
    fresh pages from the kernel (a page fault per 4 KiB: about 1000 for a
    1024 x 1024 float32 weight gradient, +1.5-2 ms on this machine) in some
    micro-batches and not in others."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    ok = libc.mallopt(_M_MMAP_THRESHOLD, 256 << 20) and \
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    if not ok:
        raise RuntimeError("mallopt failed")


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


def lost(pipe, wall, cpu):
    """The most time the stage's thread was off the CPU in one pass of the
    step, or in all its time outside the passes."""
    passes = [(e - s) - c for (k, _, s, e), c in zip(pipe.events, pipe.trace.cpu)
              if k in ("forward", "backward")]
    outside = (wall - pipe.trace.busy(tuple(PHASES))) - \
        (cpu - pipe.trace.cpu_busy(tuple(PHASES)))
    return max(passes + [outside])


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
    last = max(e for _, e, _, _ in every)
    wall = last - first
    busy = pipe.trace.busy()
    f, b = costs(pipe.events, chunks)
    # The same passes, replayed with instant messages: the idle that the
    # schedule and this step's measured costs explain.
    _, ideal = replay(schedule, [c[0] for _, _, c, _ in every],
                      [c[1] for _, _, c, _ in every])
    row = {"idle": 1 - busy / wall, "replay": ideal[pipe.stage], "wall": wall,
           # The earlier window, from the first rank out of the barrier.
           "idle_first_rank": 1 - busy / (last - min(s for s, _, _, _ in every)),
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
    ap.add_argument("--lost-ms", type=float, default=1.0,
                    help="a step is undisturbed when no stage lost the CPU for "
                         "more than this in one pass (or outside its passes)")
    ap.add_argument("--malloc", choices=("steady", "default"), default="steady",
                    help="steady: glibc keeps freed memory (steady_malloc); "
                         "default: glibc's own trimming and mmap threshold")
    ap.add_argument("--dump", metavar="PREFIX",
                    help="write every measured step's events to PREFIX.<rank>.json")
    ap.add_argument("--no-input-grad", action="store_true",
                    help="the batch without requires_grad: a cheaper first stage")
    a = ap.parse_args()
    if a.malloc == "steady":
        steady_malloc()
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
            f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            c0, t0 = time.thread_time(), time.perf_counter()
            pipe.train_step(x, loss_fn, y)
            t1, c1 = time.perf_counter(), time.thread_time()
            faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
            every = kolo.allgather_object((t0, t1, costs(pipe.events, M),
                                           lost(pipe, t1 - t0, c1 - c0)))
            rows.append(measure(pipe, every, schedule, M, t0, t1, c1 - c0))
            rows[-1]["faults"] = faults
            # Undisturbed: no stage lost the CPU for more than --lost-ms at
            # once in a pass, or in all its time between passes.
            # (A sleep is off the CPU by design: no such steps there.)
            rows[-1]["clean"] = a.model == "linear" and all(
                l <= a.lost_ms / 1e3 for _, _, _, l in every)
            steps.append({"t0": t0, "t1": t1, "events": pipe.events,
                          "cpu": pipe.trace.cpu})
        cpu1 = thread_cpu()
        threads = sorted(((cpu1[t][1] - cpu0.get(t, ("", 0.0))[1]) / a.steps, cpu1[t][0])
                         for t in cpu1)
        threads = [(n, c) for c, n in reversed(threads) if c > 0][:4]
        dump[schedule] = steps
        # The median step by length: the same step on every rank.
        # The median step by length (the same step on every rank), of all
        # steps and of the undisturbed ones.
        picked = []
        for which in ("all", "clean"):
            some = [i for i in range(len(rows)) if which == "all" or rows[i]["clean"]]
            if not some:
                continue
            some.sort(key=lambda i: (rows[i]["wall"], i))
            row = dict(rows[some[len(some) // 2]], steps="%s %d" % (which, len(some)))
            row.update(schedule=schedule, stage=pipe.stage, held=pipe.peak_held,
                       peak=pipe.peak_activation_bytes, threads=threads)
            picked.append(row)
        peaks[schedule] = pipe.peak_activation_bytes
        lines.append(kolo.allgather_object(picked, name="bench.%s" % schedule))
    if a.dump:
        with open("%s.%d.json" % (a.dump, kolo.rank()), "w") as fh:
            json.dump(dump, fh)
    # One micro-batch's activations: GPipe's peak over M (each is the same).
    one = peaks["gpipe"] / M
    bound = P / M * peaks["gpipe"] + one
    if kolo.rank() == 0:
        print("P %d M %d model %s (width %d, %s ms), malloc %s, median of %d steps; "
              "theory %.3f" % (P, M, a.model, a.width, a.ms if a.model == "sleep" else "-",
                               a.malloc, a.steps, bubble_fraction(P, M)))
        print("steps schedule stage idle replay | from_first_rank own_end | recv send "
              "send_wait gap gap_cpu desched | step_ms F_ms B_ms skew_ms faults | "
              "held peak_bytes | thread CPU ms per step")
        for per_rank in lines:
            for r in sorted((r for rs in per_rank for r in rs),
                            key=lambda r: (r["steps"][0], r["stage"])):
                print("%-8s %-5s %d %.3f %.3f | %.3f %.3f | %.3f %.3f %.3f %.3f %.3f %.3f | "
                      "%.1f %.2f %.2f %.2f %d | %d %d | %s" %
                      (r["steps"], r["schedule"], r["stage"], r["idle"], r["replay"],
                       r["idle_first_rank"], r["idle_own"], r["recv"], r["send"],
                       r["send_wait"], r["gap"], r["gap_cpu"], r["desched"],
                       r["wall"] * 1e3, r["f"] * 1e3,
                       r["b"] * 1e3, r["skew"] * 1e3, r["faults"], r["held"], r["peak"],
                       " ".join("%s:%.1f" % (n, c * 1e3) for n, c in r["threads"])))
    gathered = kolo.allgather_object((peaks, bound), name="bench.peaks")
    if kolo.rank() == 0:
        for st, (pk, bd) in enumerate(gathered):
            print("stage %d: 1F1B peak %d bytes, GPipe %d, bound P/M x GPipe + one "
                  "micro-batch %d: %s" % (st, pk["1f1b"], pk["gpipe"], bd,
                                          "within" if pk["1f1b"] <= bd else "OVER"))


if __name__ == "__main__":
    main()

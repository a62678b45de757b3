"""The order in which one pipeline stage runs its micro-batches' forward
(``("F", m)``) and backward (``("B", m)``) passes; pure functions.

With P stages and M micro-batches, stage s (0-based):

- GPipe: every forward, then every backward, both in micro-batch order
  (0..M-1). Peak activations held: M micro-batches.
- 1F1B (PipeDream-flush): ``w = min(P - s - 1, M)`` warm-up forwards, then
  one forward and one backward alternately, then the remaining backwards.
  Backwards run in micro-batch order too; peak activations held: w + 1.

Both run the backwards of a stage in micro-batch order, so parameter
gradients accumulate in the same order under either schedule (and as an
unpipelined loop over the same micro-batches): the schedules give the same
gradients bit for bit. Both idle a stage for the same (P - 1) slots of the
M + P - 1 (the bubble): the idle fraction (P - 1) / (M + P - 1) when a
forward and a backward take the same time on every stage.
"""

SCHEDULES = ("gpipe", "1f1b")


def gpipe(stage, stages, chunks):
    return [("F", m) for m in range(chunks)] + [("B", m) for m in range(chunks)]


def one_f_one_b(stage, stages, chunks):
    warmup = min(stages - stage - 1, chunks)
    order = [("F", m) for m in range(warmup)]
    f, b = warmup, 0
    while f < chunks:
        order.append(("F", f))
        order.append(("B", b))
        f += 1
        b += 1
    order += [("B", m) for m in range(b, chunks)]
    return order


def order(schedule, stage, stages, chunks):
    """The list of ("F"|"B", micro-batch) steps of ``stage``."""
    return {"gpipe": gpipe, "1f1b": one_f_one_b}[schedule](stage, stages, chunks)


def bubble_fraction(stages, chunks):
    """The schedules' idle fraction of a stage: (P - 1) / (M + P - 1)."""
    return (stages - 1) / float(chunks + stages - 1)

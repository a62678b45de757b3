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

``replay`` runs a schedule on given per-stage, per-micro-batch costs with
messages that take no time: the idle each stage would have from the
schedule and the costs alone, so a measured step can be split into what
its unequal work explains and what the messages and the machine add.
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


def replay(schedule, forward, backward):
    """Replays ``schedule`` with ``forward[s][m]`` and ``backward[s][m]``
    seconds for stage s's pass of micro-batch m (P lists of M) and messages
    that take no time: each pass starts when the stage's previous pass has
    ended and its input is there (forward: the previous stage's forward of
    m; backward: the next stage's backward of m). Returns (step, idle): the
    step's length (every stage starts at 0) and each stage's idle fraction
    1 - (its passes' time) / step. With every cost equal, idle is
    bubble_fraction(P, M) for every stage."""
    stages, chunks = len(forward), len(forward[0])
    if len(backward) != stages or any(
            len(f) != chunks or len(b) != chunks for f, b in zip(forward, backward)):
        raise ValueError("replay: forward and backward need %d lists of %d costs" %
                         (stages, chunks))
    orders = [order(schedule, s, stages, chunks) for s in range(stages)]
    done = {}  # ("F"|"B", stage, m) -> end time
    clock = [0.0] * stages
    nxt = [0] * stages
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for s in range(stages):
            while nxt[s] < len(orders[s]):
                kind, m = orders[s][nxt[s]]
                if kind == "F":
                    dep = ("F", s - 1, m) if s > 0 else None
                    cost = forward[s][m]
                else:
                    dep = ("B", s + 1, m) if s < stages - 1 else None
                    cost = backward[s][m]
                if dep is not None and dep not in done:
                    break
                start = max(clock[s], done[dep] if dep is not None else 0.0)
                clock[s] = start + cost
                done[(kind, s, m)] = clock[s]
                nxt[s] += 1
                left -= 1
                moved = True
        if not moved:  # cannot happen for the schedules above
            raise RuntimeError("replay: schedule %r deadlocks" % schedule)
    step = max(clock)
    busy = [sum(forward[s]) + sum(backward[s]) for s in range(stages)]
    return step, [1.0 - b / step if step > 0 else 0.0 for b in busy]

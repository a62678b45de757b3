"""Progress and summaries of a study: the final table and team utilisation.

A snapshot (owner.StudyOwner.snapshot) holds the study's trials and this
job's ``finished`` records: (number, team, start, end, state, value).
"""

import time


def utilisation(snapshot, end=None):
    """{team: busy fraction}: the time each team spent in trials of this job
    over the time from the job's start to its last trial's end."""
    finished = snapshot.get("finished") or []
    if not finished:
        return {}
    t0 = snapshot["t0"]
    end = end or max(f[3] for f in finished)
    span = max(end - t0, 1e-9)
    busy = {}
    for _, team, start, stop, _, _ in finished:
        busy[team] = busy.get(team, 0.0) + (stop - start)
    return {team: b / span for team, b in sorted(busy.items())}


def print_table(snapshot, log):
    """The final table: one row per trial of the study, then utilisation."""
    trials = snapshot["trials"]
    names = sorted({k for t in trials for k in t.params})
    log("kolo.hpo: %d trial(s)" % len(trials))
    head = ["trial", "state", "value", "seconds"] + names
    log("  " + "  ".join("%-10s" % h for h in head))
    for t in trials:
        secs = t.duration.total_seconds() if t.duration is not None else float("nan")
        row = [str(t.number), t.state.name, "-" if t.value is None else "%.5g" % t.value,
               "%.1f" % secs]
        row += [_fmt(t.params.get(n, "")) for n in names]
        log("  " + "  ".join("%-10s" % c for c in row))
    for team, u in utilisation(snapshot, time.time()).items():
        log("kolo.hpo: team %d busy %.1f%% of the study's time" % (team, 100 * u))


def _fmt(v):
    return "%.4g" % v if isinstance(v, float) else str(v)

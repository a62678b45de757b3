"""PNG plots of a study and of a PBT lineage (matplotlib, Agg backend).

- ``study_plots(trials, outdir, direction)``: objective_vs_trial.png (each
  complete trial's value and the best so far, by trial number and by
  wall-clock from the first trial's start; pruned trials marked at their
  last reported value), parallel_coordinates.png (every complete trial as
  a line through its parameters, scaled to [0, 1] per parameter, on a
  log scale where the parameter's distribution is, coloured by its value).
- ``lineage_plot(lineage, path)``: each member's score against step; a
  segment is dashed, and starts at the other member's point, where the
  member went on from another member's weights.
"""

import math
import os


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def study_plots(trials, outdir, direction="maximize"):
    """Writes the study's plots into ``outdir``; returns their paths."""
    plt = _plt()
    done = [t for t in trials if t.state.name == "COMPLETE"]
    pruned = [t for t in trials if t.state.name == "PRUNED" and t.intermediate_values]
    if not done:
        return []
    t0 = min(t.datetime_start for t in trials if t.datetime_start is not None)
    better = max if direction == "maximize" else min
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, x_of, label in ((axes[0], lambda t: t.number, "trial number"),
                            (axes[1], lambda t: (t.datetime_complete - t0).total_seconds(),
                             "wall-clock (s)")):
        order = sorted(done, key=x_of)
        ax.scatter([x_of(t) for t in order], [t.value for t in order], s=18,
                   label="complete")
        if pruned:
            ax.scatter([x_of(t) for t in pruned],
                       [t.intermediate_values[max(t.intermediate_values)] for t in pruned],
                       marker="x", s=18, label="pruned (last value)")
        best, run = [], None
        for t in order:
            run = t.value if run is None else better(run, t.value)
            best.append(run)
        ax.step([x_of(t) for t in order], best, where="post", color="C3", label="best so far")
        ax.set_xlabel(label)
        ax.set_ylabel("objective")
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths = [os.path.join(outdir, "objective_vs_trial.png")]
    fig.savefig(paths[0], dpi=100)
    plt.close(fig)

    names = sorted({k for t in done for k in t.params})
    if names:
        fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 4))
        values = [t.value for t in done]
        lo, hi = min(values), max(values)
        cmap = plt.get_cmap("viridis")
        columns = {}
        for n in names:
            raw = [t.params.get(n) for t in done]
            if all(isinstance(v, (int, float)) for v in raw if v is not None):
                log = any(getattr(t.distributions.get(n), "log", False) for t in done)
                f = math.log if log and min(v for v in raw if v is not None) > 0 else float
                vs = [f(v) for v in raw if v is not None]
                a, b = min(vs), max(vs)
                columns[n] = lambda v, a=a, b=b, f=f: 0.5 if b == a else (f(v) - a) / (b - a)
            else:
                levels = sorted({str(v) for v in raw})
                columns[n] = lambda v, levels=levels: levels.index(str(v)) / max(
                    1, len(levels) - 1)
        for t in sorted(done, key=lambda t: t.value):
            ys = [columns[n](t.params[n]) if n in t.params else float("nan") for n in names]
            ax.plot(range(len(names)), ys, color=cmap((t.value - lo) / ((hi - lo) or 1)),
                    alpha=0.8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        ax.set_ylabel("value, scaled per parameter")
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(lo, hi))
        fig.colorbar(sm, ax=ax, label="objective")
        fig.tight_layout()
        paths.append(os.path.join(outdir, "parallel_coordinates.png"))
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths


def lineage_plot(lineage, path, x="step"):
    """Writes the PBT lineage plot to ``path``; returns it. ``x``: the
    history key on the horizontal axis ("step" or "time")."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    by_member = {m["member"]: m["history"] for m in lineage}
    for m, hist in sorted(by_member.items()):
        color = "C%d" % (m % 10)
        ax.plot([h[x] for h in hist], [h["score"] for h in hist], ls="", marker="o", ms=3,
                color=color, label="member %d" % m)
        for i in range(len(hist) - 1):
            parent = hist[i].get("parent")
            if parent is None:  # the member trained on from its own state
                ax.plot([hist[i][x], hist[i + 1][x]], [hist[i]["score"], hist[i + 1]["score"]],
                        color=color)
            else:  # it went on from the parent's state at step i
                start = by_member[parent][i]
                ax.plot([start[x], hist[i + 1][x]], [start["score"], hist[i + 1]["score"]],
                        ls="--", lw=1, color=color)
    ax.set_xlabel(x)
    ax.set_ylabel("score")
    ax.set_title("PBT lineage (dashed: took the weights of another member)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

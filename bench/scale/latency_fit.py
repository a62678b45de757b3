#!/usr/bin/python3
"""How the latency term grows with the rank count (bench/scale/
latency_growth.sh's CSV): per algorithm and size, least-squares fits of the
time t(p) on p ranks against the model's step count of the algorithm:

    ring   2 (p - 1) steps      (reduce-scatter + allgather around the ring)
    rhd    2 log2(p) steps      (halving, then doubling; + 2 for a p that
                                 is not a power of two: the fold-in/out)
    tree   2 ceil(log2(p)) steps (reduce up a binomial tree, broadcast down)

plus, for every algorithm, the p - 1 steps of Communicator::allreduce's
descriptor exchange (a ring allgather of 32 bytes before each call, which
kolo-bench's calls pay; --no-agreement leaves it out). With --cores C (the
ranks share C cores, as 64 ranks share this machine's 2) a step costs
max(1, p / C) times as much: every rank's work of a step waits for its
turn on a core, the model's oversubscription factor.

t(p) = a + alpha * steps(p): alpha is the measured cost of one step. A
model whose latency term is right gives a good fit (R^2 near 1) with
a steps law and a constant cost per step: for the log-p algorithms the
cost per added log2(p) is then flat, and the ring grows linearly in p.
Printed beside it: the fit against the other law (log2(p) for the ring,
p for rhd and tree), so the report shows which growth the data follow, and
the cost per doubling of p, (t(2p) - t(p)), for each p.

    /usr/bin/python3 bench/scale/latency_fit.py latency.csv [--json out.json]
        [--md out.md] [--png out.png] [--no-agreement]
        [--predict build/bin/kolo-predict [--constants F] [--predict-args
         '--cores 2']]

With --predict, every point is also predicted by `kolo-predict allreduce
--ranks p --ranks-per-host p --transport tcp --bytes B --algorithm A
--json` (and --predict-args), printed beside the measured times with the
fit of the measured against the predicted growth.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measurements  # noqa: E402


def steps(algorithm, p, agreement=True):
    """The model's number of sequential message steps of one allreduce
    (with the descriptor exchange's p - 1 when AGREEMENT)."""
    if p <= 1:
        return 0
    if agreement:
        return steps(algorithm, p, False) + (p - 1)
    lg = math.log2(p)
    if algorithm == "ring":
        return 2 * (p - 1)
    if algorithm == "rhd":
        k = int(math.floor(lg))
        return 2 * k + (0 if (1 << k) == p else 2)
    if algorithm == "tree":
        return 2 * int(math.ceil(lg))
    raise ValueError("no step count for algorithm %r" % algorithm)


def other_law(algorithm, p):
    """The competing growth: log2(p) for the ring, p for the log-p ones."""
    return math.log2(p) if algorithm == "ring" else float(p)


def fit_line(xs, ys):
    """Least squares y = a + b x: (a, b, r2)."""
    n = len(xs)
    if n < 2:
        raise ValueError("a fit needs two points or more, got %d" % n)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all x equal: no slope to fit")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return a, b, r2


def analyse(rows, agreement=True, cores=0):
    """Per (algorithm, bytes): the points, both fits and the cost per doubling.
    CORES > 0: a step costs max(1, p / CORES) times as much."""
    groups = {}
    for r in rows:
        p = r["hosts"] * r["ranks_per_host"]
        groups.setdefault((r["algorithm"], r["bytes"]), {})[p] = r["seconds"]
    out = []
    for (alg, nbytes), pts in sorted(groups.items()):
        ps = sorted(pts)
        if len(ps) < 3:
            continue
        ts = [pts[p] for p in ps]
        st = [steps(alg, p, agreement) * (max(1.0, p / cores) if cores > 0 else 1.0)
              for p in ps]
        a, alpha, r2 = fit_line(st, ts)
        a2, b2, r2_other = fit_line([other_law(alg, p) for p in ps], ts)
        per_doubling = {}
        for p in ps:
            if 2 * p in pts:
                per_doubling[p] = pts[2 * p] - pts[p]
        out.append({"algorithm": alg, "bytes": nbytes, "ranks": ps, "seconds": ts,
                    "steps": st, "intercept": a,
                    "per_step": alpha, "r2": r2, "other_law": "log2(p)" if alg == "ring"
                    else "p", "other_slope": b2, "other_r2": r2_other,
                    "per_doubling": per_doubling})
    return out


def add_model(fits, predict, constants, extra):
    """Each fit gets "model": kolo-predict's seconds per rank count."""
    import report
    for f in fits:
        f["model"] = []
        for p in f["ranks"]:
            row = {"transport": "tcp", "hosts": 1, "ranks_per_host": p, "link_bps": 0,
                   "algorithm": f["algorithm"], "bytes": f["bytes"]}
            f["model"].append(report.predict_allreduce(predict, constants, row, "0us", extra))


def markdown(fits):
    model = any("model" in f for f in fits)
    lines = ["| algorithm | size | ranks | time (us) | %sper step (us) | R^2 steps law "
             "| R^2 other law | per doubling of p (us) |" % ("model (us) | " if model else ""),
             "| --- | ---: | --- | --- | %s---: | ---: | ---: | --- |" % ("--- | " if model else "")]
    for f in fits:
        lines.append("| %s | %d B | %s | %s | %s%.1f | %.3f | %.3f (%s) | %s |" % (
            f["algorithm"], f["bytes"], ",".join(map(str, f["ranks"])),
            ", ".join("%.0f" % (t * 1e6) for t in f["seconds"]),
            (", ".join("%.0f" % (t * 1e6) for t in f["model"]) + " | ") if model else "",
            f["per_step"] * 1e6, f["r2"], f["other_r2"], f["other_law"],
            ", ".join("%d->%d: %.0f" % (p, 2 * p, d * 1e6)
                      for p, d in sorted(f["per_doubling"].items()))))
    return "\n".join(lines) + "\n"


def plot(fits, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    algs = sorted({f["algorithm"] for f in fits})
    fig, axes = plt.subplots(1, len(algs), figsize=(4.2 * len(algs), 3.8), squeeze=False)
    for ax, alg in zip(axes[0], algs):
        for f in (f for f in fits if f["algorithm"] == alg):
            line, = ax.plot(f["ranks"], [t * 1e6 for t in f["seconds"]], "o",
                            label="%d B" % f["bytes"])
            fit = [(p, (f["intercept"] + f["per_step"] * s) * 1e6)
                   for p, s in zip(f["ranks"], f["steps"])]
            fit = [(p, t) for p, t in fit if t > 0]  # a log axis
            ax.plot([p for p, _ in fit], [t for _, t in fit], "-", color=line.get_color(),
                    lw=0.8)
            if "model" in f:
                ax.plot(f["ranks"], [t * 1e6 for t in f["model"]], ":",
                        color=line.get_color(), lw=1.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (one host, tcp loopback, 2 cores)")
        ax.set_ylabel("allreduce time (us)")
        ax.set_title("%s: points measured, lines a + alpha x steps(p)%s" % (
            alg, ", dotted kolo-predict" if any("model" in f for f in fits) else ""),
            fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--png")
    ap.add_argument("--no-agreement", action="store_true",
                    help="leave the descriptor exchange's p - 1 steps out of the step count")
    ap.add_argument("--cores", type=int, default=0,
                    help="cores the ranks share (a step costs max(1, p / cores) times more)")
    ap.add_argument("--predict", help="kolo-predict, for the model's times")
    ap.add_argument("--constants")
    ap.add_argument("--predict-args", default="")
    a = ap.parse_args(argv)
    try:
        fits = analyse(measurements.read_rows(a.csv), not a.no_agreement, a.cores)
        if a.predict:
            add_model(fits, a.predict, a.constants, a.predict_args.split())
    except (OSError, ValueError, RuntimeError) as e:
        print("latency_fit.py: %s" % e, file=sys.stderr)
        return 2
    if not fits:
        print("latency_fit.py: %s: no algorithm and size measured on 3 rank counts or more"
              % a.csv, file=sys.stderr)
        return 2
    text = markdown(fits)
    print(text, end="")
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(fits, f, indent=1)
    if a.png:
        plot(fits, a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())

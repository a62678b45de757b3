"""Draws predicted scaling efficiency against the rank count
(``kolo-predict train --plot out.png``, ``kolo.predict.plot_curve``).

Input: a JSON file ``{"title": str, "series": [{"label": str, "ranks":
[int, ...], "efficiency": [float, ...]}, ...]}``; output: a PNG, ranks on a
log2 axis, efficiency in percent. Uses matplotlib (Debian:
python3-matplotlib) with the Agg backend, so no display is needed.

Run as a program: ``python3 plot.py data.json out.png``; errors go to
stderr with exit status 2. Imports nothing of kolo.
"""

import json
import sys


def plot_series(series, out, title=""):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError(
            f"plotting needs matplotlib in {sys.executable} (apt-get install "
            f"python3-matplotlib): {e}") from e
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for s in series:
        if len(s["ranks"]) != len(s["efficiency"]):
            raise ValueError(f"series {s['label']!r}: {len(s['ranks'])} rank counts but "
                             f"{len(s['efficiency'])} efficiencies")
        ax.plot(s["ranks"], [100.0 * e for e in s["efficiency"]], marker="o", markersize=3,
                label=s["label"])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("predicted scaling efficiency (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, which="major", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: plot.py data.json out.png", file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            data = json.load(f)
        plot_series(data["series"], argv[1], data.get("title", ""))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        print(f"kolo-predict: plot: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

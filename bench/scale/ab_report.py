#!/usr/bin/python3
"""The selection A/B's table (bench/scale/selection_ab.sh's ab.csv): per
setting and size, the algorithm each build chose and the median over the
rounds of A's time / B's time in the same round (below 1: A faster), with
the range of the per-round ratios.

    /usr/bin/python3 bench/scale/ab_report.py ab.csv
"""

import csv
import statistics
import sys


def ratios(rows):
    """{(setting, bytes): {"A": algos, "B": algos, "ratios": [A/B per round]}}."""
    t = {}
    for r in rows:
        t[(r["setting"], int(r["bytes"]), r["round"], r["build"])] = (
            float(r["seconds"]), r["algorithm"])
    out = {}
    for (setting, nbytes, rnd, build), (secs, alg) in t.items():
        e = out.setdefault((setting, nbytes), {"A": set(), "B": set(), "ratios": []})
        e[build].add(alg)
        if build == "A" and (setting, nbytes, rnd, "B") in t:
            e["ratios"].append(secs / t[(setting, nbytes, rnd, "B")][0])
    return out


def fmt_bytes(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d %s" % (n // scale, unit)
    return "%d B" % n


def markdown(table):
    lines = ["| setting | size | A chose | B chose | A / B (median) | range | rounds |",
             "| --- | ---: | --- | --- | ---: | --- | ---: |"]
    for (setting, nbytes) in sorted(table):
        e = table[(setting, nbytes)]
        rs = e["ratios"]
        med = "%.2f" % statistics.median(rs) if rs else "-"
        rng = "%.2f-%.2f" % (min(rs), max(rs)) if rs else "-"
        lines.append("| %s | %s | %s | %s | %s | %s | %d |" % (
            setting, fmt_bytes(nbytes), "/".join(sorted(e["A"])), "/".join(sorted(e["B"])),
            med, rng, len(rs)))
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.stderr.write("ab_report.py: %s has no rows\n" % argv[1])
        return 1
    sys.stdout.write(markdown(ratios(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

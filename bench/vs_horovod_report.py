"""The tables and the plot of bench/vs_horovod.sh from its results file
("PART KEY ROUND VALUE" lines): medians over the rounds, kolo's ratio to
each Horovod configuration, and each of the issue's goals met or missed.

    python3 bench/vs_horovod_report.py results.txt [--plot out.png]
"""

import argparse
import collections
import math
import statistics


def load(path):
    runs = collections.defaultdict(list)
    for line in open(path):
        part, key, _round, value = line.split()
        v = float(value)
        if not math.isnan(v):
            runs[(part, key)].append(v)
    return runs


def med(runs, part, key):
    values = runs.get((part, key))
    return statistics.median(values) if values else None


def span(runs, part, key):
    values = runs.get((part, key)) or [float("nan")]
    return "%s-%s" % (fmt(min(values)), fmt(max(values)))


def fmt(v):
    if v is None or math.isnan(v):
        return "-"
    return "%.0f" % v if v >= 100 else "%.1f" % v if v >= 10 else "%.2f" % v


def goal(text, ok):
    return "%s: %s" % (text, "met" if ok else "MISSED")


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return "%d %s" % (nbytes // scale, unit)
    return "%d B" % nbytes


def allreduce_table(runs, goals, part="allreduce"):
    sizes = sorted({int(k.split(":")[1]) for (p, k) in runs if p == part})
    if not sizes:
        return
    call = "hvd.allreduce_ (in place)" if part == "allreduce_inplace" else "hvd.allreduce"
    print("### %s, float32, 2 ranks of one host: median µs per call (median of the "
          "rounds' medians; range over rounds)\n" % call)
    print("| size | Horovod + Gloo | Horovod + MPI | kolo | Gloo / kolo | MPI / kolo |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        g, m, k = (med(runs, part, "%s:%d" % (p, n))
                   for p in ("horovod-gloo", "horovod-mpi", "kolo"))
        row = [human(n)] + ["%s (%s)" % (fmt(v), span(runs, part, "%s:%d" % (p, n)))
                            for v, p in ((g, "horovod-gloo"), (m, "horovod-mpi"), (k, "kolo"))]
        row += ["%.2fx" % (g / k) if g and k else "-", "%.2fx" % (m / k) if m and k else "-"]
        print("| " + " | ".join(row) + " |")
        if part != "allreduce":
            continue
        if n == 8 and g and m and k:
            goals.append(goal("8 B latency at most a tenth of Horovod's (%.1f%% of Gloo's, %.1f%% "
                              "of MPI's)" % (100 * k / g, 100 * k / m), k <= 0.1 * min(g, m)))
        if n == 64 << 20 and g and m and k:
            goals.append(goal("64 MiB: at least 2x Horovod-MPI (%.2fx) and 2.5x Horovod-Gloo "
                              "(%.2fx)" % (m / k, g / k), m / k >= 2 and g / k >= 2.5))
    print()


def synthetic_table(runs, part, title, goals):
    """Horovod's configurations of PART (horovod = its default controller,
    horovod-gloo = Gloo), kolo, and on one host the ceiling; the goals are
    against the faster Horovod."""
    models = sorted({k.split(":")[1] for (p, k) in runs if p == part and "." not in k})
    if not models:
        return
    peers = [p for p in ("horovod", "horovod-gloo")
             if any(k.startswith(p + ":") for (q, k) in runs if q == part)]
    names = {"horovod": "Horovod + MPI" if part == "synthetic" else "Horovod + Gloo",
             "horovod-gloo": "Horovod + Gloo"}
    ceiling = part == "synthetic"
    print("### %s\n" % title)
    head = ["model"] + [names[p] + " img/s" for p in peers] + ["kolo img/s", "kolo / best Horovod"]
    if ceiling:
        head += ["ceiling img/s", "kolo / ceiling"]
    head += ["CPU s per run, main / other threads: " + names[p] for p in peers] + ["kolo"]
    print("| " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * (len(head) - 1))
    for model in models:
        k = med(runs, part, "kolo:" + model)
        hs = {p: med(runs, part, "%s:%s" % (p, model)) for p in peers}
        best = max((h for h in hs.values() if h), default=None)
        row = [model] + ["%s (%s)" % (fmt(hs[p]), span(runs, part, "%s:%s" % (p, model)))
                         for p in peers]
        row += ["%s (%s)" % (fmt(k), span(runs, part, "kolo:" + model)),
                "%.2fx" % (k / best) if best and k else "-"]
        if ceiling:
            c = med(runs, part, "ceiling:" + model)
            row += ["%s (%s)" % (fmt(c), span(runs, part, "ceiling:" + model)),
                    "%.3f" % (k / c) if c and k else "-"]
            if c and k:
                goals.append(goal("%s, one host: within 5%% of the ceiling (%.3f)" % (model, k / c),
                                  k / c >= 0.95))
        for lib in peers + ["kolo"]:
            row.append("%s / %s" % (fmt(med(runs, part, "%s:%s.main_cpu" % (lib, model))),
                                    fmt(med(runs, part, "%s:%s.other_cpu" % (lib, model)))))
        print("| " + " | ".join(row) + " |")
        if best and k:
            where = "one host" if ceiling else "2 netns hosts"
            goals.append(goal("%s, %s: at least 1.5x Horovod's faster controller (%.2fx)" %
                              (model, where, k / best), k / best >= 1.5))
    print()


def elastic_table(runs, goals):
    h, k = med(runs, "elastic", "horovod"), med(runs, "elastic", "kolo")
    if h is None and k is None:
        return
    print("### Elastic: a rank SIGKILLed, 2 netns hosts x 2 ranks, seconds from the kill to the "
          "survivors' next completed step\n")
    print("| Horovod elastic | kolo | Horovod / kolo |")
    print("| ---: | ---: | ---: |")
    print("| %s (%s, %d rounds) | %s (%s, %d rounds) | %s |" % (
        fmt(h), span(runs, "elastic", "horovod"), len(runs.get(("elastic", "horovod"), [])),
        fmt(k), span(runs, "elastic", "kolo"), len(runs.get(("elastic", "kolo"), [])),
        "%.1fx" % (h / k) if h and k else "-"))
    print()
    if h and k:
        goals.append(goal("elastic recovery at most half of Horovod's (%.2f of it)" % (k / h),
                          k <= 0.5 * h))


def binding_table(runs):
    """The binding part: kolo and the ceiling unbound and bound to cores."""
    models = sorted({k.split(":")[1] for (p, k) in runs if p == "binding" and "." not in k})
    if not models:
        return
    print("### CPU binding: kolo (2 ranks) and the ceiling (two 1-rank runs), img/s, "
          "unbound and bound (kolorun --bind-to core; the ceiling's runs one core each)\n")
    print("| model | kolo unbound | ceiling unbound | kolo / ceiling | kolo bound | "
          "ceiling bound | kolo / ceiling | kolo bound / ceiling unbound | rounds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model in models:
        row, values = [model], {}
        for bind in ("none", "core"):
            for lib in ("kolo", "ceiling"):
                key = "%s-%s:%s" % (lib, bind, model)
                values[key] = med(runs, "binding", key)
                row.append("%s (%s)" % (fmt(values[key]), span(runs, "binding", key)))
            k, c = values["kolo-%s:%s" % (bind, model)], values["ceiling-%s:%s" % (bind, model)]
            row.append("%.3f" % (k / c) if k and c else "-")
        k, c = values["kolo-core:" + model], values["ceiling-none:" + model]
        row.append("%.3f" % (k / c) if k and c else "-")
        row.append(str(len(runs.get(("binding", "kolo-core:" + model), []))))
        print("| " + " | ".join(row) + " |")
    print()


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    sizes = sorted({int(k.split(":")[1]) for (p, k) in runs if p == "allreduce"})
    colors = {"horovod-gloo": "tab:blue", "horovod-mpi": "tab:orange", "kolo": "tab:green"}
    for part, suffix, line in (("allreduce", "", "-"), ("allreduce_inplace", ", in place", ":")):
        for peer, marker in (("horovod-gloo", "s"), ("horovod-mpi", "^"), ("kolo", "o")):
            ys = [med(runs, part, "%s:%d" % (peer, n)) for n in sizes]
            if any(ys):
                a.loglog(sizes, [y / 1e3 if y else float("nan") for y in ys], marker + line,
                         color=colors[peer], label=peer + suffix)
    a.set_xlabel("bytes (float32)")
    a.set_ylabel("ms per hvd.allreduce (median)")
    a.set_title("allreduce, 2 ranks of one host")
    a.legend()
    a.grid(True, which="both", alpha=0.3)
    labels, ratios = [], []
    for part, where in (("synthetic", "1 host"), ("netns", "2 hosts, 1 Gbit/s")):
        for model in sorted({k.split(":")[1] for (p, k) in runs if p == part and "." not in k}):
            k = med(runs, part, "kolo:" + model)
            h = max((med(runs, part, "%s:%s" % (p, model)) or 0) for p in ("horovod", "horovod-gloo"))
            if h and k:
                labels.append("%s\n%s" % (model, where))
                ratios.append(k / h)
    h, k = med(runs, "elastic", "horovod"), med(runs, "elastic", "kolo")
    if h and k:
        labels.append("elastic\nrecovery")
        ratios.append(h / k)
    b.bar(range(len(ratios)), ratios, color="tab:blue")
    b.set_yscale("log")
    for i, v in enumerate(ratios):
        b.text(i, v * 1.05, "%.2fx" % v, ha="center", va="bottom", fontsize=8)
    b.axhline(1.0, color="gray", lw=1)
    b.axhline(1.5, color="tab:red", lw=1, ls="--", label="goal 1.5x")
    b.set_xticks(range(len(ratios)))
    b.set_xticklabels(labels, fontsize=8)
    b.set_ylabel("kolo / faster Horovod (img/s; recovery: s / s)")
    b.set_title("Horovod's synthetic benchmark and elastic recovery")
    b.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results")
    parser.add_argument("--plot")
    args = parser.parse_args()
    runs = load(args.results)
    goals = []
    allreduce_table(runs, goals)
    allreduce_table(runs, goals, "allreduce_inplace")
    synthetic_table(runs, "synthetic", "Horovod's pytorch_synthetic_benchmark.py, CPU, 2 ranks of "
                    "one host: total img/s (median of the rounds; range)", goals)
    synthetic_table(runs, "netns", "The same on 2 network-namespace hosts x 1 rank, 1 Gbit/s "
                    "links", goals)
    elastic_table(runs, goals)
    binding_table(runs)
    print("Goals:\n")
    for g in goals:
        print("- " + g)
    if args.plot and any(p != "binding" for (p, _k) in runs):
        plot(runs, args.plot)
        print("\nplot: " + args.plot)


if __name__ == "__main__":
    main()

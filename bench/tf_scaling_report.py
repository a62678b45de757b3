#!/usr/bin/python3
"""The table, results.json and plot of a bench/tf_scaling.sh run.

    tf_scaling_report.py OUT_DIR [--plot PNG]

Reads the runs' OUT_DIR/*.rank<R>.json (bench/tf_scaling.py) by name:
  MODEL_kK_SYSTEM_rN.rank<R>.json     a 2-rank job (SYSTEM kolo or mwms)
  MODEL_kK_ceil_rN{A,B}.rank0.json    the two 1-rank runs of the ceiling
  allreduce_SYSTEM_rN.rank<R>.json    the allreduce runs
A job's images/s: ranks x batch x steps / its slowest rank's seconds; the
ceiling's: the two runs' images/s added up; an allreduce's time: the slowest
rank's ms per call. Ratios are taken within a round (kolo / ceiling, kolo /
MWMS, MWMS ms / kolo ms) and the table gives their median over the rounds
with the range. A second table, from the runs' step_ms and cpu_seconds
(runs of tf_scaling.py that have them), says per system where the time goes:
the median step and its spread (90th minus 10th percentile: a synchronous
job waits for its slowest rank every step, independent runs do not), and a
process's CPU seconds over the timed steps, all of it and kolo's runtime
thread's (medians over the rounds and ranks). Writes OUT_DIR/results.json and prints the markdown tables;
with --plot, a PNG (needs matplotlib: Debian's python3-matplotlib). Needs no
TensorFlow.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

GOALS = {"ceil": 0.95, "mwms": 1.2, "allreduce": 2.0}
_NAME = re.compile(r"(?P<job>(?P<model>cnn|resnet50)_k(?P<keras>[23])_(?P<system>kolo|mwms|ceil)"
                   r"_r(?P<round>\d+)(?P<part>[AB]?)|allreduce_(?P<arsystem>kolo|mwms)_r(?P<arround>\d+))"
                   r"\.rank(?P<rank>\d+)\.json$")


def load(out):
    """{(kind, ...): {round: value}} for train jobs and allreduce runs."""
    ranks = {}  # file stem without .rankR -> [results]
    for path in sorted(glob.glob(os.path.join(out, "*.rank*.json"))):
        m = _NAME.match(os.path.basename(path))
        if m:
            with open(path) as f:
                ranks.setdefault(m, []).append(json.load(f))
    jobs = {}
    for m, results in ranks.items():
        if m.group("arsystem"):
            ms = max(r["ms_per_call"] for r in results)
            jobs.setdefault(("allreduce", m.group("arsystem")), {})[int(m.group("arround"))] = {
                "ms": ms, "mib": results[0]["mib"], "size": results[0]["size"]}
            continue
        key = ("train", m.group("model"), m.group("keras"), m.group("system"))
        rnd = int(m.group("round"))
        if m.group("system") == "ceil":
            rate = results[0]["images_per_second"]
            jobs.setdefault(key, {}).setdefault(rnd, {"images_per_second": 0.0, "parts": 0})
            jobs[key][rnd]["images_per_second"] += rate
            jobs[key][rnd]["parts"] += 1
        else:
            first = results[0]
            rate = first["size"] * first["batch_size"] * first["steps"] / max(
                r["seconds"] for r in results)
            jobs.setdefault(key, {})[rnd] = {"images_per_second": rate, "ranks": len(results)}
    for key, rounds in jobs.items():  # a ceiling needs both of its runs
        for rnd in [r for r, v in rounds.items() if v.get("parts", 2) != 2]:
            del rounds[rnd]
    return jobs


def where_time_goes(out):
    """[(model, keras, system, {step, spread, cpu, runtime_cpu})]: medians
    over the rounds and ranks of the train runs that report step_ms."""
    found = {}
    for path in sorted(glob.glob(os.path.join(out, "*.rank*.json"))):
        m = _NAME.match(os.path.basename(path))
        if not m or m.group("arsystem"):
            continue
        with open(path) as f:
            run = json.load(f)
        steps, cpu = run.get("step_ms"), run.get("cpu_seconds")
        if not steps or cpu is None:
            continue
        key = (m.group("model"), m.group("keras"), m.group("system"))
        found.setdefault(key, []).append((steps["median"], steps["p90"] - steps["p10"],
                                          sum(cpu.values()), cpu.get("kolo-runtime", 0.0)))
    order = {"kolo": 0, "mwms": 1, "ceil": 2}
    rows = []
    for key in sorted(found, key=lambda k: (k[0] != "cnn", k[1], order[k[2]])):
        columns = list(zip(*found[key]))
        rows.append(key + ({name: statistics.median(c) for name, c in
                            zip(("step", "spread", "cpu", "runtime_cpu"), columns)},
                           len(found[key])))
    return rows


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": len(values)} if values else None


def ratios(a, b, invert=False):
    """Per-round a / b (b / a with invert) over the rounds both have."""
    common = sorted(set(a) & set(b))
    return {r: (b[r] / a[r] if invert else a[r] / b[r]) for r in common}


def analyse(jobs):
    groups = sorted({k[1:3] for k in jobs if k[0] == "train"},
                    key=lambda g: (g[0] != "cnn", g[1]))
    train = []
    for model, keras in groups:
        rate = {s: {r: v["images_per_second"] for r, v in jobs.get(("train", model, keras, s), {}).items()}
                for s in ("kolo", "mwms", "ceil")}
        row = {"model": model, "keras": keras,
               "images_per_second": {s: rate[s] for s in rate if rate[s]}}
        for peer in ("ceil", "mwms"):
            per_round = ratios(rate["kolo"], rate[peer])
            if per_round:
                row["kolo_over_" + peer] = dict(summary(list(per_round.values())),
                                                per_round=per_round, goal=GOALS[peer])
        train.append(row)
    allreduce = None
    kolo, mwms = jobs.get(("allreduce", "kolo"), {}), jobs.get(("allreduce", "mwms"), {})
    if kolo or mwms:
        ms = {"kolo": {r: v["ms"] for r, v in kolo.items()}, "mwms": {r: v["ms"] for r, v in mwms.items()}}
        per_round = ratios(ms["kolo"], ms["mwms"], invert=True)
        allreduce = {"mib": next(iter((kolo or mwms).values()))["mib"], "ms": ms}
        if per_round:
            allreduce["mwms_over_kolo"] = dict(summary(list(per_round.values())),
                                               per_round=per_round, goal=GOALS["allreduce"])
    return {"train": train, "allreduce": allreduce}


def _median(d):
    return statistics.median(d.values()) if d else None


def _fmt(x, digits=0):
    return "-" if x is None else "{:,.{}f}".format(x, digits)


def _ratio(s):
    if not s:
        return "-"
    met = "met" if s["median"] >= s["goal"] else "missed"
    return "%.3f (%.3f-%.3f; goal %g: %s)" % (s["median"], s["min"], s["max"], s["goal"], met)


def table(result):
    lines = ["| model | Keras | kolo.keras images/s | MWMS images/s | ceiling images/s "
             "| kolo / ceiling | kolo / MWMS | rounds |",
             "| --- | --- | ---: | ---: | ---: | --- | --- | ---: |"]
    for row in result["train"]:
        rate = row["images_per_second"]
        rounds = max(len(v) for v in rate.values())
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %d |" % (
            row["model"], {"2": "2 (tf_keras)", "3": "3"}[row["keras"]],
            _fmt(_median(rate.get("kolo", {}))), _fmt(_median(rate.get("mwms", {}))),
            _fmt(_median(rate.get("ceil", {}))),
            _ratio(row.get("kolo_over_ceil")), _ratio(row.get("kolo_over_mwms")), rounds))
    ar = result["allreduce"]
    if ar:
        lines += ["", "| allreduce | kolo.tensorflow ms | MWMS ms | MWMS / kolo | rounds |",
                  "| --- | ---: | ---: | --- | ---: |",
                  "| %g MiB float32, sum, 2 ranks | %s | %s | %s | %d |" % (
                      ar["mib"], _fmt(_median(ar["ms"]["kolo"]), 1), _fmt(_median(ar["ms"]["mwms"]), 1),
                      _ratio(ar.get("mwms_over_kolo")),
                      max(len(ar["ms"]["kolo"]), len(ar["ms"]["mwms"])))]
    lines += ["", "Images/s and ms: medians over the rounds; ratios: the median of the per-round "
              "ratios (range in brackets)."]
    spread = result.get("where_time_goes")
    if spread:
        names = {"kolo": "kolo.keras (a rank)", "mwms": "MWMS (a worker)", "ceil": "ceiling (a run)"}
        lines += ["", "| model | Keras | system | step ms | step spread ms (p90 - p10) "
                  "| CPU s, timed steps | of it kolo-runtime | runs |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for model, keras, system, v, n in spread:
            lines.append("| %s | %s | %s | %.1f | %.1f | %.2f | %s | %d |" % (
                model, keras, names[system], v["step"], v["spread"], v["cpu"],
                "%.2f" % v["runtime_cpu"] if system == "kolo" else "-", n))
    return "\n".join(lines)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    train = result["train"]
    ar = result["allreduce"]
    fig, axes = plt.subplots(1, len(train) + (1 if ar else 0), squeeze=False,
                             figsize=(3.2 * (len(train) + (1 if ar else 0)), 3.6))
    colors = {"kolo": "tab:blue", "mwms": "tab:orange", "ceil": "tab:gray"}
    labels = {"kolo": "kolo.keras", "mwms": "MWMS", "ceil": "ceiling"}
    for ax, row in zip(axes[0], train):
        systems = [s for s in ("kolo", "mwms", "ceil") if s in row["images_per_second"]]
        for i, s in enumerate(systems):
            values = list(row["images_per_second"][s].values())
            ax.bar(i, statistics.median(values), color=colors[s], alpha=0.8)
            ax.plot([i] * len(values), values, "k.", markersize=4)
        ax.set_xticks(range(len(systems)), [labels[s] for s in systems])
        ax.set_title("%s, Keras %s" % (row["model"], row["keras"]), fontsize=9)
        ax.set_ylabel("images/s, 2 ranks")
    if ar:
        ax = axes[0][-1]
        for i, s in enumerate(("kolo", "mwms")):
            values = list(ar["ms"][s].values())
            if values:
                ax.bar(i, statistics.median(values), color=colors[s], alpha=0.8)
                ax.plot([i] * len(values), values, "k.", markersize=4)
        ax.set_xticks(range(2), ["kolo.tensorflow", "MWMS"])
        ax.set_yscale("log")
        ax.set_title("allreduce %g MiB float32" % ar["mib"], fontsize=9)
        ax.set_ylabel("ms per call (log)")
    fig.suptitle("TensorFlow 2.21 on 2 ranks of one 2-core host (bars: median, dots: rounds)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    result = analyse(load(args.out))
    result["where_time_goes"] = where_time_goes(args.out)
    if not result["train"] and not result["allreduce"]:
        print("tf_scaling_report.py: no runs in %s" % args.out, file=sys.stderr)
        return 1
    meta = os.path.join(args.out, "meta.txt")
    if os.path.exists(meta):
        with open(meta) as f:
            result["meta"] = f.read()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(table(result))
    if args.plot:
        plot(result, args.plot)
        print("plot: %s" % args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

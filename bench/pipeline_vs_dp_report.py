"""Report of bench/pipeline_vs_dp.sh: reads the job's log (rank 0's "MODEL"
and "RESULT" lines from bench/pipeline_vs_dp.py) and prints a markdown table
per model: samples/s (median step), the spread of the rounds' medians, the
ratio to data parallelism, the bytes one host link carried per step (each
way, measured) against the bytes the variant should move, and the predicted
step time.

Prediction (docs/pipeline.md, "When to choose a pipeline ..."): a step is
the compute (the "local" variant's measured step: the same work, no
communication, on the same shared cores) plus the time of the variant's
traffic on a host link, not overlapped (so an upper bound):

  dp      kolo-predict allreduce of W bytes, 4 ranks, 2 per host, at RATE,
          the algorithm kolo's runtime selects (hier here: one rank per host
          crosses, W each way on a host link; the flat ring would move
          2(N-1)/N W = 1.5 W), priced with --one-machine --cores 2
  mesh    two allreduces of W/2 between the 2 hosts (one per stage), sharing
          the link: 2 x kolo-predict allreduce of W/2, 2 ranks, 1 per host
  mesh_t  the activations: G a bytes each way (the two pipelines' forward
          activations one way, their gradients the other) at RATE's payload
          rate (95.6%: TCP/IP and Ethernet headers), plus each stage's
          allreduce of W/2 over shm (kolo-predict, 2 ranks, 1 host), the two
          stages' one after the other on the shared cores

with W the model's parameter bytes, a its activation bytes per sample at
the stage boundary and G the global batch. The crossover of the transposed
mesh against data parallelism is where their link bytes are equal: the
batch G* = W / a under hier (1.5 W / a under the ring).
"""

import argparse
import json
import re
import statistics
import subprocess

PAYLOAD = 0.956  # payload share of a shaped 1500-byte frame (bench/multihost.sh)
LABELS = {"local": "compute only (no communication)",
          "dp": "data parallel, 4 ranks",
          "mesh": "Mesh 2x2: pipeline inside a host",
          "mesh_t": "Mesh 2x2 transposed: pipeline across hosts"}


def rate_bytes(rate):
    m = re.fullmatch(r"([0-9.]+)([kmg]?bit)", rate.lower())
    if not m:
        raise SystemExit("pipeline_vs_dp_report.py: --rate %r: expected e.g. 1gbit" % rate)
    scale = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]
    return float(m.group(1)) * scale / 8


def _predict_json(tool, ranks, per_host, nbytes, rate, extra):
    cmd = [tool, "allreduce", "--ranks", str(ranks), "--ranks-per-host", str(per_host),
           "--bytes", str(int(nbytes)), "--no-agreement", "--json"] + extra
    if per_host < ranks:
        cmd += ["--link", rate]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                     text=True).stdout)["results"][0]


def predict(tool, ranks, per_host, nbytes, rate):
    """(algorithm, seconds): the algorithm kolo's runtime selects (it does
    not know that the namespace hosts share one machine's cores), priced on
    this machine (--one-machine --cores 2)."""
    algo = _predict_json(tool, ranks, per_host, nbytes, rate, [])["selected"]
    here = _predict_json(tool, ranks, per_host, nbytes, rate,
                         ["--one-machine", "--cores", "2", "--algorithm", algo])
    return algo, here["seconds"][algo]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", required=True)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--predict", required=True, help="path of kolo-predict")
    ap.add_argument("--json", help="write models, results and predictions here")
    ap.add_argument("--plot", help="write a PNG: speed against data parallelism, "
                    "measured and predicted")
    args = ap.parse_args()
    models, results = {}, {}
    with open(args.log) as f:
        for line in f:
            line = re.sub(r"^\[\d+\] ", "", line.strip())
            if line.startswith("MODEL "):
                m = json.loads(line[6:])
                models[m["model"]] = m
            elif line.startswith("RESULT "):
                r = json.loads(line[7:])
                results[r["model"], r["variant"]] = r
    if not results:
        raise SystemExit("pipeline_vs_dp_report.py: no RESULT lines in %s" % args.log)
    link = rate_bytes(args.rate) * PAYLOAD
    out = {"models": models, "results": list(results.values()), "predicted": []}
    for name, m in models.items():
        w, a, g = m["param_bytes"], m["boundary_bytes_per_sample"], m["global_batch"]
        algo, t_dp = predict(args.predict, 4, 2, w, args.rate)
        _, t_half = predict(args.predict, 2, 1, w / 2, args.rate)
        _, t_shm = predict(args.predict, 2, 2, w / 2, args.rate)
        # Bytes each way on a host link: the ring's 2(N-1)/N W = 1.5 W; hier
        # (one rank per host crosses) and rhd (the far exchange halves) W.
        dp_wire = 1.5 * w if algo == "ring" else w
        wire = {"dp": dp_wire, "mesh": w, "mesh_t": g * a}
        t_link = {"dp": t_dp, "mesh": 2 * t_half, "mesh_t": g * a / link + 2 * t_shm}
        compute = results.get((name, "local"), {}).get("step_s")
        dp = results.get((name, "dp"))
        print("\n### %s: W = %.1f MiB of parameters, a = %.1f KiB per sample at the "
              "boundary, G = %d, %d micro-batches\n" %
              (name, w / 2**20, a / 2**10, g, m["chunks"]))
        cross = dp_wire / a
        out["models"][name].update({"dp_algorithm": algo, "crossover_batch": cross})
        print("kolo's allreduce for data parallelism here (kolo-predict): %s, "
              "%.1f MB each way on a host link. Crossover of the transposed mesh "
              "against data parallelism (equal link bytes): G* = %.1f MB / a = %.3g "
              "samples (G / G* = %.3g).\n" % (algo, dp_wire / 1e6, dp_wire / 1e6,
                                               cross, g / cross))
        print("| variant | samples/s | step (s) | rounds' medians (s) | vs dp | "
              "host link MB/step each way, measured (tx / rx) | expected MB | "
              "predicted link s | predicted step s |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for kind in ("local", "dp", "mesh", "mesh_t"):
            r = results.get((name, kind))
            if r is None:
                continue
            vs = "%.2fx" % (dp["step_s"] / r["step_s"]) if dp else "-"
            hosts = r["host_link_tx_rx_bytes_per_step"]
            measured = " ; ".join("%.1f / %.1f" % (tx / 1e6, rx / 1e6) for tx, rx in hosts)
            pred_step = pred_link = expected = "-"
            if kind in t_link:
                pred_link = "%.3f" % t_link[kind]
                expected = "%.1f" % (wire[kind] / 1e6)
                if compute is not None:
                    pred_step = "%.3f" % (compute + t_link[kind])
                    out["predicted"].append({"model": name, "variant": kind,
                                             "link_s": t_link[kind],
                                             "step_s": compute + t_link[kind],
                                             "link_bytes_each_way": wire[kind]})
            print("| %s | %.1f | %.3f | %s | %s | %s | %s | %s | %s |" % (
                LABELS[kind], r["samples_per_s"], r["step_s"],
                ", ".join("%.3f" % t for t in r["round_medians_s"]), vs,
                measured or "-", expected, pred_link, pred_step))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.plot:
        plot(out, args.plot)


def plot(out, path):
    """Bars: each variant's samples/s over data parallelism's, per model
    (measured); dots: the same ratio of the predicted step times."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kinds = ("dp", "mesh", "mesh_t")
    measured = {(r["model"], r["variant"]): r["step_s"] for r in out["results"]}
    predicted = {(p["model"], p["variant"]): p["step_s"] for p in out["predicted"]}
    models = list(out["models"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.25
    for i, kind in enumerate(kinds):
        bars = [(j + (i - 1) * width, m) for j, m in enumerate(models)
                if (m, kind) in measured and (m, "dp") in measured]
        if not bars:
            continue
        ax.bar([x for x, _ in bars], [measured[m, "dp"] / measured[m, kind]
                                      for _, m in bars], width, label=LABELS[kind])
        pred = [(x, predicted[m, "dp"] / predicted[m, kind]) for x, m in bars
                if (m, kind) in predicted and (m, "dp") in predicted]
        if pred:
            ax.plot([p[0] for p in pred], [p[1] for p in pred], "kx",
                    label="predicted" if i == 0 else None)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(["%s (G/G* = %.2g)" % (m, out["models"][m]["global_batch"] /
                                               out["models"][m]["crossover_batch"])
                        for m in models])
    ax.set_ylabel("samples/s over data parallel")
    ax.set_title("2 hosts x 2 ranks, 1 Gbit/s links")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

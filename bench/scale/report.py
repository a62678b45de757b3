#!/usr/bin/python3
"""Predicted against measured: the scale model's validation report.

    /usr/bin/python3 bench/scale/report.py --measurements M.csv \\
        [--train T.csv] [--predict build/bin/kolo-predict] \\
        [--calib-hosts 2] [--latency 0us] [--out DIR]

1. Splits the allreduce measurements (bench/scale/measurements.py's CSV)
   into a calibration set (rows with at most --calib-hosts hosts: one host
   and 2 hosts by default) and a validation set (the rest), written to
   DIR/calib.csv and DIR/valid.csv: the constants are never fitted on a row
   they are judged against.
2. Fits the constants: `kolo-predict calibrate --from DIR/calib.csv --out
   DIR/constants.json`.
3. Predicts every validation row: `kolo-predict allreduce --ranks N
   --ranks-per-host k --link RATE --latency L --bytes B --algorithm A
   --constants DIR/constants.json --json`; and every training row of
   --train (bench/scale/train_step.sh's CSV): `kolo-predict train --model
   M (or --params P) --step-compute-ms C --ranks N --ranks-per-host k
   --link RATE --fusion-mb F --constants ... --json`, C the compute time
   measured with as many ranks sharing the cores.
4. Writes DIR/validation.md (one row per prediction with its error
   (predicted - measured) / measured, the fraction within 15%, the same per
   link, host count and algorithm, and the rows that miss), DIR/
   validation.json (the same data) and DIR/validation.png (predicted
   against measured, log-log, the 15% band).

Exit status: 0 when the report was written (however far the model misses);
1 when kolo-predict failed or printed no usable JSON (its output is shown);
2 on bad input.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measurements  # noqa: E402

TOLERANCE = 0.15
# kolo-predict train --model names (its model zoo).
KNOWN_MODELS = ("resnet18", "resnet50", "resnet101", "vgg16", "inception_v3", "bert-base")


class PredictError(RuntimeError):
    pass


def split(rows, calib_hosts):
    """(calibration rows, validation rows): by host count."""
    calib = [r for r in rows if r["hosts"] <= calib_hosts]
    valid = [r for r in rows if r["hosts"] > calib_hosts]
    return calib, valid


def link_arg(bps):
    """kolo-predict's --link for a rate in bit/s ('1gbit', '100mbit')."""
    if bps <= 0:
        return None
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale and bps % scale == 0:
            return "%d%s" % (bps // scale, unit)
    return "%dbit" % bps


def run_json(cmd):
    """Runs CMD and returns the one JSON object it prints on stdout."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise PredictError("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout,
                                                   p.stderr))
    for line in reversed(p.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    try:
        return json.loads(p.stdout)
    except ValueError:
        raise PredictError("%s: printed no JSON object:\n%s" % (" ".join(cmd), p.stdout))


def find_seconds(obj, algorithm=None):
    """The predicted seconds of ALGORITHM in kolo-predict's JSON.

    Accepts {"algorithm": A, "seconds": s}, {"predictions": [{"algorithm":
    A, "seconds": s}, ...]}, {"algorithms": {A: {"seconds": s}}} or
    kolo-predict allreduce's {"results": [{"bytes": B, "seconds": {A: s}}]}
    (also "time_s" / "time_us" for the time)."""
    def secs(d):
        for k, scale in (("seconds", 1.0), ("time_s", 1.0), ("time_us", 1e-6),
                         ("step_seconds", 1.0), ("step_s", 1.0)):
            if isinstance(d, dict) and isinstance(d.get(k), (int, float)):
                return float(d[k]) * scale
        return None

    if algorithm is None or obj.get("algorithm") == algorithm:
        s = secs(obj)
        if s is not None:
            return s
    for key in ("predictions", "algorithms", "results"):
        v = obj.get(key)
        if isinstance(v, list):
            for d in v:
                if isinstance(d, dict) and isinstance(d.get("seconds"), dict) and \
                        isinstance(d["seconds"].get(algorithm), (int, float)):
                    return float(d["seconds"][algorithm])
                if isinstance(d, dict) and d.get("algorithm", d.get("name")) == algorithm:
                    s = secs(d)
                    if s is not None:
                        return s
        elif isinstance(v, dict) and algorithm in v:
            d = v[algorithm]
            s = secs(d) if isinstance(d, dict) else (float(d) if isinstance(
                d, (int, float)) else None)
            if s is not None:
                return s
    raise PredictError("no predicted time for algorithm %r in %s" % (
        algorithm, json.dumps(obj)[:400]))


def predict_allreduce(predict, constants, row, latency, extra=()):
    cmd = [predict, "allreduce", "--ranks", str(row["hosts"] * row["ranks_per_host"]),
           "--ranks-per-host", str(row["ranks_per_host"]), "--bytes", str(row["bytes"]),
           "--algorithm", row["algorithm"], "--json"]
    if constants:
        cmd += ["--constants", constants]
    cmd += list(extra)
    if row.get("transport") in ("tcp", "mpi"):
        cmd += ["--transport", row["transport"]]
    link = link_arg(row["link_bps"])
    if link:
        cmd += ["--link", link, "--latency", latency]
    return find_seconds(run_json(cmd), row["algorithm"])


def predict_train(predict, constants, row, latency, extra=()):
    # A model kolo-predict knows brings its layer sizes (the overlap with
    # backward depends on them); else equal tensors of --params.
    what = ["--model", row["model"]] if row.get("model") in KNOWN_MODELS else \
        ["--params", str(row["params"])]
    cmd = [predict, "train"] + what + [
           "--step-compute-ms", "%.3f" % (row["step_compute_s"] * 1e3),
           "--ranks", str(row["hosts"] * row["ranks_per_host"]),
           "--ranks-per-host", str(row["ranks_per_host"]),
           "--fusion-mb", "%g" % row["fusion_mb"], "--constants", constants, "--json"]
    cmd += list(extra)
    link = link_arg(row["link_bps"])
    if link:
        cmd += ["--link", link, "--latency", latency]
    obj = run_json(cmd)
    for k in ("step_seconds", "step_s", "seconds"):
        if isinstance(obj.get(k), (int, float)):
            return float(obj[k])
    if isinstance(obj.get("step_ms"), (int, float)):
        return obj["step_ms"] * 1e-3
    raise PredictError("no step time in %s" % json.dumps(obj)[:400])


def error(pred, meas):
    return (pred - meas) / meas


def within(rows):
    ok = sum(1 for r in rows if abs(r["error"]) <= TOLERANCE)
    return ok, len(rows)


def fmt_bytes(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d %s" % (n // scale, unit)
    return "%d B" % n


def fmt_time(s):
    if s >= 1:
        return "%.2f s" % s
    if s >= 1e-3:
        return "%.2f ms" % (s * 1e3)
    return "%.0f us" % (s * 1e6)


def link_name(bps):
    return link_arg(bps) or "none"


def group_lines(rows, key, title):
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    out = ["| %s | rows | within 15%% | median abs. error |" % title, "| --- | ---: | ---: | ---: |"]
    for k in sorted(groups, key=str):
        g = groups[k]
        ok, n = within(g)
        errs = sorted(abs(r["error"]) for r in g)
        out.append("| %s | %d | %d (%.0f%%) | %.1f%% |" % (k, n, ok, 100.0 * ok / n,
                                                         100 * errs[len(errs) // 2]))
    return out


def markdown(allreduce, train, meta):
    ok, n = within(allreduce + train)
    lines = ["# Predicted against measured", "",
             "Constants fitted on %d rows of %s (hosts <= %d); %d allreduce and %d "
             "training rows validated. **%d of %d (%.0f%%) within 15%%.**" % (
                 meta["calib_rows"], meta["calib_file"], meta["calib_hosts"],
                 len(allreduce), len(train), ok, n, 100.0 * ok / max(n, 1)), ""]
    if allreduce:
        lines += group_lines(allreduce, lambda r: link_name(r["link_bps"]), "link") + [""]
        lines += group_lines(allreduce, lambda r: r["hosts"], "hosts") + [""]
        lines += group_lines(allreduce, lambda r: r["ranks_per_host"], "ranks per host") + [""]
        lines += group_lines(allreduce, lambda r: r["algorithm"], "algorithm") + [""]
        lines += group_lines(allreduce, lambda r: "%s, %s per host" % (
            "1 MiB and up" if r["bytes"] >= 1 << 20 else "below 1 MiB",
            "1 rank" if r["ranks_per_host"] == 1 else "several ranks"),
            "size class") + [""]
        lines += group_lines(allreduce, lambda r: fmt_bytes(r["bytes"]), "size") + [""]
        lines += ["## Allreduce", "",
                  "| link | hosts x ranks | algorithm | size | measured | predicted | error |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
        for r in sorted(allreduce, key=lambda r: (r["link_bps"], r["hosts"],
                                                   r["ranks_per_host"], r["algorithm"],
                                                   r["bytes"])):
            mark = "" if abs(r["error"]) <= TOLERANCE else " **"
            lines.append("| %s | %d x %d | %s | %s | %s | %s | %+.1f%%%s |" % (
                link_name(r["link_bps"]), r["hosts"], r["ranks_per_host"], r["algorithm"],
                fmt_bytes(r["bytes"]), fmt_time(r["seconds"]), fmt_time(r["predicted"]),
                100 * r["error"], mark))
        lines.append("")
    if train:
        lines += ["## Training step (synthetic, %s)" % train[0].get("model", ""), "",
                  "| link | hosts x ranks | step compute | measured step | predicted | error |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for r in train:
            lines.append("| %s | %d x %d | %s | %s | %s | %+.1f%% |" % (
                link_name(r["link_bps"]), r["hosts"], r["ranks_per_host"],
                fmt_time(r["step_compute_s"]), fmt_time(r["seconds"]),
                fmt_time(r["predicted"]), 100 * r["error"]))
        lines.append("")
    return "\n".join(lines)


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 5.5))
    colors = {}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for r in rows:
        key = "training" if r.get("kind") == "train" else link_name(r["link_bps"])
        colors.setdefault(key, palette[len(colors) % len(palette)])
    for key, color in colors.items():
        sel = [r for r in rows if ("training" if r.get("kind") == "train"
                                   else link_name(r["link_bps"])) == key]
        ax.loglog([r["seconds"] for r in sel], [r["predicted"] for r in sel],
                  "s" if key == "training" else "o", color=color, ms=4, alpha=0.75,
                  label=key)
    lo = min(min(r["seconds"], r["predicted"]) for r in rows) / 1.5
    hi = max(max(r["seconds"], r["predicted"]) for r in rows) * 1.5
    xs = [lo, hi]
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.plot(xs, [x * (1 + TOLERANCE) for x in xs], "k--", lw=0.6)
    ax.plot(xs, [x * (1 - TOLERANCE) for x in xs], "k--", lw=0.6, label="+-15%")
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("predicted (s)")
    ok, n = within(rows)
    ax.set_title("scale model: %d of %d within 15%%" % (ok, n))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def read_train(path):
    import csv
    with open(path, newline="") as f:
        rows = []
        for r in csv.DictReader(f):
            rows.append({"kind": "train", "model": r["model"], "hosts": int(r["hosts"]),
                         "ranks_per_host": int(r["ranks_per_host"]),
                         "link_bps": int(float(r["link_bps"])), "params": int(r["params"]),
                         "fusion_mb": float(r["fusion_mb"]),
                         "step_compute_s": float(r["step_compute_s"]),
                         "seconds": float(r["step_seconds"])})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measurements", required=True, action="append",
                    help="allreduce measurement CSV (repeatable)")
    ap.add_argument("--train", default=None, help="training step CSV (train_step.sh)")
    ap.add_argument("--predict", default="build/bin/kolo-predict")
    ap.add_argument("--calib-hosts", type=int, default=2)
    ap.add_argument("--calibrate-with", action="append", default=[],
                    help="another measurement CSV whose rows of at most --calib-hosts "
                    "hosts join the calibration set (never validated; repeatable)")
    ap.add_argument("--latency", default="0us", help="--latency passed for shaped links")
    ap.add_argument("--out", default=".")
    ap.add_argument("--calibrate-args", default="",
                    help="more arguments for kolo-predict calibrate (e.g. '--cores 2 "
                    "--one-machine': every host on this machine's cores)")
    ap.add_argument("--allreduce-args", default="",
                    help="more arguments for every kolo-predict allreduce")
    ap.add_argument("--train-args", default="",
                    help="more arguments for every kolo-predict train")
    a = ap.parse_args(argv)
    rows = []
    try:
        for path in a.measurements:
            rows += measurements.read_rows(path)
    except (OSError, ValueError) as e:
        print("report.py: %s" % e, file=sys.stderr)
        return 2
    calib, valid = split(rows, a.calib_hosts)
    try:
        for path in a.calibrate_with:
            calib += split(measurements.read_rows(path), a.calib_hosts)[0]
    except (OSError, ValueError) as e:
        print("report.py: %s" % e, file=sys.stderr)
        return 2
    if not calib or not valid:
        print("report.py: %d calibration and %d validation rows (--calib-hosts %d): "
              "need both" % (len(calib), len(valid), a.calib_hosts), file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    calib_csv = os.path.join(a.out, "calib.csv")
    valid_csv = os.path.join(a.out, "valid.csv")
    for path, part in ((calib_csv, calib), (valid_csv, valid)):
        if os.path.exists(path):
            os.remove(path)
        measurements.write_rows(path, part)
    constants = os.path.join(a.out, "constants.json")
    try:
        p = subprocess.run([a.predict, "calibrate", "--from", calib_csv, "--out", constants]
                           + a.calibrate_args.split(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            raise PredictError("kolo-predict calibrate: exit %d\n%s" % (p.returncode,
                                                                        p.stdout))
        for r in valid:
            r["predicted"] = predict_allreduce(a.predict, constants, r, a.latency,
                                               a.allreduce_args.split())
            r["error"] = error(r["predicted"], r["seconds"])
        train = read_train(a.train) if a.train else []
        for r in train:
            r["predicted"] = predict_train(a.predict, constants, r, a.latency,
                                           a.train_args.split())
            r["error"] = error(r["predicted"], r["seconds"])
    except (OSError, PredictError) as e:
        print("report.py: %s" % e, file=sys.stderr)
        return 1
    meta = {"calib_rows": len(calib), "calib_file": calib_csv, "calib_hosts": a.calib_hosts,
            "calibrate_args": a.calibrate_args, "allreduce_args": a.allreduce_args,
            "train_args": a.train_args}
    with open(os.path.join(a.out, "validation.md"), "w") as f:
        f.write(markdown(valid, train, meta))
    with open(os.path.join(a.out, "validation.json"), "w") as f:
        json.dump({"meta": meta, "allreduce": valid, "train": train}, f, indent=1)
    drew = plot(valid + train, os.path.join(a.out, "validation.png"))
    ok, n = within(valid + train)
    print("report.py: %d of %d predictions within 15%% (%.0f%%); %s%s" % (
        ok, n, 100.0 * ok / max(n, 1), os.path.join(a.out, "validation.md"),
        "" if drew else " (no plot: python3-matplotlib is missing)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

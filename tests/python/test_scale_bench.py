"""bench/scale's data path: kolo-bench JSON -> the measurement CSV, the
calibration/validation split and the predicted-against-measured report
(against a stand-in kolo-predict), the latency-growth fit and the selection
A/B's ratios. No ranks, no network namespaces: the scripts' logic only."""

import json
import os
import stat
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCALE = os.path.join(HERE, "..", "..", "bench", "scale")
sys.path.insert(0, SCALE)

import ab_report  # noqa: E402
import latency_fit  # noqa: E402
import measurements  # noqa: E402
import report  # noqa: E402


def bench_line(rank, nbytes, us, algorithm="ring"):
    return "[%d] " % rank + json.dumps({
        "tool": "kolo-bench", "op": "allreduce", "bytes": nbytes, "algorithm": algorithm,
        "time_us": us}, separators=(",", ":"))


def test_rows_take_the_median_of_the_repeats():
    log = [bench_line(0, 4096, 50.0), "[0] some other output",
           bench_line(0, 4096, 10.0), bench_line(0, 4096, 12.0),
           bench_line(0, 1 << 20, 900.0, "ring")]
    rows = measurements.rows_from_results(measurements.bench_results(log), "tcp", 3, 2,
                                          measurements.rate_bps("1gbit"))
    assert [r["bytes"] for r in rows] == [4096, 1 << 20]
    assert [r["seconds"] for r in rows] == pytest.approx([12e-6, 900e-6])
    assert rows[0]["link_bps"] == 1000000000 and rows[0]["hosts"] == 3
    assert rows[0]["ranks_per_host"] == 2 and rows[0]["transport"] == "tcp"
    # The algorithm given names the rows (kolo-bench reports its own name).
    named = measurements.rows_from_results(measurements.bench_results(log), "tcp", 3, 2, 0,
                                           "hier")
    assert {r["algorithm"] for r in named} == {"hier"}


def test_csv_round_trip_and_bad_header(tmp_path):
    path = str(tmp_path / "m.csv")
    row = {"transport": "tcp", "hosts": 2, "ranks_per_host": 1, "link_bps": 100000000,
           "algorithm": "rhd", "bytes": 65536, "seconds": 0.0123}
    measurements.write_rows(path, [row])
    measurements.write_rows(path, [dict(row, bytes=4096)])
    with open(path) as f:
        assert f.readline().strip() == ",".join(measurements.HEADER)
    assert measurements.read_rows(path) == [row, dict(row, bytes=4096)]
    bad = tmp_path / "bad.csv"
    bad.write_text("transport,hosts,bytes\ntcp,2,8\n")
    with pytest.raises(ValueError, match="header transport,hosts,bytes, expected"):
        measurements.read_rows(str(bad))
    with pytest.raises(ValueError, match="link rate '10gb'"):
        measurements.rate_bps("10gb")
    assert measurements.rate_bps("100mbit") == 10 ** 8
    assert measurements.rate_bps("none") == 0


FAKE_PREDICT = textwrap.dedent("""\
    #!%s
    # A stand-in for kolo-predict: calibrate records the host counts and
    # the number of rows it was fitted on; allreduce predicts 1.1 x bytes / (link bytes/s) for ring and
    # 2 x that for tree, and fails for 'bad'.
    import csv, json, sys
    a = sys.argv[1:]
    opt = lambda k: a[a.index(k) + 1] if k in a else None
    if a[0] == "calibrate":
        with open(opt("--from")) as f:
            rows = list(csv.DictReader(f))
        hosts = sorted({int(r["hosts"]) for r in rows})
        json.dump({"fitted_on_hosts": hosts, "rows": len(rows)}, open(opt("--out"), "w"))
    elif a[0] == "allreduce":
        alg, b = opt("--algorithm"), int(opt("--bytes"))
        if alg == "bad":
            sys.exit("kolo-predict: no model for algorithm 'bad'")
        assert opt("--link") == "1gbit" and "--json" in a
        s = 1.1 * b * 8 / 1e9 * (2 if alg == "tree" else 1)
        print(json.dumps({"predictions": [{"algorithm": "rhd", "seconds": 9.0},
                                          {"algorithm": alg, "seconds": s}]}))
    elif a[0] == "train":
        print(json.dumps({"step_seconds": float(opt("--step-compute-ms")) * 1e-3 + 0.1}))
    """) % sys.executable


def test_report_splits_calibrates_and_scores(tmp_path):
    fake = tmp_path / "kolo-predict"
    fake.write_text(FAKE_PREDICT)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    m = str(tmp_path / "m.csv")
    base = {"transport": "tcp", "ranks_per_host": 1, "link_bps": 10 ** 9, "bytes": 10 ** 6}
    # Measured: ring as predicted / 1.1 (error +10%), tree half of the
    # prediction (error +100%); the 2-host and 1-host rows calibrate.
    measurements.write_rows(m, [
        dict(base, hosts=1, link_bps=0, algorithm="ring", seconds=1.0),
        dict(base, hosts=2, algorithm="ring", seconds=1.0),
        dict(base, hosts=3, algorithm="ring", seconds=0.008),
        dict(base, hosts=4, algorithm="tree", seconds=0.0088)])
    train = tmp_path / "t.csv"
    train.write_text("model,hosts,ranks_per_host,link_bps,params,fusion_mb,step_compute_s,"
                     "step_compute_alone_s,step_seconds,load1\n"
                     "resnet18,2,1,1000000000,11690000,64,0.5,0.4,0.6,1.0\n")
    out = tmp_path / "out"
    assert report.main(["--measurements", m, "--train", str(train), "--predict", str(fake),
                        "--out", str(out)]) == 0
    assert json.load(open(out / "constants.json")) == {"fitted_on_hosts": [1, 2], "rows": 2}
    assert {r["hosts"] for r in measurements.read_rows(str(out / "valid.csv"))} == {3, 4}
    # --calibrate-with: another file's calibration rows join the fit; its
    # other rows are neither fitted nor validated.
    other = str(tmp_path / "other.csv")
    measurements.write_rows(other, [dict(base, hosts=2, algorithm="tree", seconds=2.0),
                                    dict(base, hosts=6, algorithm="ring", seconds=1.0)])
    out2 = tmp_path / "out2"
    assert report.main(["--measurements", m, "--calibrate-with", other, "--predict",
                        str(fake), "--out", str(out2)]) == 0
    assert json.load(open(out2 / "constants.json")) == {"fitted_on_hosts": [1, 2], "rows": 3}
    assert {r["hosts"] for r in measurements.read_rows(str(out2 / "valid.csv"))} == {3, 4}
    data = json.load(open(out / "validation.json"))
    errs = {r["algorithm"]: r["error"] for r in data["allreduce"]}
    assert errs["ring"] == pytest.approx(0.1)
    assert errs["tree"] == pytest.approx(1.0)
    assert data["train"][0]["error"] == pytest.approx(0.0)
    md = (out / "validation.md").read_text()
    assert "**2 of 3 (67%) within 15%.**" in md
    assert "| 1gbit | 4 x 1 | tree | 1000000 B | 8.80 ms | 17.60 ms | +100.0% ** |" in md
    # A model that fails is an error naming the command, not a row.
    measurements.write_rows(m, [dict(base, hosts=5, algorithm="bad", seconds=1.0)])
    assert report.main(["--measurements", m, "--predict", str(fake),
                        "--out", str(out)]) == 1
    # No validation rows: bad input.
    assert report.main(["--measurements", m, "--predict", str(fake), "--calib-hosts", "9",
                        "--out", str(out)]) == 2


def test_find_seconds_shapes():
    assert report.find_seconds({"algorithm": "ring", "seconds": 2.0}, "ring") == 2.0
    assert report.find_seconds({"algorithms": {"tree": {"time_us": 5.0}}}, "tree") == pytest.approx(5e-6)
    got = {"results": [{"bytes": 8, "selected": "tree", "seconds": {"ring": 1.5, "tree": 0.5}}]}
    assert report.find_seconds(got, "ring") == 1.5
    with pytest.raises(report.PredictError, match="no predicted time for algorithm 'hier'"):
        report.find_seconds({"algorithm": "ring", "seconds": 2.0}, "hier")
    assert report.link_arg(10 ** 8) == "100mbit" and report.link_arg(10 ** 10) == "10gbit"


def test_latency_fit_recovers_the_step_cost():
    rows = []
    for p in (2, 4, 8, 16, 32, 64):
        for alg in ("ring", "rhd", "tree"):
            t = 20e-6 + 5e-6 * latency_fit.steps(alg, p, agreement=False)
            rows.append({"transport": "tcp", "hosts": 1, "ranks_per_host": p, "link_bps": 0,
                         "algorithm": alg, "bytes": 8, "seconds": t})
    fits = {f["algorithm"]: f for f in latency_fit.analyse(rows, agreement=False)}
    for alg in ("ring", "rhd", "tree"):
        assert fits[alg]["per_step"] == pytest.approx(5e-6)
        assert fits[alg]["intercept"] == pytest.approx(20e-6)
        assert fits[alg]["r2"] == pytest.approx(1.0)
    # The ring's linear growth is not a log2(p) one; per doubling it grows.
    assert fits["ring"]["other_r2"] < 0.95
    assert fits["ring"]["per_doubling"][32] > fits["ring"]["per_doubling"][2]
    # The log-p algorithms cost the same per doubling.
    assert fits["tree"]["per_doubling"][2] == pytest.approx(fits["tree"]["per_doubling"][32])
    assert latency_fit.steps("rhd", 6, False) == 6 and latency_fit.steps("tree", 6, False) == 6
    # The descriptor exchange adds p - 1 steps to every algorithm; a law
    # without it fits those times worse.
    assert latency_fit.steps("tree", 8) == 6 + 7
    with_agreement = [dict(r, seconds=20e-6 + 5e-6 * latency_fit.steps(r["algorithm"],
                                                                       r["ranks_per_host"]))
                      for r in rows]
    tree = [f for f in latency_fit.analyse(with_agreement) if f["algorithm"] == "tree"][0]
    assert tree["per_step"] == pytest.approx(5e-6) and tree["r2"] == pytest.approx(1.0)
    tree_without = [f for f in latency_fit.analyse(with_agreement, agreement=False)
                    if f["algorithm"] == "tree"][0]
    assert tree_without["r2"] < 0.99


def test_ab_ratios_pair_rounds():
    rows = [{"round": "1", "build": "A", "setting": "shm2", "bytes": "4096",
             "algorithm": "shm", "seconds": "1.0"},
            {"round": "1", "build": "B", "setting": "shm2", "bytes": "4096",
             "algorithm": "shm", "seconds": "2.0"},
            {"round": "2", "build": "A", "setting": "shm2", "bytes": "4096",
             "algorithm": "shm", "seconds": "3.0"},
            {"round": "2", "build": "B", "setting": "shm2", "bytes": "4096",
             "algorithm": "ring", "seconds": "2.0"}]
    t = ab_report.ratios(rows)
    assert sorted(t[("shm2", 4096)]["ratios"]) == [0.5, 1.5]
    assert "| shm2 | 4 KiB | shm | ring/shm | 1.00 | 0.50-1.50 | 2 |" in ab_report.markdown(t)

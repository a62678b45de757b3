"""bench/tf_scaling's bookkeeping without TensorFlow: a timed step's spread
and a process's CPU per thread (tf_scaling.py), the report's table of where
the time goes (tf_scaling_report.py), and tf_scaling.sh refusing a bad
thread count. No ranks, no training: the scripts' logic only."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)

import tf_scaling  # noqa: E402
import tf_scaling_report  # noqa: E402


def test_step_summary_is_the_median_and_the_tenth_percentiles_of_the_steps():
    # 11 ends: 10 steps of 10..100 ms, in shuffled order.
    lengths = [0.05, 0.01, 0.1, 0.03, 0.07, 0.02, 0.09, 0.04, 0.08, 0.06]
    ends = [0.0]
    for s in lengths:
        ends.append(ends[-1] + s)
    got = tf_scaling.step_summary(ends)
    assert got["median"] == pytest.approx(55.0)
    assert got["p10"] == pytest.approx(20.0)  # the 2nd of 10 sorted
    assert got["p90"] == pytest.approx(100.0)
    assert tf_scaling.step_summary([1.0]) == {}


def test_cpu_by_name_adds_the_threads_of_a_name_and_counts_new_ones_whole():
    before = {"1": ("python", 1.0), "2": ("tf_Compute", 2.0), "3": ("tf_Compute", 0.5)}
    after = {"1": ("python", 1.25), "2": ("tf_Compute", 3.0), "3": ("tf_Compute", 1.0),
             "4": ("kolo-runtime", 0.3), "5": ("idle", 0.0)}
    assert tf_scaling.cpu_by_name(before, after) == {
        "kolo-runtime": 0.3, "python": 0.25, "tf_Compute": 1.5}


def test_thread_cpu_sees_a_busy_thread_by_its_name():
    named, spun, stop = threading.Event(), threading.Event(), threading.Event()

    def spin():
        named.wait(60)
        start = time.thread_time()
        while time.thread_time() - start < 0.1:  # 0.1 s of this thread's own CPU
            pass
        spun.set()
        stop.wait(60)

    t = threading.Thread(target=spin)
    t.start()
    try:
        tid = str(t.native_id)
        with open("/proc/self/task/%s/comm" % tid, "w") as f:
            f.write("busy-probe")
        before = tf_scaling.thread_cpu()
        named.set()
        assert spun.wait(60)
        after = tf_scaling.thread_cpu()
    finally:
        named.set()
        stop.set()
        t.join()
    assert after[tid][0] == "busy-probe"
    assert tf_scaling.cpu_by_name(before, after)["busy-probe"] >= 0.08  # clock ticks: 0.01 s


def write_run(out, name, rank, steps, cpu, rate=1000.0):
    run = {"images_per_second": rate, "seconds": 64 * 150 / rate, "size": 2, "batch_size": 64,
           "steps": 150, "step_ms": steps, "cpu_seconds": cpu}
    with open(os.path.join(out, "%s.rank%d.json" % (name, rank)), "w") as f:
        json.dump(run, f)


def test_report_says_where_the_time_goes_per_system(tmp_path, capsys):
    out = str(tmp_path)
    for rnd, extra in ((1, 0.0), (2, 2.0), (3, 4.0)):
        for rank in (0, 1):
            write_run(out, "cnn_k2_kolo_r%d" % rnd, rank,
                      {"median": 70.0 + extra, "p10": 60.0, "p90": 90.0 + extra},
                      {"tf_Compute": 9.0, "kolo-runtime": 0.3 + extra / 10, "python": 0.2})
        for part in "AB":
            write_run(out, "cnn_k2_ceil_r%d%s" % (rnd, part), 0,
                      {"median": 65.0, "p10": 60.0, "p90": 70.0 + extra},
                      {"tf_Compute": 9.0, "python": 0.2})
    # A run of an older tf_scaling.py (no step_ms) counts for images/s only.
    with open(os.path.join(out, "cnn_k2_mwms_r1.rank0.json"), "w") as f:
        json.dump({"images_per_second": 800.0, "seconds": 12.0, "size": 2, "batch_size": 64,
                   "steps": 150}, f)
    assert tf_scaling_report.main([out]) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| cnn | 2 | ")]
    assert rows == [
        "| cnn | 2 | kolo.keras (a rank) | 72.0 | 32.0 | 9.70 | 0.50 | 6 |",
        "| cnn | 2 | ceiling (a run) | 65.0 | 12.0 | 9.20 | - | 6 |",
    ]
    with open(os.path.join(out, "results.json")) as f:
        saved = json.load(f)
    assert [r[2] for r in saved["where_time_goes"]] == ["kolo", "ceil"]


def test_tf_scaling_sh_refuses_a_thread_count_that_is_not_a_count():
    for option in ("--threads", "--inter-op"):
        done = subprocess.run(["bash", os.path.join(BENCH, "tf_scaling.sh"), option, "two"],
                              capture_output=True, text=True)
        assert done.returncode == 2
        assert "--threads and --inter-op take a count >= 0, not two" in done.stderr

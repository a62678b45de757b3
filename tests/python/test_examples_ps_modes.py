"""The Fashion-MNIST examples' parameter-server modes start, train and
finish: each mode (sync-ps, downpour, easgd) of the Python example and of
the libtorch one runs 2 short epochs (--max-steps) on the real data under
kolorun --servers 1 -np 4 (1 server, 3 workers). Each run must exit 0,
report its epochs from worker 0 only, learn (test accuracy of the servers'
parameters well above chance), and the server's counters must match the
mode: sync applies one update per step of the workers; downpour applies
or refuses every push of every worker; easgd one exchange per worker every
--easgd-period steps.

Run by CTest (python_examples_ps_modes_<example>_<mode>) as one plain
pytest process that starts kolorun itself, selected with -k; the
environment names the programs:
  KOLORUN            build/bin/kolorun (required)
  FASHION_MNIST_BIN  build/bin/fashion_mnist (the libtorch example; its
                     runs are skipped when unset)
  PYTHONPATH         build/python
"""

import json
import os
import re
import subprocess
import sys

import pytest

from paths import DATA, EXAMPLE, KOLORUN

CPP = os.environ.get("FASHION_MNIST_BIN")
WORKERS = 3
EPOCHS = 2
STEPS = 20          # per epoch and worker
EASGD_PERIOD = 4

needs_data = pytest.mark.skipif(
    not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
    reason="dataset-fashion-mnist not installed")
needs_kolorun = pytest.mark.skipif(not KOLORUN, reason="KOLORUN not set")


def run(cmd, timeout=240):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, env=dict(os.environ, KOLO_TIMEOUT="60"))
    p.stdout, p.stderr = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 0, "%s\nexit %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(cmd), p.returncode, p.stdout, p.stderr)
    return p


def server_counters(stdout):
    """(version, updates, refused, largest staleness) of server 0, from
    the line worker 0 prints about the parameter servers at the end."""
    m = re.search(r"server 0: version (\d+), (\d+) updates, (\d+) refused, "
                  r"largest staleness (\d+)", stdout)
    assert m, "no parameter-server line in:\n" + stdout
    return tuple(int(v) for v in m.groups())


def check_mode(program, mode, tmp_path):
    out = str(tmp_path / ("%s.json" % mode))
    p = run([KOLORUN, "--servers", "1", "-np", str(WORKERS + 1)] + program +
            ["--mode", mode, "--epochs", str(EPOCHS), "--max-steps", str(STEPS),
             "--easgd-period", str(EASGD_PERIOD), "--staleness-bound", "4",
             "--no-progress", "--json", out, "--baseline", str(tmp_path / "none.json")])
    with open(out) as f:
        record = json.load(f)
    assert record["mode"] == mode and record["ranks"] == WORKERS, record
    assert len(record["epoch_accuracy"]) == EPOCHS, record
    # 20 steps of 3 x 64 images per epoch: far above chance (10%).
    assert record["test_accuracy"] > 0.5, p.stdout
    assert "mode %s" % mode in p.stdout
    assert "%d worker(s)" % WORKERS in p.stdout
    assert "[0] epoch %d/%d: loss" % (EPOCHS, EPOCHS) in p.stdout
    assert "[1] epoch" not in p.stdout and "[2] epoch" not in p.stdout
    version, updates, refused, staleness = server_counters(p.stdout)
    steps = EPOCHS * STEPS
    if mode == "sync-ps":
        assert (version, updates, refused, staleness) == (steps, steps, 0, 0), p.stdout
    elif mode == "downpour":
        assert updates + refused == WORKERS * steps, p.stdout
        assert updates > 0 and staleness <= 4, p.stdout
    else:
        assert updates == WORKERS * (steps // EASGD_PERIOD), p.stdout


def programs():
    out = [pytest.param([sys.executable, EXAMPLE], id="py")]
    out.append(pytest.param([CPP] if CPP else None, id="cpp"))
    return out


@needs_kolorun
@needs_data
@pytest.mark.parametrize("mode", ["sync-ps", "downpour", "easgd"])
@pytest.mark.parametrize("program", programs())
def test_example_mode_trains(program, mode, tmp_path):
    if program is None:
        pytest.skip("FASHION_MNIST_BIN not set (no libtorch example)")
    check_mode(program, mode, tmp_path)


@needs_kolorun
@needs_data
@pytest.mark.parametrize("program", programs())
def test_ps_mode_without_servers_is_a_clear_error(program):
    if program is None:
        pytest.skip("FASHION_MNIST_BIN not set (no libtorch example)")
    p = subprocess.run([KOLORUN, "-np", "1"] + program +
                       ["--mode", "downpour", "--max-steps", "1", "--epochs", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240,
                       env=dict(os.environ, KOLO_TIMEOUT="60"))
    err = p.stderr.decode()
    assert p.returncode != 0
    assert "needs parameter servers" in err and "--servers" in err, err

"""The Fashion-MNIST examples and the synthetic benchmark still run: each
trains a few steps on 2 ranks under kolorun (--max-steps) and must learn
(test accuracy well above chance), print its per-epoch lines and the speedup
over a 1-rank record, and write the JSON record; plus the example's sampler
and its error for missing data.

Run by CTest (python_examples_fashion_mnist) as one plain pytest process
that starts kolorun itself; the environment names the programs:
  KOLORUN            build/bin/kolorun (required)
  FASHION_MNIST_BIN  build/bin/fashion_mnist (the libtorch example; its
                     test is skipped when unset)
  PYTHONPATH         build/python
"""

import json
import os
import re
import subprocess
import sys

import pytest

from paths import DATA, EXAMPLE, KOLORUN, ROOT, SYNTHETIC

CPP = os.environ.get("FASHION_MNIST_BIN")

sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import demo  # noqa: E402
import fashion_mnist  # noqa: E402

needs_data = pytest.mark.skipif(
    not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
    reason="dataset-fashion-mnist not installed")
needs_kolorun = pytest.mark.skipif(not KOLORUN, reason="KOLORUN not set")


def run(cmd, timeout=240):
    # Bytes, decoded without newline translation: the progress bar's "\r"
    # must stay.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, env=dict(os.environ, KOLO_TIMEOUT="60"))
    p.stdout, p.stderr = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 0, "%s\nexit %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(cmd), p.returncode, p.stdout, p.stderr)
    return p


# ---------------------------------------------------------------- sampler


@pytest.mark.parametrize("n,size", [(60000, 2), (10, 3), (7, 2), (5, 1), (3, 4)])
def test_sampler_shards_are_disjoint_equal_and_cover_everything(n, size):
    samplers = [fashion_mnist.DistributedSampler(n, r, size, seed=7)
                for r in range(size)]
    for epoch in (0, 1):
        shards = []
        for s in samplers:
            s.set_epoch(epoch)
            shards.append(s.indices().tolist())
        lengths = {len(x) for x in shards}
        assert lengths == {(n + size - 1) // size}
        everything = [i for shard in shards for i in shard]
        assert set(everything) == set(range(n))      # every sample read
        assert len(everything) - n == (-n) % size    # repeats: the padding only


def test_sampler_is_identical_across_ranks_and_reshuffled_per_epoch():
    a = fashion_mnist.DistributedSampler(1000, 0, 2, seed=3)
    b = fashion_mnist.DistributedSampler(1000, 0, 2, seed=3)  # another process
    a.set_epoch(4)
    b.set_epoch(4)
    assert a.indices().tolist() == b.indices().tolist()
    b.set_epoch(5)
    assert a.indices().tolist() != b.indices().tolist()
    c = fashion_mnist.DistributedSampler(1000, 0, 2, seed=4)
    c.set_epoch(4)
    assert a.indices().tolist() != c.indices().tolist()


@pytest.mark.parametrize("n,size", [(10000, 2), (10000, 3), (5, 4)])
def test_evaluation_ranges_cover_the_test_set_once(n, size):
    covered = []
    for r in range(size):
        lo, hi = fashion_mnist.evaluation_range(n, r, size)
        covered.extend(range(lo, hi))
    assert covered == list(range(n))


# ---------------------------------------------------------------- data


@needs_data
def test_reader_gives_the_real_files():
    x, y = fashion_mnist.load_fashion_mnist(DATA, train=False)
    assert tuple(x.shape) == (10000, 28, 28) and tuple(y.shape) == (10000,)
    assert sorted(set(y.tolist())) == list(range(10))


def test_missing_data_names_the_package(tmp_path):
    p = subprocess.run([sys.executable, EXAMPLE, "--data", str(tmp_path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    assert p.returncode == 1
    assert "apt-get install dataset-fashion-mnist" in p.stderr
    assert "train-images-idx3-ubyte.gz" in p.stderr


def test_bad_magic_is_reported(tmp_path):
    import gzip
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        with gzip.open(tmp_path / name, "wb") as f:
            f.write(b"\x00\x00\x09\x99" + b"\x00" * 16)
    with pytest.raises(ValueError, match="magic"):
        fashion_mnist.load_fashion_mnist(str(tmp_path), train=True)


# ---------------------------------------------------------------- speedup


def record(**kw):
    r = {"ranks": 1, "images_per_second": 1000.0, "batch_size": 64,
         "steps_per_epoch": 150, "epochs": 2}
    r.update(kw)
    return r


def test_speedup_line_puts_the_ceiling_beside_the_speedup():
    one = record(ceiling_images_per_second=1600.0)
    line = fashion_mnist.speedup_line(one, record(ranks=2, images_per_second=1530.0))
    assert line == ("speedup over 1 rank: 1.53x (1000 -> 1530 images/s); ceiling of "
                    "this machine (two 1-rank runs at once): 1.60x; kolo reaches 96% "
                    "of it")


def test_speedup_line_without_a_ceiling_gives_the_efficiency():
    line = fashion_mnist.speedup_line(record(), record(ranks=2, images_per_second=1530.0))
    assert line == "speedup over 1 rank: 1.53x (1000 -> 1530 images/s; efficiency 76%)"


def test_speedup_line_names_what_the_runs_do_not_share():
    line = fashion_mnist.speedup_line(
        record(), record(ranks=2, images_per_second=1530.0, steps_per_epoch=469,
                         batch_size=32))
    assert line.endswith(" [the 1-rank run used another batch size, steps per epoch]")
    # A record without the field (an older one) is taken as it is.
    old = record()
    del old["steps_per_epoch"]
    assert "[" not in fashion_mnist.speedup_line(old, record(ranks=2))


def test_no_speedup_without_a_throughput():
    assert fashion_mnist.speedup_line(record(images_per_second=0), record(ranks=2)) is None


# ---------------------------------------------------------------- runs


def check_training_run(cmd, tmp_path, name):
    """A 1-rank record, then 2 ranks: both learn, the second reports its
    speedup over the first beside the ceiling that scripts/demo.py adds to
    the record (here: the 1-rank run counted twice, a ceiling of 2.00x)."""
    base = str(tmp_path / (name + "_1rank.json"))
    out = str(tmp_path / (name + "_2ranks.json"))
    common = ["--epochs", "2", "--max-steps", "30", "--baseline", base]
    run([KOLORUN, "-np", "1"] + cmd + common + ["--no-progress"])
    with open(base) as f:
        one = json.load(f)
    assert one["ranks"] == 1 and one["images_per_second"] > 0
    assert one["steps_per_epoch"] == 30 and one["epochs"] == 2
    with open(base, "w") as f:
        json.dump(demo.ceiling_record(one, [one, one]), f)
    p = run([KOLORUN, "-np", "2"] + cmd + common + ["--json", out])
    with open(out) as f:
        two = json.load(f)
    assert two["ranks"] == 2 and two["batch_size"] == 64
    assert two["peak_lr"] == pytest.approx(2 * two["base_lr"])  # linear scaling
    assert len(two["epoch_seconds"]) == 2
    # 60 steps of 128 images: far above chance (10%).
    assert two["test_accuracy"] > 0.6, p.stdout
    assert "[0] epoch 2/2: loss" in p.stdout
    assert "[1] epoch" not in p.stdout              # rank 0 alone reports
    speedup = re.search(r"speedup over 1 rank: ([0-9.]+)x \(([0-9]+) -> ([0-9]+) images/s\); "
                        r"ceiling of this machine \(two 1-rank runs at once\): 2\.00x; "
                        r"kolo reaches ([0-9]+)% of it\n", p.stdout)
    assert speedup, p.stdout  # and no note: the runs are of the same steps
    assert float(speedup.group(1)) == pytest.approx(
        two["images_per_second"] / one["images_per_second"], abs=0.006)
    assert int(speedup.group(4)) == round(
        50 * two["images_per_second"] / one["images_per_second"])
    assert "\repoch 1/2 [" in p.stderr                  # the progress bar


@needs_kolorun
@needs_data
def test_python_example_trains_on_two_ranks(tmp_path):
    check_training_run([sys.executable, EXAMPLE], tmp_path, "py")


@needs_kolorun
@needs_data
@pytest.mark.skipif(not CPP, reason="FASHION_MNIST_BIN not set (no libtorch example)")
def test_cpp_example_trains_on_two_ranks(tmp_path):
    check_training_run([CPP], tmp_path, "cpp")


@needs_kolorun
def test_synthetic_benchmark_runs_on_two_ranks(tmp_path):
    out = str(tmp_path / "synthetic.json")
    p = run([KOLORUN, "-np", "2", sys.executable, SYNTHETIC, "--model", "cnn",
             "--batch-size", "16", "--num-warmup-batches", "1", "--num-iters", "2",
             "--num-batches-per-iter", "2", "--json", out])
    assert "Total img/sec on 2 rank(s):" in p.stdout
    with open(out) as f:
        r = json.load(f)
    assert r["ranks"] == 2 and r["total"] == pytest.approx(2 * r["per_rank"])

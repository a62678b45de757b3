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
import subprocess
import sys

import pytest

from paths import DATA, EXAMPLE, KOLORUN, ROOT, SYNTHETIC

CPP = os.environ.get("FASHION_MNIST_BIN")

sys.path.insert(0, os.path.join(ROOT, "examples"))
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


# ---------------------------------------------------------------- runs


def check_training_run(cmd, tmp_path, name):
    """A 1-rank record, then 2 ranks: both learn, the second reports its
    speedup over the first."""
    base = str(tmp_path / (name + "_1rank.json"))
    out = str(tmp_path / (name + "_2ranks.json"))
    common = ["--epochs", "2", "--max-steps", "30", "--baseline", base]
    run([KOLORUN, "-np", "1"] + cmd + common + ["--no-progress"])
    with open(base) as f:
        one = json.load(f)
    assert one["ranks"] == 1 and one["images_per_second"] > 0
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
    assert "speedup over 1 rank:" in p.stdout
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

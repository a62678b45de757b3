"""kolo.data: the image-folder reader, prefetcher and distributed sampler of
kolo._native (kolo's C++ src/data/) behind kolo.data.ImageFolderLoader, and
examples/fashion_mnist.py / bench/synthetic.py training on a JPEG folder.

Tiny JPEG folders are written in a temporary directory with the binding of
kolo's encoder (kolo.data.encode_jpeg); pixel values are checked against
the images written, Pillow's decoder and a NumPy bilinear resize. The
end-to-end runs write Fashion-MNIST with build/bin/fmnist-to-jpeg.

Run by CTest (python_data) as one plain pytest process that starts kolorun
itself; the environment names the programs:
  KOLORUN         build/bin/kolorun (the runs are skipped when unset)
  FMNIST_TO_JPEG  build/bin/fmnist-to-jpeg (likewise)
  PYTHONPATH      build/python
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import kolo
import kolo.data as kd

from paths import DATA, EXAMPLE, KOLORUN, SYNTHETIC

FMNIST_TO_JPEG = os.environ.get("FMNIST_TO_JPEG")


# ---------------------------------------------------------------- helpers


def gradient(h, w, channels, shift):
    """A smooth uint8 image (H, W, C) that survives JPEG well."""
    y, x = np.mgrid[0:h, 0:w]
    planes = [x * 4 + y * 3 + shift * 3 + 30 * k + 10 for k in range(channels)]
    return np.stack(planes, axis=-1).astype(np.uint8)


@pytest.fixture
def folder(tmp_path):
    """root/{b_cat, a_dog, c_fish, d_empty}: classes sorted give labels 0..3;
    files made out of name order; an upper-case extension and files that
    are not JPEGs. Returns (root, {relative path: written pixels})."""
    root = tmp_path / "images"
    layout = {
        "b_cat": ["z.jpg", "m.JPEG", "a.jpg"],
        "a_dog": ["2.jpg", "10.jpg", "1.jpeg"],
        "c_fish": ["only.jpg"],
        "d_empty": [],
    }
    written = {}
    shift = 0
    for cls, files in layout.items():
        (root / cls).mkdir(parents=True)
        for name in files:
            shift += 1
            pixels = gradient(16, 24, 3, shift)
            kd.encode_jpeg(str(root / cls / name), pixels, quality=100)
            written[cls + "/" + name] = pixels
    (root / "b_cat" / "notes.txt").write_text("not an image")
    (root / "a_dog" / "x.png").write_bytes(b"\x89PNG")
    (root / "stray.jpg").write_bytes(b"a file at the top is no class")
    return str(root), written


def run(cmd, timeout=300, check=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=dict(os.environ, KOLO_TIMEOUT="60"))
    if check:
        assert p.returncode == 0, "%s\nexit %d\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(cmd), p.returncode, p.stdout, p.stderr)
    return p


# ---------------------------------------------------------------- the folder


def test_classes_sorted_labels_and_file_order(folder):
    root, _ = folder
    f = kd.ImageFolder(root, 24, 3)
    assert f.classes == ["a_dog", "b_cat", "c_fish", "d_empty"]
    rel = [os.path.relpath(f.path(i), root) for i in range(len(f))]
    assert rel == ["a_dog/1.jpeg", "a_dog/10.jpg", "a_dog/2.jpg",
                   "b_cat/a.jpg", "b_cat/m.JPEG", "b_cat/z.jpg", "c_fish/only.jpg"]
    assert [f.label(i) for i in range(len(f))] == [0, 0, 0, 1, 1, 1, 2]
    assert f.labels().tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert (f.width, f.height, f.channels) == (24, 24, 3)
    with pytest.raises(IndexError, match="7"):
        f.label(7)
    with pytest.raises(IndexError):
        f.load_batch([0, -1])


def test_batch_pixels_are_the_written_images(folder):
    root, written = folder
    f = kd.ImageFolder(root, (16, 24), 3)  # (height, width): the files' own size
    images, labels = f.load_batch([3, 0, 6])
    assert images.dtype == np.float32 and images.shape == (3, 3, 16, 24)
    assert labels.dtype == np.int64 and labels.tolist() == [1, 0, 2]
    for j, i in enumerate([3, 0, 6]):
        original = written[os.path.relpath(f.path(i), root)]
        got = images[j].transpose(1, 2, 0) * 255  # planar -> interleaved
        # quality 100: within JPEG's rounding of the smooth image
        assert np.abs(got - original).max() <= 6
        assert np.abs(got - original).mean() < 1.5


def test_batch_equals_the_decoder_resized_and_pillow(folder):
    root, _ = folder
    for channels in (1, 3):
        f = kd.ImageFolder(root, (11, 37), channels)  # height 11, width 37
        images, _ = f.load_batch(list(range(len(f))))
        assert images.shape == (len(f), channels, 11, 37)
        for i in range(len(f)):
            decoded = kd.decode_jpeg(f.path(i), channels)
            assert decoded.shape == (16, 24, channels)
            expect = kd.resize_bilinear(decoded, 37, 11)  # width, height
            assert expect.shape == (11, 37, channels)
            np.testing.assert_array_equal(
                images[i], expect.transpose(2, 0, 1).astype(np.float32) *
                np.float32(1 / 255))
    PIL = pytest.importorskip("PIL.Image")
    for i in range(len(f)):
        for channels, mode in ((1, "L"), (3, "RGB")):
            with PIL.open(f.path(i)) as im:
                ref = np.asarray(im.convert(mode)).reshape(16, 24, channels)
            ours = kd.decode_jpeg(f.path(i), channels).astype(int)
            assert np.abs(ours - ref).max() <= 1, (f.path(i), mode)


def numpy_bilinear(src, width, height):
    """The documented rule: pixel centers aligned, clamped at the borders."""
    h, w = src.shape[:2]
    sx, sy = w / width, h / height
    out = np.zeros((height, width) + src.shape[2:])
    for y in range(height):
        fy = min(max((y + 0.5) * sy - 0.5, 0.0), h - 1.0)
        y0 = int(fy)
        y1, wy = min(y0 + 1, h - 1), fy - int(fy)
        for x in range(width):
            fx = min(max((x + 0.5) * sx - 0.5, 0.0), w - 1.0)
            x0 = int(fx)
            x1, wx = min(x0 + 1, w - 1), fx - int(fx)
            out[y, x] = ((1 - wy) * ((1 - wx) * src[y0, x0] + wx * src[y0, x1]) +
                         wy * ((1 - wx) * src[y1, x0] + wx * src[y1, x1]))
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("size", [(4, 4), (7, 3), (2, 2), (1, 5)])
def test_resize_matches_bilinear_reference(size):
    src = np.array([[0, 100, 30], [200, 255, 7]], dtype=np.uint8)[..., None]
    w, h = size
    got = kd.resize_bilinear(src, w, h)
    np.testing.assert_array_equal(got, numpy_bilinear(src.astype(float), w, h))


def test_gray_and_rgb_conversion(tmp_path):
    path = str(tmp_path / "c.jpg")
    rgb = np.zeros((8, 8, 3), np.uint8)
    rgb[..., 0] = 255  # pure red
    kd.encode_jpeg(path, rgb, quality=100)
    red = kd.decode_jpeg(path, 3)
    assert abs(int(red[..., 0].mean()) - 255) <= 2 and red[..., 1:].max() <= 3
    gray = kd.decode_jpeg(path, 1)
    assert abs(int(gray.mean()) - 76) <= 2  # 0.299 * 255 (JFIF luma)
    kd.encode_jpeg(path, np.full((8, 8), 90, np.uint8), quality=100)
    assert np.abs(kd.decode_jpeg(path, 3).astype(int) - 90).max() <= 1  # gray -> RGB


# ---------------------------------------------------------------- errors


def test_missing_folder_names_the_path_and_the_tool(tmp_path):
    missing = str(tmp_path / "no-such-folder")
    with pytest.raises(FileNotFoundError) as e:
        kd.ImageFolderLoader(missing, batch_size=4, image_size=28, channels=1)
    assert missing in str(e.value) and "fmnist-to-jpeg" in str(e.value)
    empty = tmp_path / "empty"
    (empty / "class").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as e:
        kd.ImageFolder(str(empty), 28, 1)
    assert str(empty) in str(e.value) and "fmnist-to-jpeg" in str(e.value)


def test_bad_arguments(folder):
    root, _ = folder
    with pytest.raises(kolo.InvalidArgumentError, match="channels 2"):
        kd.ImageFolder(root, 8, 2)
    with pytest.raises(ValueError):
        kd.ImageFolder(root, 0, 1)
    with pytest.raises(kolo.InvalidArgumentError, match="rank 2"):
        kd.ImageFolderLoader(root, 2, 8, 1, rank=2, size=2)
    with pytest.raises(ValueError):
        kd.ImageFolderLoader(root, 0, 8, 1)
    with pytest.raises(kolo.KoloError) as e:
        kd.decode_jpeg(os.path.join(root, "nothing.jpg"), 1)
    assert e.value.code == kolo._native.ERR_IO and "nothing.jpg" in str(e.value)


def test_a_corrupt_file_fails_its_batch_after_the_earlier_ones(folder):
    root, _ = folder
    bad = os.path.join(root, "b_cat", "m.JPEG")  # sample 4
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8 truncated")
    loader = kd.ImageFolderLoader(root, batch_size=2, image_size=8, channels=1,
                                  rank=0, size=1, shuffle=False)
    it = iter(loader)
    assert next(it)[1].tolist() == [0, 0]   # samples 0, 1
    assert next(it)[1].tolist() == [0, 1]   # samples 2, 3
    with pytest.raises(kolo.InvalidArgumentError, match="m.JPEG"):
        next(it)                            # samples 4, 5
    with pytest.raises(StopIteration):      # the pipeline ended there
        next(it)


# ---------------------------------------------------------------- sharding


class MT19937_64:
    """std::mt19937_64, to check kolo's sampler independently."""

    M = (1 << 64) - 1

    def __init__(self, seed):
        self.mt = [seed & self.M]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & self.M)
        self.i = 312

    def __call__(self):
        if self.i >= 312:
            mt = self.mt
            for k in range(312):
                y = (mt[k] & 0xFFFFFFFF80000000) | (mt[(k + 1) % 312] & 0x7FFFFFFF)
                mt[k] = mt[(k + 156) % 312] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1
                                                         else 0)
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return (y ^ (y >> 43)) & self.M


def reference_permutation(n, seed, epoch):
    """src/data/distributed_sampler.cc's rule: Fisher-Yates from the back,
    rejection sampling on mt19937_64(seed * golden + epoch)."""
    rng = MT19937_64((seed * 0x9E3779B97F4A7C15 + epoch) & MT19937_64.M)
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        limit = MT19937_64.M - MT19937_64.M % bound
        x = rng()
        while x >= limit:
            x = rng()
        perm[i], perm[x % bound] = perm[x % bound], perm[i]
    return perm


def test_reference_generator_is_mt19937_64():
    g = MT19937_64(5489)
    for _ in range(9999):
        g()
    assert g() == 9981545732273789042  # the C++ standard's check value


@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5])
def test_sampler_is_kolos_permutation(seed):
    s = kd.DistributedSampler(23, 1, 3, seed)
    for epoch in (0, 1, 5):
        s.set_epoch(epoch)
        perm = reference_permutation(23, seed, epoch)
        assert s.permutation().tolist() == perm
        padded = perm + perm[:1]  # 23 -> 24
        assert s.indices().tolist() == padded[1::3]


def collect(loader, epoch):
    loader.set_epoch(epoch)
    return [(x, y) for x, y in loader]


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_shards_are_disjoint_equal_and_cover_every_image(folder, size):
    root, _ = folder  # 7 images
    f = kd.ImageFolder(root, 8, 1)
    everything = f.load_batch(list(range(7)))[0].reshape(7, -1)
    per_rank = -(-7 // size)
    for epoch in (0, 1, 2):
        shards = []
        for rank in range(size):
            loader = kd.ImageFolderLoader(root, batch_size=2, image_size=8, channels=1,
                                          rank=rank, size=size, seed=11)
            assert loader.num_samples == per_rank
            assert len(loader) == -(-per_rank // 2)
            batches = collect(loader, epoch)
            assert [len(y) for _, y in batches] == \
                [2] * (per_rank // 2) + [1] * (per_rank % 2)
            idx = loader.indices(epoch).tolist()
            shards.append(idx)
            # each batch holds the listed samples, in order
            x = np.concatenate([b[0] for b in batches]).reshape(per_rank, -1)
            y = np.concatenate([b[1] for b in batches])
            np.testing.assert_array_equal(x, everything[idx])
            assert y.tolist() == [f.label(i) for i in idx]
        flat = [i for s in shards for i in s]
        assert len({len(s) for s in shards}) == 1
        assert set(flat) == set(range(7))             # every image each epoch
        assert len(flat) - 7 == (-7) % size           # repeats: the padding only
        # disjoint positions of one permutation: rank r holds perm[r::size]
        perm = reference_permutation(7, 11, epoch)
        padded = perm + perm[:per_rank * size - 7]
        assert shards == [padded[r::size] for r in range(size)]


def test_reshuffled_per_epoch_identical_across_instances(tmp_path):
    root = tmp_path / "many"
    for c in range(3):
        (root / str(c)).mkdir(parents=True)
        for i in range(20):
            kd.encode_jpeg(str(root / str(c) / ("%02d.jpg" % i)),
                           np.full((4, 4), 10 * i, np.uint8))
    a = kd.ImageFolderLoader(str(root), 8, 4, 1, rank=0, size=2, seed=3)
    b = kd.ImageFolderLoader(str(root), 8, 4, 1, rank=0, size=2, seed=3)  # "another rank's"
    c = kd.ImageFolderLoader(str(root), 8, 4, 1, rank=0, size=2, seed=4)
    orders = [a.indices(e).tolist() for e in range(4)]
    assert len({tuple(o) for o in orders}) == 4      # a new order each epoch
    assert orders == [b.indices(e).tolist() for e in range(4)]
    assert orders[0] != c.indices(0).tolist()
    # iter() reads the next epoch unless set_epoch names one
    labels = lambda loader: np.concatenate([y for _, y in loader]).tolist()
    first, second = labels(a), labels(a)
    assert a.epoch == 2
    b.set_epoch(1)
    assert labels(b) == second and first != second
    # no shuffling: the files' order, dealt round-robin
    plain = kd.ImageFolderLoader(str(root), 8, 4, 1, rank=1, size=2, shuffle=False)
    assert plain.indices(0).tolist() == list(range(1, 60, 2))
    assert plain.indices(3).tolist() == list(range(1, 60, 2))


def test_drop_last_limit_and_close(folder):
    root, _ = folder
    loader = kd.ImageFolderLoader(root, 3, 8, 1, rank=0, size=1, drop_last=True)
    assert len(loader) == 2 and [len(y) for _, y in loader] == [3, 3]
    assert [len(y) for _, y in loader.batches(limit=1)] == [3]
    it = loader.batches()
    assert len(it) == 2
    next(it)
    it.close()                                       # stops the thread
    assert it.next() is None and it.delivered == 1
    with kd.BatchPrefetcher(loader.folder, [[0], [1], [2]], 1) as p:
        assert p.next()[1].tolist() == [0]
    assert p.next() is None
    for _ in kd.ImageFolderLoader(root, 1, 8, 1, rank=0, size=1):
        break                                        # dropped mid-epoch: no hang


def test_default_layout_is_one_rank_before_init(folder):
    root, _ = folder
    assert not kolo.is_initialized()
    loader = kd.ImageFolderLoader(root, 4, 8, 1)
    assert (loader.rank, loader.size, loader.num_samples) == (0, 1, 7)


# ---------------------------------------------------------------- runs

needs_runs = pytest.mark.skipif(not KOLORUN or not FMNIST_TO_JPEG,
                                reason="KOLORUN or FMNIST_TO_JPEG not set")
needs_data = pytest.mark.skipif(
    not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
    reason="dataset-fashion-mnist not installed")


@pytest.fixture(scope="module")
def fmnist_jpeg(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fmnist") / "jpeg")
    run([FMNIST_TO_JPEG, out, "--limit", "400"])
    return out


@needs_runs
@needs_data
def test_example_trains_on_the_image_folder_on_two_ranks(fmnist_jpeg, tmp_path):
    out = str(tmp_path / "run.json")
    p = run([KOLORUN, "-np", "2", sys.executable, EXAMPLE, "--image-folder", fmnist_jpeg,
             "--epochs", "2", "--max-steps", "6", "--batch-size", "32", "--json", out,
             "--baseline", str(tmp_path / "none.json")])
    assert ("[0] image folders: training %s/train (10 classes), test %s/test "
            "(400 images)" % (fmnist_jpeg, fmnist_jpeg)) in p.stdout
    assert "400 training images (200 per rank)" in p.stdout
    assert "[0] epoch 2/2: loss" in p.stdout and "[1] epoch" not in p.stdout
    import json
    with open(out) as f:
        r = json.load(f)
    assert r["ranks"] == 2 and len(r["epoch_seconds"]) == 2
    # 12 steps of 64 images from 400: well above chance (10%)
    assert r["test_accuracy"] > 0.3, p.stdout


@needs_runs
@needs_data
def test_example_trains_on_a_class_folder_and_tests_on_another(fmnist_jpeg, tmp_path):
    p = run([KOLORUN, "-np", "2", sys.executable, EXAMPLE, "--image-folder",
             os.path.join(fmnist_jpeg, "train"), "--test-folder",
             os.path.join(fmnist_jpeg, "test"), "--epochs", "1", "--max-steps", "2",
             "--no-progress", "--baseline", str(tmp_path / "none.json")])
    assert "test %s/test (400 images)" % fmnist_jpeg in p.stdout
    # the IDX test set (10,000 images) when only --image-folder DIR/train
    p = run([KOLORUN, "-np", "2", sys.executable, EXAMPLE, "--image-folder",
             os.path.join(fmnist_jpeg, "train"), "--epochs", "1", "--max-steps", "2",
             "--no-progress", "--baseline", str(tmp_path / "none.json")])
    assert "(IDX) (10000 images)" in p.stdout


def test_example_missing_folder_says_how_to_make_one(tmp_path):
    missing = str(tmp_path / "nowhere")
    p = run([sys.executable, EXAMPLE, "--image-folder", missing], timeout=120,
            check=False)
    assert p.returncode == 1
    assert missing in p.stderr and "fmnist-to-jpeg" in p.stderr


@needs_runs
@needs_data
@pytest.mark.parametrize("model,extra", [
    ("cnn", []),
    ("resnet18", ["--image-size", "32"]),  # 3 channels, resized 28 -> 32
])
def test_synthetic_benchmark_reads_the_image_folder(fmnist_jpeg, tmp_path, model, extra):
    if model != "cnn":
        pytest.importorskip("torchvision")
    out = str(tmp_path / "synthetic.json")
    p = run([KOLORUN, "-np", "2", sys.executable, SYNTHETIC, "--model", model,
             "--batch-size", "8", "--num-warmup-batches", "1", "--num-iters", "2",
             "--num-batches-per-iter", "2", "--image-folder", fmnist_jpeg,
             "--json", out] + extra)
    assert "[0] Data: %s/train (JPEG" % fmnist_jpeg in p.stdout
    assert "Total img/sec on 2 rank(s):" in p.stdout

"""scripts/local_mnist: Keras's mnist.load_data served from local IDX files
(the way Horovod's TensorFlow 2 examples run here without a download).

Small IDX files are written to a temporary directory. Checked: the reader
(shapes, values, gzip or plain, and the errors naming the file), the .npz
written once and atomically, and the sitecustomize import hook, first with
stand-in `keras` and `tf_keras` packages whose get_file fails like a
download (fast, no TensorFlow), then with the real Keras 3 and tf_keras.
Run by CTest (python_tf_local_mnist) with TensorFlow's interpreter.
"""

import gzip
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL = os.path.join(HERE, "..", "..", "scripts", "local_mnist")
sys.path.insert(0, LOCAL)
import idx_mnist  # noqa: E402

N_TRAIN, N_TEST = 7, 3


def write_idx(path, array, magic=None, gz=True):
    magic = magic if magic is not None else (0x800 | array.ndim)
    data = struct.pack(">I", magic) + struct.pack(">%dI" % array.ndim, *array.shape)
    data += array.astype(np.uint8).tobytes()
    with (gzip.open if gz else open)(path + (".gz" if gz else ""), "wb") as f:
        f.write(data)


@pytest.fixture
def idx_dir(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (N_TRAIN, 28, 28)),
              "y_train": rng.integers(0, 10, N_TRAIN),
              "x_test": rng.integers(0, 256, (N_TEST, 28, 28)),
              "y_test": rng.integers(0, 10, N_TEST)}
    d = tmp_path / "idx"
    d.mkdir()
    for key, (name, _) in idx_mnist._FILES.items():
        write_idx(str(d / name), arrays[key], gz=(key != "y_test"))  # one plain file
    return str(d), {k: v.astype(np.uint8) for k, v in arrays.items()}


def test_load_arrays(idx_dir):
    directory, want = idx_dir
    got = idx_mnist.load_arrays(directory)
    assert sorted(got) == ["x_test", "x_train", "y_test", "y_train"]
    for key in want:
        assert got[key].dtype == np.uint8
        np.testing.assert_array_equal(got[key], want[key])


def test_errors_name_the_file(idx_dir):
    directory, want = idx_dir
    images = os.path.join(directory, "train-images-idx3-ubyte")
    write_idx(images, want["x_train"], magic=0x801)
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.gz: IDX magic number 0x801, "
                                         r"expected 0x803"):
        idx_mnist.load_arrays(directory)
    with gzip.open(images + ".gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, N_TRAIN, 28, 28) + b"\0" * 10)
    with pytest.raises(ValueError, match=r"10 bytes of data, the header's shape \[7, 28, 28\] needs 5488"):
        idx_mnist.load_arrays(directory)
    write_idx(images, want["x_train"][:5])
    with pytest.raises(ValueError, match=r"5 train images but 7 labels"):
        idx_mnist.load_arrays(directory)
    os.unlink(images + ".gz")
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte\(.gz\).*KOLO_MNIST_DIR"):
        idx_mnist.load_arrays(directory)


def test_npz_written_once(idx_dir, tmp_path):
    directory, want = idx_dir
    cache = str(tmp_path / "cache")
    path = idx_mnist.npz_path(directory, cache)
    with np.load(path) as f:
        for key in want:
            np.testing.assert_array_equal(f[key], want[key])
    stamp = os.stat(path).st_mtime_ns
    os.utime(path, ns=(stamp - 10**9, stamp - 10**9))
    assert idx_mnist.npz_path(directory, cache) == path
    assert os.stat(path).st_mtime_ns == stamp - 10**9  # reused, not written again
    assert os.listdir(cache) == [os.path.basename(path)]  # no temporary left


STANDIN = '''
def get_file(fname=None, origin=None, **kwargs):
    raise RuntimeError("download of %s" % origin)

def load_data(path="mnist.npz"):
    import numpy as np
    {call}
    with np.load(path) as f:
        return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])
'''


def run_python(code, pythonpath, env_extra, python=sys.executable):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath), **env_extra)
    return subprocess.run([python, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


def test_hook_with_stand_in_packages(idx_dir, tmp_path):
    directory, want = idx_dir
    fake = tmp_path / "fake"
    origin = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
    calls = {"keras": 'path = get_file(fname=path, origin="%s", file_hash="abc")' % origin,
             "tf_keras": 'path = get_file(path, "%s", file_hash="abc")' % origin}
    for package, call in calls.items():
        d = fake / package / "src" / "datasets"
        d.mkdir(parents=True)
        for p in (fake / package, fake / package / "src", d):
            (p / "__init__.py").write_text("")
        (d / "mnist.py").write_text(STANDIN.format(call=call))
    chained = tmp_path / "chained"
    chained.mkdir()
    (chained / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['CHAINED_MARK'], 'w').close()\n")
    mark = tmp_path / "mark"
    code = """
        import numpy as np
        from keras.src.datasets import mnist as k3
        from tf_keras.src.datasets import mnist as k2
        for m in (k3, k2):
            (x, y), (xt, yt) = m.load_data(path="mnist-1.npz")
            print(m.__name__, x.shape, int(x.sum()), y.tolist(), xt.shape, yt.tolist())
        try:
            k3.get_file(fname="other.npz", origin="https://example.org/other.npz")
        except RuntimeError as e:
            print("other:", e)
    """
    out = run_python(code, [LOCAL, str(fake), str(chained)],
                     {"KOLO_MNIST_DIR": directory, "KERAS_HOME": str(tmp_path / "home"),
                      "CHAINED_MARK": str(mark)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for line, name in zip(lines, ("keras.src.datasets.mnist", "tf_keras.src.datasets.mnist")):
        assert line == "%s (%d, 28, 28) %d %s (%d, 28, 28) %s" % (
            name, N_TRAIN, int(want["x_train"].astype(np.int64).sum()), want["y_train"].tolist(),
            N_TEST, want["y_test"].tolist())
    assert lines[2] == "other: download of https://example.org/other.npz"
    assert os.listdir(tmp_path / "home" / "datasets")[0].endswith(".npz")
    assert mark.exists(), "the next sitecustomize on the path was not run"


@pytest.mark.parametrize("legacy", ["0", "1"])
def test_hook_with_real_keras(idx_dir, tmp_path, legacy):
    directory, want = idx_dir
    code = """
        import tensorflow as tf
        (x, y), (xt, yt) = tf.keras.datasets.mnist.load_data(path="mnist-0.npz")
        print(x.shape, x.dtype, int(x.sum()), y.tolist(), yt.tolist())
    """
    out = run_python(code, [LOCAL, os.environ.get("PYTHONPATH", "")],
                     {"KOLO_MNIST_DIR": directory, "KERAS_HOME": str(tmp_path / "home"),
                      "TF_USE_LEGACY_KERAS": legacy, "TF_CPP_MIN_LOG_LEVEL": "3",
                      "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1] == "(%d, 28, 28) uint8 %d %s %s" % (
        N_TRAIN, int(want["x_train"].astype(np.int64).sum()), want["y_train"].tolist(),
        want["y_test"].tolist())

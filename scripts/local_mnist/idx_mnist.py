"""Fashion-MNIST (or MNIST) from IDX files as the arrays, and the .npz, that
Keras's `datasets.mnist.load_data` returns and reads.

    load_arrays(directory) -> {"x_train": uint8 [60000, 28, 28], "y_train": uint8 [60000],
                               "x_test": uint8 [10000, 28, 28], "y_test": uint8 [10000]}
    npz_path(directory, cache_dir) -> the path of an .npz holding those four arrays,
                                      written on first use (atomically) and reused after.

The directory holds the four files of Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist): train-images-idx3-ubyte.gz,
train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
t10k-labels-idx1-ubyte.gz (gzipped or plain). MNIST's own IDX files have the
same names and layout, so a directory of those works too.

An IDX file is a big-endian header (magic 0x00000803 for images, 0x00000801
for labels: type byte 0x08 = unsigned byte, then the number of dimensions),
one uint32 per dimension, then the bytes. Errors name the file and what is
wrong in it.
"""

import gzip
import os
import struct
import tempfile

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
_FILES = {  # key -> (file name, IDX magic)
    "x_train": ("train-images-idx3-ubyte", 0x803),
    "y_train": ("train-labels-idx1-ubyte", 0x801),
    "x_test": ("t10k-images-idx3-ubyte", 0x803),
    "y_test": ("t10k-labels-idx1-ubyte", 0x801),
}


def read_idx(path, magic):
    """The payload of one IDX file (path, or path + ".gz") as a uint8 array
    of the header's shape."""
    for candidate in (path + ".gz", path):
        if os.path.exists(candidate):
            path = candidate
            break
    else:
        raise FileNotFoundError(
            "IDX file not found: %s(.gz) (Debian: apt-get install dataset-fashion-mnist, "
            "or set KOLO_MNIST_DIR to a directory of the four IDX files)" % path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: %d bytes, too short for an IDX header" % (path, len(data)))
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        raise ValueError("%s: IDX magic number 0x%x, expected 0x%x" % (path, got, magic))
    dims = magic & 0xFF
    header = 4 + 4 * dims
    shape = struct.unpack(">%dI" % dims, data[4:header])
    count = int(np.prod(shape))
    if len(data) - header != count:
        raise ValueError("%s: %d bytes of data, the header's shape %s needs %d"
                         % (path, len(data) - header, list(shape), count))
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def load_arrays(directory=DEFAULT_DIR):
    """The four arrays of mnist.npz (see the module's docstring)."""
    arrays = {key: read_idx(os.path.join(directory, name), magic)
              for key, (name, magic) in _FILES.items()}
    for split in ("train", "test"):
        n_x, n_y = len(arrays["x_" + split]), len(arrays["y_" + split])
        if n_x != n_y:
            raise ValueError("%s: %d %s images but %d labels" % (directory, n_x, split, n_y))
    return arrays


def npz_path(directory=DEFAULT_DIR, cache_dir=None):
    """An .npz of load_arrays(directory) in cache_dir (default: Keras's
    ~/.keras/datasets, or $KERAS_HOME/datasets), named after the directory so
    that two sources never share a file. Written once, through a temporary
    file and a rename, so that ranks starting together never read half a file."""
    if cache_dir is None:
        home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
        cache_dir = os.path.join(home, "datasets")
    os.makedirs(cache_dir, exist_ok=True)
    tag = os.path.abspath(directory).strip(os.sep).replace(os.sep, "_") or "root"
    path = os.path.join(cache_dir, "idx-%s.npz" % tag)
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".npz.tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **load_arrays(directory))
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return path


if __name__ == "__main__":
    import sys
    print(npz_path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR))

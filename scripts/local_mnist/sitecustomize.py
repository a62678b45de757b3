"""Serve Keras's `datasets.mnist.load_data` from local IDX files, for scripts
that download MNIST at run time on a machine that cannot download (Horovod's
TensorFlow 2 examples), without changing the scripts.

    PYTHONPATH=scripts/local_mnist:... python tensorflow2_keras_mnist.py
    KOLO_MNIST_DIR=DIR    the IDX files to serve (default: Debian's Fashion-MNIST,
                          /usr/share/datasets/fashion-mnist)

Python imports `sitecustomize` at start-up from the first directory of
sys.path that has one, so this directory on PYTHONPATH is all it takes. It
installs an import hook and nothing else (TensorFlow is not imported here):
when `keras.src.datasets.mnist` (Keras 3) or `tf_keras.src.datasets.mnist`
(tf_keras, TF_USE_LEGACY_KERAS=1) is loaded, the module's own `get_file`
is wrapped so that the download of mnist.npz returns instead the .npz built
from the IDX files (idx_mnist.npz_path: written once to Keras's cache,
~/.keras/datasets, and reused). `load_data` then reads it as it reads the
real file: same keys, dtypes and shapes, Fashion-MNIST's pictures in place
of the digits. Every other download goes to the original `get_file`.

Why not simply put a mnist.npz into ~/.keras/datasets: `load_data` passes
the real file's SHA-256 to `get_file`, which re-downloads any local file
whose hash differs, so no substitute file survives the check.

Python's own sitecustomize (Debian's, which installs apport's hook) is
shadowed by this one, so it is run afterwards.
"""

import importlib.abc
import importlib.machinery
import os
import runpy
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_MODULES = ("keras.src.datasets.mnist", "tf_keras.src.datasets.mnist")


def _local_get_file(original):
    def get_file(*args, **kwargs):
        origin = kwargs.get("origin", args[1] if len(args) > 1 else None)
        if origin is not None and str(origin).endswith("/mnist.npz"):
            if _HERE not in sys.path:
                sys.path.append(_HERE)
            import idx_mnist
            return idx_mnist.npz_path(os.environ.get("KOLO_MNIST_DIR", idx_mnist.DEFAULT_DIR))
        return original(*args, **kwargs)
    get_file.__wrapped__ = original
    return get_file


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then wraps the module's get_file."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        if hasattr(module, "get_file"):
            module.get_file = _local_get_file(module.get_file)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name not in _MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


def _run_next_sitecustomize():
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == _HERE:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            runpy.run_path(candidate, run_name="sitecustomize")
            return


sys.meta_path.insert(0, _Finder())
_run_next_sitecustomize()

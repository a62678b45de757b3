"""Helpers of the tf_keras_*.py tests (kolo.keras on 2 ranks under kolorun,
run by pytest: kolo_tf_test in CMakeLists.txt).

``both_flavours(checks, name, file)`` gives a test module its two tests:
``test_keras_3`` runs every function in ``checks`` with the Keras that
TensorFlow serves by default (Keras 3); ``test_tf_keras`` then shuts kolo
down and runs the same file as a script in a child process with
``TF_USE_LEGACY_KERAS=1`` (tf_keras), which joins the job again as the same
rank and runs the checks there (``main``). A check that fails prints its
traceback naming the check, the Keras and the rank, and ends the process at
once, so that the other rank's pending collectives end with a lost peer
instead of waiting.
"""

import os
import subprocess
import sys
import warnings

import numpy as np

FAILED = []  # the checks that failed in this process
LEGACY = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
FLAVOUR = "tf_keras" if LEGACY else "Keras 3"


def same_on_every_rank(hvd, arrays, what):
    """Fails unless every rank holds the same values in ``arrays``."""
    import tensorflow as tf
    for i, a in enumerate(arrays):
        a = np.asarray(a, dtype=np.float64).reshape(1, -1)
        gathered = hvd.allgather(tf.constant(a)).numpy()
        assert np.array_equal(gathered, np.repeat(gathered[:1], len(gathered), 0)), \
            "%s: array %d differs between the ranks: %s" % (what, i, gathered)


def _run_checks(checks, name):
    import tensorflow as tf
    import kolo.keras as hvd
    tf.get_logger().setLevel("ERROR")  # no slow-callback or retracing notes
    warnings.filterwarnings("ignore", message=".*HDF5 file.*")
    # Keras 3's own model.save under NumPy 2 (keras/src/backend/tensorflow/core.py).
    warnings.filterwarnings("ignore", message="__array__ implementation doesn't accept a copy")
    hvd.init()
    for check in checks:
        try:
            check(hvd)
        except BaseException as e:
            rank = hvd.rank()
            hvd.shutdown()
            FAILED.append(check.__name__)
            raise AssertionError("%s (%s): %s failed on rank %d: %s" % (
                name, FLAVOUR, check.__name__, rank, e)) from e
    return hvd


def both_flavours(checks, name, file):
    def test_keras_3():
        assert not LEGACY, "run the tf_keras checks through test_tf_keras"
        _run_checks(checks, name)

    def test_tf_keras():
        import kolo.keras as hvd
        assert not FAILED, "not run: the Keras 3 checks failed (%s)" % FAILED
        if hvd.is_initialized():
            hvd.shutdown()
        env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
        code = subprocess.run([sys.executable, file], env=env).returncode
        assert code == 0, "%s: the tf_keras checks failed (exit code %d)" % (name, code)

    return test_keras_3, test_tf_keras


def main(checks, name):
    """The child of test_tf_keras (or a direct run: the checks with the
    Keras that TF_USE_LEGACY_KERAS selects)."""
    hvd = _run_checks(checks, name)
    if hvd.rank() == 0:
        print("%s: every check passed under %s" % (name, FLAVOUR), flush=True)
    hvd.shutdown()
    return 0

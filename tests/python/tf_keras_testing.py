"""Helpers of the tf_keras_*.py tests (kolo.keras on 2 ranks under kolorun).

``run_twice(checks, name)`` runs every function in ``checks`` with the Keras
that TensorFlow serves (Keras 3), shuts kolo down, then runs this same
script again in a child process with ``TF_USE_LEGACY_KERAS=1`` (tf_keras),
which joins the job as the same rank. Each check names itself when it
fails; the script exits non-zero and prints "<name>: FAILED" then, else
"<name>: every check passed under Keras 3 and tf_keras" (rank 0).
"""

import os
import subprocess
import sys
import traceback

import numpy as np

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


def quiet():
    """No TensorFlow / Keras chatter in the test's output (slow-callback
    and retracing notes, the HDF5 format note)."""
    import warnings
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    warnings.filterwarnings("ignore", message=".*HDF5 file.*")


def run_twice(checks, name):
    import kolo.keras as hvd
    quiet()
    hvd.init()
    import time
    for check in checks:
        start = time.time()
        try:
            check(hvd)
            if os.environ.get("KOLO_TEST_TIMES") and hvd.rank() == 0:
                print("%s %s: %.1f s" % (FLAVOUR, check.__name__, time.time() - start), flush=True)
        except Exception:
            print("%s (%s): check %s failed on rank %d:\n%s" % (
                name, FLAVOUR, check.__name__, hvd.rank(), traceback.format_exc()), flush=True)
            print("%s: FAILED" % name, flush=True)
            os._exit(1)  # the other rank's pending collectives end with a peer lost, not a hang
    rank = hvd.rank()
    hvd.shutdown()
    if LEGACY:
        return 0
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    code = subprocess.run([sys.executable] + sys.argv, env=env).returncode
    if code == 0 and rank == 0:
        print("%s: every check passed under Keras 3 and tf_keras" % name, flush=True)
    elif code != 0:
        print("%s: FAILED" % name, flush=True)
    return code

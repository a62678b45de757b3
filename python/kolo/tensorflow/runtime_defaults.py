"""kolo's runtime settings for a TensorFlow process, applied when
kolo.tensorflow is imported (before ``init`` reads the environment).

A TensorFlow rank keeps its cores busy with its own compute threads (its
intra-op pool), so the runtime's background thread, which exchanges the
gradients while the backward pass goes on, competes with them for every
cycle it spends. kolo's general default suits a rank whose cores are
otherwise idle while it communicates, and costs a TensorFlow rank compute:

- ``KOLO_RUNTIME_SPIN_US`` (50): the background thread busy-polls that long
  in every wait for another rank before it sleeps on the peer's doorbell.
  Here it is 0: the thread sleeps at once and the core goes to TensorFlow.

Measured on the 2-core bench host (Keras CNN of bench/tf_scaling.sh, 2
ranks, docs/tensorflow.md "Performance"): the background thread's CPU time
per step fell from about 3 ms to about 1.8 ms. Larger shared-memory
chunks (``KOLO_SHM_CHUNK_BYTES`` 1 MiB) saved about as much alone but
nothing more with it, and every rank of a host must use the same chunk
size, so a job mixing kolo.torch and kolo.tensorflow ranks would have to
set it for all: it stays at kolo's default. A value already in the
environment (the user's, or kolorun's ``-x``) is kept.
"""

import os

DEFAULTS = {
    "KOLO_RUNTIME_SPIN_US": "0",
}


def apply(environ=None):
    """Sets each of DEFAULTS in ``environ`` (os.environ) that is not set;
    returns the names it set."""
    environ = os.environ if environ is None else environ
    applied = []
    for name, value in DEFAULTS.items():
        if name not in environ:
            environ[name] = value
            applied.append(name)
    return applied

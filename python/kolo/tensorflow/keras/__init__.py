"""kolo.tensorflow.keras is kolo.keras (as horovod.tensorflow.keras is
horovod.keras' TensorFlow form): this module replaces itself, and its
submodules, with kolo.keras' in sys.modules, so that both names give the
same classes."""

import sys

import kolo.keras as _keras
import kolo.keras.callbacks  # noqa: F401
import kolo.keras.elastic  # noqa: F401

for _sub in ("callbacks", "elastic"):
    sys.modules[__name__ + "." + _sub] = sys.modules["kolo.keras." + _sub]
sys.modules[__name__] = _keras

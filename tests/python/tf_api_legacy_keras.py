"""tf_api.py's Keras checks (SyncBatchNormalization against
BatchNormalization over the concatenated batch, PartialDistributedGradientTape's
local layers, TensorFlowKerasState and the run loop) under tf_keras, the
Keras 2 that TensorFlow 2.16+ selects with TF_USE_LEGACY_KERAS=1.

  build/bin/kolorun -np 2 .venv/bin/python tests/python/tf_api_legacy_keras.py
"""

import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

import tf_api  # noqa: E402
from tf_api import (  # noqa: E402,F401  (pytest collects these)
    test_elastic_keras_state_and_run_loop, test_partial_tape_keeps_local_layers_local,
    test_sync_batch_norm_equals_batch_norm_over_the_global_batch)

NAMES = ["test_elastic_keras_state_and_run_loop", "test_partial_tape_keeps_local_layers_local",
         "test_sync_batch_norm_equals_batch_norm_over_the_global_batch"]


def test_keras_is_tf_keras():
    assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__


if __name__ == "__main__":
    test_keras_is_tf_keras()
    tf_api.main(NAMES)

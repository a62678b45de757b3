"""kolo.keras.load_model: a saved Keras model whose optimizer becomes a
DistributedOptimizer with its saved state.

The model is loaded by Keras itself (``keras.models.load_model``: the
``.keras`` format in Keras 3; ``.keras``, HDF5 or SavedModel in tf_keras),
then its optimizer is made distributed in place (its class becomes the
distributed subclass of its own class), so the optimizer's variables and
iteration count loaded from the file are the ones training goes on with.
A DistributedOptimizer saves as the plain optimizer it wraps (same class
name and module), so the file also loads without kolo.

``custom_optimizers`` (optimizer classes the file names) and
``custom_objects`` are passed on to Keras.
"""

import tensorflow as tf

import kolo.tensorflow as _tf
from kolo.keras.optimizer import distributed_in_place, is_distributed


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=_tf.Compression.none, legacy_opts=False):
    """Loads the Keras model at ``filepath`` with its optimizer wrapped as
    ``DistributedOptimizer(optimizer, compression=compression)``.
    ``legacy_opts`` is accepted for Horovod's signature (tf_keras' loader
    finds legacy optimizers by itself)."""
    objects = {}
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    objects.update(custom_objects or {})
    model = tf.keras.models.load_model(filepath, custom_objects=objects or None)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not is_distributed(optimizer):
        distributed_in_place(
            optimizer, name=None, compression=compression, sparse_as_dense=False,
            gradient_predivide_factor=1.0, op=_tf.Average, backward_passes_per_step=1,
            average_aggregated_gradients=False, groups=None, process_set=_tf.global_process_set,
            scale_local_gradients=True)
    return model

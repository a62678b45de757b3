"""SyncBatchNormalization: Keras batch normalization whose batch statistics
are computed over the whole global batch (every rank's), not each rank's
slice of it (Horovod's hvd.SyncBatchNormalization).

It subclasses the BatchNormalization of tf.keras as TensorFlow resolves it:
Keras 3's, or tf_keras's when TF_USE_LEGACY_KERAS=1 (their ``_moments``
hooks differ; both are overridden here). In training, each rank computes
its local moments (mean m_r, variance v_r over n_r elements per channel),
then one allreduce (Sum) of [n_r m_r, n_r (v_r + m_r^2), n_r] gives the
global mean M = sum n_r m_r / N and variance sum n_r (v_r + m_r^2) / N - M^2
(Var[X] = E[X^2] - E[X]^2), N = sum n_r. Unlike Horovod, which averages the
ranks' moments with equal weights, ranks with different batch sizes are
weighted by their element counts. The moving averages then follow the
global moments on every rank, so they stay equal. Inference uses the
moving averages and no communication. With one rank it is
BatchNormalization.
"""

import tensorflow as tf

from kolo.tensorflow import errors
from kolo.tensorflow.mpi_ops import Sum, _allreduce, size

_BatchNormalization = tf.keras.layers.BatchNormalization
# Keras 3's layer has _moments(inputs, mask); tf_keras's has
# _moments(inputs, reduction_axes, keep_dims, mask=None) and a `fused` mode
# (which computes its moments inside one kernel: it must stay off).
_LEGACY_KERAS = _BatchNormalization.__module__.startswith("tf_keras")


def _global_moments(inputs, mean, variance, mask):
    """The allreduce of the module docstring; ``mean`` and ``variance``
    are this rank's, of any shape (kept)."""
    dtype = mean.dtype
    if mask is None:
        count = tf.cast(tf.size(inputs), dtype) / tf.cast(tf.size(mean), dtype)
    else:  # Keras 3: the mask covers every axis but the channel axis
        count = tf.reduce_sum(tf.cast(mask, dtype))
    shape = tf.shape(mean)
    flat_mean = tf.reshape(mean, [-1])
    flat_sq = tf.reshape(variance, [-1]) + tf.square(flat_mean)
    stack = tf.concat([count * flat_mean, count * flat_sq, tf.reshape(count, [1])], 0)
    total = _allreduce(stack, op=Sum)
    n = tf.size(flat_mean)
    total_count = total[2 * n]
    global_mean = total[:n] / total_count
    global_var = total[n:2 * n] / total_count - tf.square(global_mean)
    return tf.reshape(global_mean, shape), tf.reshape(global_var, shape)


class SyncBatchNormalization(_BatchNormalization):
    """BatchNormalization over the global batch (module docstring). Takes
    BatchNormalization's arguments; ``fused`` may only be False."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise errors.invalid_argument(
                "SyncBatchNormalization does not support fused=%r (the fused "
                "kernel computes the moments itself); leave fused=False" % (fused,))
        if kwargs.get("synchronized"):
            raise errors.invalid_argument(
                "SyncBatchNormalization: synchronized=True is Keras' "
                "tf.distribute synchronization; kolo synchronizes already")
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        if _LEGACY_KERAS:
            kwargs["fused"] = False
        super().__init__(**kwargs)

    def _moments(self, inputs, *args, **kwargs):
        mean, variance = super()._moments(inputs, *args, **kwargs)
        if size() == 1:
            return mean, variance
        mask = kwargs.get("mask")
        if mask is None and args and not _LEGACY_KERAS:
            mask = args[0]  # Keras 3: _moments(inputs, mask)
        elif mask is None and len(args) > 2:
            mask = args[2]  # tf_keras: _moments(inputs, axes, keep_dims, mask)
        return _global_moments(inputs, mean, variance, mask)

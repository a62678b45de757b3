"""Gradient compression for allreduce, as in Horovod: ``Compression.none``
and ``Compression.fp16`` (floating-point tensors travel as float16 and come
back in their own dtype; other dtypes pass unchanged)."""

import tensorflow as tf

from kolo.compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Sends floating-point tensors (float32, float64, bfloat16) as float16,
    half the bytes of float32; the context is the original dtype."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if dtype.is_floating and dtype != tf.float16:
            return tf.cast(tensor, tf.float16), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """The compressors by Horovod's names."""
    none = NoneCompressor
    fp16 = FP16Compressor

"""Gradient compression for allreduce, as in Horovod: ``Compression.none``
and ``Compression.fp16`` (floating-point tensors travel as float16 and come
back in their own dtype; other dtypes pass unchanged)."""

import torch

from kolo.compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes)."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point and dtype != torch.float16:
            return tensor.to(torch.float16), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    """The compressors by Horovod's names."""
    none = NoneCompressor
    fp16 = FP16Compressor

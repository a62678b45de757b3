"""Gradient compression for allreduce, as in Horovod, framework-neutral
part: the Compressor interface and NoneCompressor. Each binding adds its
FP16Compressor (kolo.torch.compression, kolo.tensorflow.compression)."""


class Compressor:
    """Interface: compress() returns (tensor to send, context);
    decompress(received, context) returns the tensor in the caller's form."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor

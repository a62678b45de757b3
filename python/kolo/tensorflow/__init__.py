"""kolo.tensorflow: Horovod's TensorFlow API on kolo's runtime (the op layer
for now; see mpi_ops)."""

from kolo.tensorflow.mpi_ops import *  # noqa: F401,F403
from kolo.tensorflow.mpi_ops import (  # noqa: F401
    _allreduce, _grouped_allreduce, _reducescatter, _grouped_reducescatter,
    _executing_eagerly, _normalize_name)

allreduce = _allreduce
grouped_allreduce = _grouped_allreduce
reducescatter = _reducescatter
grouped_reducescatter = _grouped_reducescatter

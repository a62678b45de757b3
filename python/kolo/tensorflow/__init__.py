"""kolo.tensorflow: Horovod's TensorFlow API on kolo's runtime.

A Horovod TensorFlow 2 script changes only its import line::

    import kolo.tensorflow as hvd
    hvd.init()
    ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    ...
    hvd.broadcast_variables(model.variables, root_rank=0)

Layers: mpi_ops (the TensorFlow op library: the collectives as real
TensorFlow ops, eager and in tf.function / TF1 graphs, with gradients) and,
above it, collectives (allreduce with compression and tf.IndexedSlices,
grouped forms, reducescatter), functions (broadcast_variables, object
broadcast and gather), gradients (the gradient reduction shared by the tape,
the optimizer and kolo.keras), tape (DistributedGradientTape), optimizer
(DistributedOptimizer for tf.compat.v1 optimizers), sync_batch_norm and
elastic. Process sets are kolo.process_sets' (shared with kolo.torch).
See docs/tensorflow.md. Importing it sets kolo's runtime setting for TensorFlow
ranks unless the environment has it (runtime_defaults).
"""

from kolo.tensorflow import runtime_defaults as _runtime_defaults

_runtime_defaults.apply()

from kolo.tensorflow.mpi_ops import (  # noqa: F401  (Horovod's names)
    Average, Sum, Min, Max, Product, Adasum,
    allgather, grouped_allgather, broadcast, broadcast_, alltoall, join, barrier,
    _allreduce, _grouped_allreduce, _reducescatter, _grouped_reducescatter,
    init, shutdown, is_initialized, start_timeline, stop_timeline,
    size, local_size, cross_size, rank, local_rank, cross_rank,
    rank_op, local_rank_op, size_op, local_size_op, process_set_included_op,
    mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
    nccl_built, ddl_built, ccl_built, cuda_built, rocm_built)
from kolo.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                               remove_process_set, global_process_set)
from kolo.tensorflow import errors  # noqa: F401
from kolo.tensorflow.errors import (AdasumNotSupportedError,  # noqa: F401
                                    HorovodInternalError, HostsUpdatedInterrupt)
from kolo.tensorflow.util import _executing_eagerly, _make_subgraph  # noqa: F401
from kolo.tensorflow import util  # noqa: F401  (hvd.util._executing_eagerly)
from kolo.tensorflow.compression import Compression, Compressor  # noqa: F401
from kolo.tensorflow.collectives import (  # noqa: F401
    allreduce, grouped_allreduce, reducescatter, grouped_reducescatter)
from kolo.tensorflow.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_object_fn, broadcast_variables)
from kolo.tensorflow.gradients import _make_allreduce_grads_fn  # noqa: F401
from kolo.tensorflow.gradient_aggregation import LocalGradientAggregationHelper  # noqa: F401
from kolo.tensorflow.gradient_aggregation_eager import (  # noqa: F401
    LocalGradientAggregationHelperEager)
from kolo.tensorflow.tape import (DistributedGradientTape,  # noqa: F401
                                  PartialDistributedGradientTape)
from kolo.tensorflow.optimizer import DistributedOptimizer  # noqa: F401
from kolo.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from kolo.tensorflow import elastic  # noqa: F401,E402

import tensorflow as _tf


def is_homogeneous():
    """Whether every host runs the same number of ranks."""
    return size() == local_size() * cross_size()


def broadcast_global_variables(root_rank):
    """TF1 graph mode: the op that broadcasts every global variable
    (tf.compat.v1.global_variables()) from root_rank. Eagerly there are no
    global variables: RuntimeError, use broadcast_variables(model.variables)."""
    if _executing_eagerly():
        raise RuntimeError(
            "broadcast_global_variables() does not support eager execution; "
            "use broadcast_variables(<model and optimizer variables>, root_rank)")
    return broadcast_variables(_tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(_tf.compat.v1.train.SessionRunHook):
    """TF1 session hook: broadcasts the global variables from root_rank once
    the session is created (consistent initialisation or restore)."""

    def __init__(self, root_rank, device=''):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op = None

    def begin(self):
        if self.bcast_op is None or \
                self.bcast_op.graph is not _tf.compat.v1.get_default_graph():
            with _tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)

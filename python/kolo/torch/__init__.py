"""kolo.torch: Horovod's PyTorch API on kolo's runtime.

A Horovod script changes only its import line::

    import kolo.torch as hvd
    hvd.init()
    torch.manual_seed(hvd.rank())
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Pure Python over the native module ``kolo._native`` (which binds kolo's C
API and never torch's headers), so one build serves every PyTorch version.
Tensors are CPU tensors, or CUDA tensors (one device per call) in a kolo
built with CUDA: those go to the runtime's device calls on the caller's
current stream (kolo.torch.device, docs/gpu.md); a CUDA tensor given to a
build without CUDA raises InvalidArgumentError saying so. See
docs/python.md.
"""

from kolo import _native
from kolo import (KoloError, MismatchError, PeerLostError, KoloTimeoutError,
                  NotInitializedError, InvalidArgumentError)

from kolo.torch import process_sets as _process_sets
from kolo import _ops
from kolo.torch.collectives import (
    Average, Sum, Min, Max, Product, Adasum,
    allreduce_async, allreduce_async_,
    grouped_allreduce_async, grouped_allreduce_async_, sparse_allreduce_async,
    allgather_async, grouped_allgather_async,
    broadcast_async, broadcast_async_,
    alltoall_async, reducescatter_async, grouped_reducescatter_async,
    synchronize, poll, join, barrier)
# Whether the fast path reads tensors natively (tests and benchmarks).
from kolo.torch.collectives import _native_reader_active  # noqa: F401
from kolo.torch.differentiable import (
    allreduce, allreduce_, grouped_allreduce, grouped_allreduce_,
    allgather, grouped_allgather, broadcast, broadcast_, alltoall,
    reducescatter, grouped_reducescatter)
from kolo.torch.compression import Compression, Compressor
from kolo.torch.errors import (AdasumNotSupportedError, HorovodInternalError,
                               HostsUpdatedInterrupt)
from kolo.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                  broadcast_object, allgather_object,
                                  metric_average)
from kolo.torch.optimizer import DistributedOptimizer
from kolo.torch.point_to_point import send, recv, isend, irecv
from kolo.torch.process_sets import (ProcessSet, add_process_set,
                                     remove_process_set, global_process_set)
from kolo.torch.sync_batch_norm import SyncBatchNorm
from kolo.torch import lr  # noqa: F401  (hvd.lr.LRSchedule, hvd.lr.LARS)
from kolo.torch import elastic  # noqa: F401,E402  (hvd.elastic.run, TorchState, ...)
from kolo.torch import checkpoint  # noqa: F401,E402  (save, load)


from kolo.basics import (  # noqa: E402,F401  (the job: shared with kolo.tensorflow)
    init, shutdown, is_initialized, size, rank, local_size, local_rank, cross_size,
    cross_rank, mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
    nccl_built, cuda_built, rocm_built, ddl_built, ccl_built, start_timeline,
    stop_timeline, straggler_report)

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
Tensors are CPU tensors: no collective moves CUDA memory yet, so a CUDA
tensor raises InvalidArgumentError (also in a build with CUDA, whose
kernels are built but not yet used by the collectives; docs/gpu.md). See
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
from kolo.torch.process_sets import (ProcessSet, add_process_set,
                                     remove_process_set, global_process_set)
from kolo.torch.sync_batch_norm import SyncBatchNorm
from kolo.torch import lr  # noqa: F401  (hvd.lr.LRSchedule, hvd.lr.LARS)
from kolo.torch import elastic  # noqa: F401,E402  (hvd.elastic.run, TorchState, ...)
from kolo.torch import checkpoint  # noqa: F401,E402  (save, load)


def init(comm=None, process_sets=None):
    """Starts kolo (rendezvous with the other ranks, background runtime).
    Calling it again while initialised does nothing. ``process_sets``: a
    list of ProcessSet to add (every rank passes the same list)."""
    if comm is not None:
        raise InvalidArgumentError(
            "init(comm=...) is not supported: kolo takes its ranks from the "
            "launcher's environment; use process sets for subsets")
    if not _native.is_initialized():
        _native.init()
    for ps in process_sets or []:
        add_process_set(ps)


def shutdown():
    """Stops kolo on this rank; pending operations fail."""
    _ops.forget_all()
    _process_sets._forget_all()
    if _native.is_initialized():
        _native.shutdown()


def is_initialized():
    return bool(_native.is_initialized())


def rank():
    return _native.rank()


def size():
    return _native.size()


def local_rank():
    return _native.local_rank()


def local_size():
    return _native.local_size()


def cross_rank():
    return _native.cross_rank()


def cross_size():
    return _native.cross_size()


def start_timeline(file_path, mark_cycles=False):
    """Writes a Chrome-trace timeline (open in Perfetto) to ``file_path``."""
    del mark_cycles
    _native.start_timeline(file_path)


def stop_timeline():
    _native.stop_timeline()


def straggler_report(process_set=global_process_set):
    """Per rank: operations, times arrived last, mean and max lag (seconds)."""
    return _native.straggler_report(
        _process_sets._native_id(process_set, "straggler_report"))


def mpi_threads_supported():
    return True


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """The NCCL version code behind the collectives (0: none), from the C ABI."""
    return _native.nccl_built()


def cuda_built():
    """True when libkolo was built with CUDA (KOLO_WITH_CUDA), from the C ABI."""
    return _native.cuda_built()


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False

"""The job as every framework binding sees it: init, shutdown, the layout
(size, rank, local and cross), what the build has (*_built, Horovod's
names), the timeline and the straggler report. kolo.torch and
kolo.tensorflow re-export these: Horovod's modules each have them, and a
job started through one binding is the job of the other.
"""

from kolo import _native
from kolo import _ops
from kolo import errors as _errors
from kolo import process_sets as _process_sets
from kolo.process_sets import add_process_set, global_process_set


def init(comm=None, process_sets=None):
    """Starts kolo on this rank (rendezvous, background runtime). Again while
    initialised: nothing. ``process_sets``: ProcessSets to add (the same on
    every rank). ``comm`` (an MPI communicator) is not supported."""
    if comm is not None:
        raise _errors.invalid_argument(
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


def size():
    return _native.size()


def rank():
    return _native.rank()


def local_size():
    return _native.local_size()


def local_rank():
    return _native.local_rank()


def cross_size():
    return _native.cross_size()


def cross_rank():
    return _native.cross_rank()


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
    """NCCL's version code when NCCL is usable as a backend (a CUDA build
    where libnccl.so.2, 2.14.3 or later, loads), else 0: as Horovod's."""
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


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "cuda_built", "rocm_built", "ddl_built",
    "ccl_built", "start_timeline", "stop_timeline", "straggler_report",
]

"""kolo: collectives for distributed training (docs/python.md).

``kolo._native`` binds kolo's C API (tensors as data addresses plus shape and
dtype); ``kolo.numpy`` runs collectives on NumPy arrays; ``kolo.torch`` is
the Horovod-compatible PyTorch API.

    import kolo
    kolo.init()
    print(kolo.rank(), kolo.size())
"""

import atexit as _atexit

try:
    from kolo import _native
except ImportError as _e:  # pragma: no cover - depends on the build
    raise ImportError(
        "kolo's native module (kolo._native) is missing or does not load: build "
        "kolo (`make`) and set PYTHONPATH=<build>/python, or `pip install "
        "--no-build-isolation .`; it is built for Debian's /usr/bin/python3. "
        f"Cause: {_e}"
    ) from _e

from kolo._native import (  # noqa: F401  (re-exported)
    KoloError,
    MismatchError,
    PeerLostError,
    KoloTimeoutError,
    NotInitializedError,
    InvalidArgumentError,
    init,
    shutdown,
    is_initialized,
    rank,
    size,
    local_rank,
    local_size,
    cross_rank,
    cross_size,
    start_timeline,
    stop_timeline,
    straggler_report,
    process_set_create,
    process_set_destroy,
    process_set_rank,
    process_set_size,
)

__all__ = [
    "KoloError",
    "MismatchError",
    "PeerLostError",
    "KoloTimeoutError",
    "NotInitializedError",
    "InvalidArgumentError",
    "init",
    "shutdown",
    "is_initialized",
    "rank",
    "size",
    "local_rank",
    "local_size",
    "cross_rank",
    "cross_size",
    "start_timeline",
    "stop_timeline",
    "straggler_report",
    "process_set_create",
    "process_set_destroy",
    "process_set_rank",
    "process_set_size",
]


def _shutdown_at_exit():
    # A process that never called shutdown() leaves the job cleanly (the
    # other ranks' pending operations fail with a clear error, not a
    # timeout). Errors here must not mask the program's own exit status.
    try:
        shutdown()
    except Exception:  # noqa: BLE001
        pass


_atexit.register(_shutdown_at_exit)

"""Elastic training with Horovod's API: ``hvd.elastic.run``,
``hvd.elastic.TorchState``, ``hvd.elastic.ElasticSampler``.

``run(func)`` calls ``func(state, ...)`` until it returns. Before each call
the state is synchronized from rank 0 (unless the last interruption said it
need not be). When a peer is lost (kolo.PeerLostError, kolo.KoloTimeoutError,
or a plain HorovodInternalError raised by the program) the state is rolled
back to its last commit; when the hosts change (HostsUpdatedInterrupt) it is
kept. Either way kolo is shut down and initialized again (a new generation
of the job), the state's reset hooks and the registered callbacks run, and
``func`` is called again. Errors that say the program itself is wrong
(InvalidArgumentError, MismatchError, ...) are not retried: they propagate.
The loop, ``State`` and ``ObjectState`` are kolo.elastic's (shared with
kolo.tensorflow); this package adds the torch objects. See docs/elastic.md.
"""

from kolo.elastic import is_peer_failure as _is_peer_failure  # noqa: F401
from kolo.elastic import run_fn as _run_fn
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import (ObjectState, State, TorchState,  # noqa: F401
                                      notify_hosts_updated)
from kolo.torch.errors import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HorovodInternalError", "HostsUpdatedInterrupt", "notify_hosts_updated"]


def _reset():
    import kolo.torch as hvd
    hvd.shutdown()
    hvd.init()


def run(func):
    """Decorator for the elastic training function ``func(state, ...)``.

    The function must not start with a collective before it touches the
    state: new ranks sync the state first, so collectives belong inside the
    training loop, as in Horovod."""
    return _run_fn(func, _reset)

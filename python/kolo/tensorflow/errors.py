"""kolo.tensorflow's exceptions: the framework-neutral kolo.errors, and
``not_supported`` for arguments kolo refuses the way Horovod does (a
kolo.InvalidArgumentError that is also a NotImplementedError, the class
Horovod raises there)."""

import kolo
from kolo.errors import *  # noqa: F401,F403  (re-exported)
from kolo.errors import (  # noqa: F401
    INVALID_ARGUMENT, MISMATCH, AdasumNotSupportedError, HorovodInternalError,
    HostsUpdatedInterrupt, _with_code, adasum_not_supported, invalid_argument,
    mismatch)

try:
    class NotSupportedError(kolo.InvalidArgumentError, NotImplementedError):
        """A combination of arguments kolo (like Horovod) does not support."""
except TypeError:  # exception layouts that cannot be combined
    class NotSupportedError(kolo.InvalidArgumentError):
        """A combination of arguments kolo (like Horovod) does not support."""


def not_supported(message):
    """A NotSupportedError carrying ``message``."""
    return _with_code(NotSupportedError(message), INVALID_ARGUMENT)

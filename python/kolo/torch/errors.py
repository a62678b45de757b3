"""kolo.torch's exceptions: the framework-neutral kolo.errors."""

from kolo.errors import *  # noqa: F401,F403  (re-exported)
from kolo.errors import (  # noqa: F401
    INVALID_ARGUMENT, MISMATCH, AdasumNotSupportedError, HorovodInternalError,
    HostsUpdatedInterrupt, adasum_not_supported, invalid_argument, mismatch)

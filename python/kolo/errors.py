"""Exceptions raised by kolo's framework bindings (kolo.torch,
kolo.tensorflow, kolo.keras) themselves, as kolo's own exception classes.

The native module raises ``kolo.KoloError`` subclasses with the runtime's
message (``MismatchError``, ``PeerLostError``, ...). Checks done in Python
(unsupported dtype or device, Adasum, bad arguments) raise the same classes so
callers catch one family.
"""

import kolo

# Codes of kolo_error (include/kolo/kolo.h).
INVALID_ARGUMENT = 1
MISMATCH = 4


def _with_code(err, code):
    try:
        if getattr(err, "code", None) is None:
            err.code = code
    except (AttributeError, TypeError):
        pass
    return err


def invalid_argument(message):
    """A kolo.InvalidArgumentError carrying ``message``."""
    return _with_code(kolo.InvalidArgumentError(message), INVALID_ARGUMENT)


def mismatch(message):
    """A kolo.MismatchError carrying ``message``."""
    return _with_code(kolo.MismatchError(message), MISMATCH)


try:
    class AdasumNotSupportedError(kolo.InvalidArgumentError, NotImplementedError):
        """Adasum is not implemented by kolo (a KoloError and a
        NotImplementedError)."""
except TypeError:  # exception layouts that cannot be combined
    class AdasumNotSupportedError(kolo.InvalidArgumentError):
        """Adasum is not implemented by kolo."""


# Horovod's exception names. Every error of a kolo operation is a KoloError
# (a RuntimeError), as every error of a Horovod operation is a
# HorovodInternalError: the two names are one class.
HorovodInternalError = kolo.KoloError


class HostsUpdatedInterrupt(RuntimeError):
    """The set of hosts of an elastic job changed (Horovod's name; kolo
    raises it from elastic training). ``skip_sync``: whether the state need
    not be synchronized again."""

    def __init__(self, skip_sync=False):
        super().__init__("the hosts of the job changed")
        self.skip_sync = skip_sync


def adasum_not_supported(what):
    return _with_code(AdasumNotSupportedError(
        "%s: op=Adasum is not supported by kolo; use Average (the default) or "
        "Sum" % what), INVALID_ARGUMENT)

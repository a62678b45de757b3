"""Telling kolorun that this rank runs a study, so its loss fails only its
team's trial (rendezvous/study_declaration.h, docs/hpo.md).

``declared()`` wraps ``Study.optimize`` and ``PBT.run`` on every rank:
kolorun counts the rank in on entry and out on the way out (a return or an
exception: a rank that fails on an error of its own afterwards ends the
job as usual). A rank killed inside stays counted in, which is what kolorun
reads when it reaps it: it notes the loss and the job goes on. Rank 0's
failure ends the job whatever it declared. Without kolorun (mpirun, srun,
torchrun) nothing is declared: the launcher's own policy applies.
"""

import contextlib

import kolo
from kolo import _native


@contextlib.contextmanager
def declared():
    """Holds this rank's declaration for the ``with`` block; yields whether
    kolorun was told."""
    told = _native.study_declare(True)
    try:
        yield told
    finally:
        if told:
            try:
                _native.study_declare(False)
            except kolo.KoloError:  # kolorun is gone: nothing left to tell
                pass

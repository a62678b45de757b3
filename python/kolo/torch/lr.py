"""Learning-rate rules (scaling, warm-up, decay) and LARS: see kolo.lr,
which this module re-exports for ``import kolo.torch as hvd; hvd.lr``."""

from kolo.lr import (scale_factor, scale_lr, LRSchedule, scheduler,  # noqa: F401
                     LARS)

"""kolo.torch's process sets: the framework-neutral kolo.process_sets."""

from kolo.process_sets import (  # noqa: F401  (re-exported)
    ProcessSet, add_process_set, remove_process_set, global_process_set,
    _forget_all, _native_id)

__all__ = ["ProcessSet", "add_process_set", "remove_process_set",
           "global_process_set"]

"""kolo.torch.lms: large model support. Models and batches bigger than the
device's memory train by moving what backward needs later to host memory
(docs/lms.md).

    import kolo.torch as hvd
    from kolo.torch import lms
    hvd.init()
    model = Net().cuda()
    handle = lms.enable(model, limit_bytes=12 << 30, prefetch=2)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters()), ...)
    opt = handle.offload_optimizer(opt)     # state and update on the host
    for x, y in data:
        loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()

``enable(model, limit_bytes=None, prefetch=2,
offload=("activations", "optimizer"))`` returns an ``Lms`` handle.

- "activations": the model's forward runs under saved-tensor hooks
  (activations.py). Once the device's usage passes ``limit_bytes`` (on a
  GPU ``torch.cuda.memory_allocated``; on the CPU the bytes of the saved
  storages the hooks hold), saved tensors are copied to (pinned) host
  memory, oldest first, and brought back ahead of their backward use,
  ``prefetch`` storages ahead, in reverse save order (planner.py); on a
  GPU the copies run on a side stream, ordered by events (movers.py).
  Parameters are never moved (they live anyway) and storages under
  ``handle.min_offload_bytes`` (64 KiB) stay. ``limit_bytes=None``: 80% of
  the GPU's memory; on the CPU no limit (nothing moves).
- "optimizer": ``handle.offload_optimizer(opt)`` (for a torch optimizer,
  kolo.torch.DistributedOptimizer or kolo.torch.zero.DistributedOptimizer)
  keeps the optimizer state and master parameters in host memory and runs
  the update on the CPU (optimizer.py). Without "optimizer" in
  ``offload`` it raises.
- Timeline: copies are spans on tracks "lms copies" and "lms optimizer",
  the model's forward on "lms compute" (docs/lms.md).
- ``handle.stats()``: the planner's counts (saved, offloaded, prefetched,
  fetched on demand, peak resident bytes, ...). ``handle.disable()``
  restores the model's forward.

Bad arguments raise kolo.InvalidArgumentError naming the argument and the
value given.
"""

import math
import numbers

import torch

from kolo.torch import errors
from kolo.torch.lms import spans
from kolo.torch.lms.activations import ActivationOffload
from kolo.torch.lms.movers import CpuMover, CudaMover
from kolo.torch.lms.optimizer import offload_optimizer, placement
from kolo.torch.lms.planner import Planner  # noqa: F401

KINDS = ("activations", "optimizer")
MIN_OFFLOAD_BYTES = 64 << 10
DEFAULT_GPU_FRACTION = 0.8
COMPUTE_TRACK = "lms compute"


def _check_args(model, limit_bytes, prefetch, offload):
    if not isinstance(model, torch.nn.Module):
        raise errors.invalid_argument(
            "kolo.torch.lms.enable: model must be a torch.nn.Module, got %s"
            % type(model).__name__)
    if limit_bytes is not None:
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, numbers.Real) \
                or math.isnan(limit_bytes):
            raise errors.invalid_argument(
                "kolo.torch.lms.enable: limit_bytes must be a number of bytes or "
                "None, got %r" % (limit_bytes,))
        if limit_bytes <= 0:
            raise errors.invalid_argument(
                "kolo.torch.lms.enable: limit_bytes must be > 0, got %r" % (limit_bytes,))
    if isinstance(prefetch, bool) or not isinstance(prefetch, numbers.Integral):
        raise errors.invalid_argument(
            "kolo.torch.lms.enable: prefetch must be an int >= 0, got %r" % (prefetch,))
    if prefetch < 0:
        raise errors.invalid_argument(
            "kolo.torch.lms.enable: prefetch must be >= 0, got %d" % prefetch)
    if isinstance(offload, str):
        offload = (offload,)
    try:
        kinds = tuple(offload)
    except TypeError:
        raise errors.invalid_argument(
            "kolo.torch.lms.enable: offload must be a sequence of %s, got %r"
            % (", ".join(repr(k) for k in KINDS), offload)) from None
    for k in kinds:
        if k not in KINDS:
            raise errors.invalid_argument(
                "kolo.torch.lms.enable: unknown offload kind %r in offload=%r "
                "(known: %s)" % (k, offload, ", ".join(repr(k) for k in KINDS)))
    return frozenset(kinds)


def _device_of(model):
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return torch.device("cpu")


class Lms:
    """The handle ``enable`` returns (module docstring)."""

    def __init__(self, model, limit_bytes, prefetch, kinds):
        self.model = model
        self.prefetch = prefetch
        self.kinds = kinds
        self.device = _device_of(model)
        cuda = self.device.type == "cuda"
        if limit_bytes is None and cuda:
            total = torch.cuda.get_device_properties(self.device).total_memory
            limit_bytes = int(total * DEFAULT_GPU_FRACTION)
        self.limit_bytes = limit_bytes
        self._activations = None
        self._forward = None
        if "activations" in kinds:
            if cuda:
                mover = CudaMover(self.device)
                dev = self.device

                def meter(nbytes, new):
                    return torch.cuda.memory_allocated(dev) + (nbytes if new else 0)
            else:
                mover, meter = CpuMover(), None
            self._activations = ActivationOffload(
                limit_bytes, prefetch, mover, meter, MIN_OFFLOAD_BYTES, self.device)
            self._install()

    # --- activations ----------------------------------------------------------

    def _install(self):
        model, acts = self.model, self._activations
        had = "forward" in model.__dict__
        original = model.forward

        device = self.device

        def forward(*args, **kwargs):
            first = next(model.parameters(), None)
            if first is not None and first.device != device:
                raise errors.invalid_argument(
                    "kolo.torch.lms: enable() saw the model on %s, its parameters are "
                    "now on %s; call enable() after model.to(device)"
                    % (device, first.device))
            with spans.span(COMPUTE_TRACK, "FORWARD"), acts.hooks():
                return original(*args, **kwargs)

        self._forward = (had, original)
        model.forward = forward

    @property
    def min_offload_bytes(self):
        """Saved storages smaller than this stay on the device."""
        return self._activations.min_bytes if self._activations else MIN_OFFLOAD_BYTES

    @min_offload_bytes.setter
    def min_offload_bytes(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise errors.invalid_argument(
                "kolo.torch.lms: min_offload_bytes must be an int >= 0, got %r" % (value,))
        if self._activations is not None:
            self._activations.min_bytes = int(value)

    @property
    def planner(self):
        """The activations' planner (None without "activations")."""
        return self._activations.planner if self._activations else None

    @property
    def mover(self):
        return self._activations.mover if self._activations else None

    def hooks(self):
        """The saved-tensor hooks as a context manager, for autograd work
        outside the model's forward (e.g. a loss over large activations)."""
        if self._activations is None:
            raise errors.invalid_argument(
                "kolo.torch.lms: activations are not offloaded (offload=%r)"
                % (tuple(sorted(self.kinds)),))
        return self._activations.hooks()

    def resident_bytes(self):
        """Bytes of saved storages on the device, by the planner's count."""
        if self._activations is None:
            return 0
        self._activations.drain()
        return self._activations.planner.resident

    def held_storages(self):
        """{data_ptr: nbytes} of the device storages the hooks hold."""
        return self._activations.held_storages() if self._activations else {}

    def stats(self):
        if self._activations is None:
            return {}
        self._activations.drain()
        out = dict(self._activations.planner.stats)
        out["resident_bytes"] = self._activations.planner.resident
        out["host_bytes"] = self._activations.mover.pool_bytes
        out["peak_host_bytes"] = self._activations.mover.peak_pool_bytes
        return out

    def disable(self):
        """Restores the model's own forward (saved tensors already packed
        keep working)."""
        if self._forward is not None:
            had, original = self._forward
            if had:
                self.model.forward = original
            else:
                del self.model.forward
            self._forward = None

    # --- optimizer ------------------------------------------------------------

    def offload_optimizer(self, optimizer):
        """The optimizer's state and master parameters on the host, its step
        on the CPU (optimizer.py). Returns the same object."""
        if "optimizer" not in self.kinds:
            raise errors.invalid_argument(
                "kolo.torch.lms: offload_optimizer needs \"optimizer\" in "
                "enable(offload=...), got offload=%r" % (tuple(sorted(self.kinds)),))
        return offload_optimizer(optimizer)


def enable(model, limit_bytes=None, prefetch=2, offload=("activations", "optimizer")):
    """Large model support for ``model`` (module docstring). Returns Lms."""
    kinds = _check_args(model, limit_bytes, prefetch, offload)
    return Lms(model, limit_bytes, int(prefetch), kinds)


__all__ = ["enable", "Lms", "offload_optimizer", "placement", "KINDS",
           "MIN_OFFLOAD_BYTES"]

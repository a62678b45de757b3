"""SyncBatchNorm: batch normalisation with statistics over every rank's batch.

Training forward, on each rank with local input x of shape [N, C, *]:
  one allreduce (Sum) of [sum_c x, sum_c x^2, count] in float64 gives the
  union batch's mean and biased variance per channel; y = (x - mean) *
  invstd * weight + bias; running statistics are updated with the unbiased
  variance, as torch.nn.BatchNorm does.
Backward, for the union loss (the sum of the ranks' losses), one allreduce
  (Sum) of [sum_c dy, sum_c dy * (x - mean)] gives, with M the union count,
    dx = weight * invstd * (dy - sum_dy / M - (x - mean) * invstd^2 *
         sum_dy_xmu / M).
  The weight and bias gradients are the local sums (sum dy * xhat, sum dy):
  DistributedOptimizer's allreduce then combines them like any other
  gradient.
Evaluation mode, and a process set of one rank, use plain batch norm.
On CUDA inputs every tensor stays on the input's device (the statistics
are allreduced as CUDA tensors, kolo.torch.device).

Names: each module gets ``sync_batch_norm.<k>`` from a counter of modules
created, so ranks must build their models in the same order (as they do).
"""

import itertools

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from kolo.torch import collectives as C
from kolo.torch.process_sets import global_process_set

_module_counter = itertools.count()


def _reduce_dims(x):
    return [0] + list(range(2, x.dim()))


def _channel_view(t, x):
    return t.reshape([1, -1] + [1] * (x.dim() - 2))


class _SyncBatchNormFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum,
                name, process_set):
        x = x.contiguous()
        dims = _reduce_dims(x)
        channels = x.shape[1]
        xd = x.double()
        count = x.numel() // channels if channels else 0
        stats = torch.cat([xd.sum(dims), (xd * xd).sum(dims),
                           torch.tensor([float(count)], dtype=torch.float64,
                                        device=x.device)])
        stats = C.synchronize(C.allreduce_async_(
            stats, name=name + ".forward", op=C.Sum, process_set=process_set))
        total = stats[-1].item()
        if total <= 1:
            raise ValueError(
                "SyncBatchNorm: expected more than 1 value per channel over all "
                "ranks when training, got %d" % total)
        mean = stats[:channels] / total
        var = (stats[channels:2 * channels] / total - mean * mean).clamp_(min=0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(
                    mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_(
                    (var * total / (total - 1)).to(running_var.dtype),
                    alpha=momentum)
        mean_x = mean.to(x.dtype)
        invstd_x = invstd.to(x.dtype)
        xhat = (x - _channel_view(mean_x, x)) * _channel_view(invstd_x, x)
        y = xhat
        if weight is not None:
            y = y * _channel_view(weight, x)
        if bias is not None:
            y = y + _channel_view(bias, x)
        ctx.save_for_backward(x, weight, mean_x, invstd_x)
        ctx.total = total
        ctx.name = name
        ctx.process_set = process_set
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd = ctx.saved_tensors
        dy = dy.contiguous()
        dims = _reduce_dims(x)
        channels = x.shape[1]
        xmu = x - _channel_view(mean, x)
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        grad_weight = (sum_dy_xmu * invstd) if weight is not None else None
        grad_bias = sum_dy.clone() if ctx.has_bias else None
        grad_x = None
        if ctx.needs_input_grad[0]:
            both = torch.cat([sum_dy, sum_dy_xmu]).double()
            both = C.synchronize(C.allreduce_async_(
                both, name=ctx.name + ".backward", op=C.Sum,
                process_set=ctx.process_set))
            mean_dy = (both[:channels] / ctx.total).to(x.dtype)
            mean_dy_xmu = (both[channels:] / ctx.total).to(x.dtype)
            scale = invstd if weight is None else invstd * weight
            grad_x = (dy - _channel_view(mean_dy, x)
                      - xmu * _channel_view(invstd * invstd * mean_dy_xmu, x)) \
                * _channel_view(scale, x)
        return (grad_x, grad_weight, grad_bias, None, None, None, None, None,
                None)


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation over the union of the ranks' batches (inputs of
    shape [N, C, *]); a drop-in for torch.nn.BatchNorm1d/2d/3d."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set,
                 device=None, dtype=None):
        kwargs = {}
        if device is not None:
            kwargs["device"] = device
        if dtype is not None:
            kwargs["dtype"] = dtype
        super().__init__(num_features, eps, momentum, affine,
                         track_running_stats, **kwargs)
        self.process_set = process_set
        self._kolo_name = "sync_batch_norm.%d" % next(_module_counter)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" %
                             input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or self.process_set.size() == 1:
            return super().forward(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        running_mean, running_var = None, None
        if self.track_running_stats and self.running_mean is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked)
            running_mean, running_var = self.running_mean, self.running_var
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, running_mean, running_var, self.eps,
            momentum, self._kolo_name, self.process_set)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set):
        """Returns ``module`` with every BatchNorm*d replaced by SyncBatchNorm
        (parameters and running statistics carried over)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            out = cls(module.num_features, module.eps, module.momentum,
                      module.affine, module.track_running_stats, process_set)
            with torch.no_grad():
                if module.affine:
                    out.weight.copy_(module.weight)
                    out.bias.copy_(module.bias)
                if module.track_running_stats:
                    out.running_mean.copy_(module.running_mean)
                    out.running_var.copy_(module.running_var)
                    out.num_batches_tracked.copy_(module.num_batches_tracked)
            out.train(module.training)
        for child_name, child in module.named_children():
            out.add_module(child_name, cls.convert_sync_batchnorm(child, process_set))
        return out


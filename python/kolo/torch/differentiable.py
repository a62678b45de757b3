"""Horovod's blocking collectives, differentiable as Horovod's are.

Each function submits through kolo.torch.collectives and waits. When grad
mode is on and an input requires a gradient, it runs as an autograd
Function whose backward is the collective Horovod defines:

- allreduce (Sum, Average): the allreduce of the output's gradient with the
  same op and scaling (Min, Max and Product have no gradient here: an error);
- allgather: this rank's rows of the average over ranks of the gradient;
- broadcast: on the root, the average over ranks of the gradient; zeros on
  the other ranks;
- alltoall: the reverse alltoall of the gradient (received splits become the
  splits);
- reducescatter: the allgather of the gradient, times the set's size for Sum
  and times the scaling factors;
- grouped forms: the same, per tensor, as one grouped operation.

Without grad the functions are plain submit-and-wait (no autograd node).
"""

import torch

from kolo import _native
from kolo.torch import collectives as C
from kolo.torch import errors
from kolo.torch.compression import Compression
from kolo.torch.process_sets import global_process_set

synchronize = C.synchronize


def _needs_grad(tensors):
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _set_rank(process_set):
    return _native.rank() if process_set is global_process_set else process_set.rank()


def _set_size(process_set):
    return _native.size() if process_set is global_process_set else process_set.size()


# --- allreduce -----------------------------------------------------------------

def _check_differentiable_op(op):
    if op not in (C.Sum, C.Average):
        raise errors.invalid_argument(
            "allreduce: the gradient of %s is not defined" % C._REDUCE_OPS[op])


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(C.allreduce_async(tensor, name=name, op=op,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale,
                                             process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, prescale, postscale, process_set = ctx.args
        _check_differentiable_op(op)
        grad = synchronize(C.allreduce_async(grad_output, op=op,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale,
                                             process_set=process_set))
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Reduces ``tensor`` over the ranks of ``process_set`` (Average by
    default) and returns the result as a new tensor. Differentiable for Sum
    and Average."""
    op = C._resolve_op(average, op, "allreduce")
    compressed, ctx = compression.compress(tensor)
    if _needs_grad((compressed,)):
        out = _Allreduce.apply(compressed, name, op, prescale_factor,
                               postscale_factor, process_set)
    else:
        out = synchronize(C.allreduce_async(
            compressed, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns ``tensor``."""
    return synchronize(C.allreduce_async_(
        tensor, average=average, name=name, op=op,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        process_set=process_set))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(synchronize(C.grouped_allreduce_async(
            list(tensors), name=name, op=op, prescale_factor=prescale,
            postscale_factor=postscale, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, prescale, postscale, process_set = ctx.args
        _check_differentiable_op(op)
        grads = synchronize(C.grouped_allreduce_async(
            [g.contiguous() for g in grad_outputs], op=op, prescale_factor=prescale,
            postscale_factor=postscale, process_set=process_set))
        return (None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None,
                      compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Allreduce of a list of tensors in one group; returns new tensors.
    Differentiable for Sum and Average."""
    op = C._resolve_op(average, op, "grouped_allreduce")
    pairs = [compression.compress(t) for t in tensors]
    compressed = [p[0] for p in pairs]
    if _needs_grad(compressed):
        outs = list(_GroupedAllreduce.apply(name, op, prescale_factor,
                                            postscale_factor, process_set,
                                            *compressed))
    else:
        outs = synchronize(C.grouped_allreduce_async(
            compressed, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the tensors."""
    return synchronize(C.grouped_allreduce_async_(
        tensors, average=average, name=name, op=op,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        process_set=process_set))


# --- allgather -----------------------------------------------------------------

def _my_rows(grads, rows, process_set):
    """Each gradient's block of this rank's rows: ``rows[i]`` is this rank's
    first dimension of tensor i; the others' come from an allgather."""
    counts = synchronize(C.grouped_allgather_async(
        [torch.tensor([r], dtype=torch.int64) for r in rows],
        process_set=process_set))
    me = _set_rank(process_set)
    return [g.narrow(0, int(c[:me].sum()), r) for g, c, r in zip(grads, counts, rows)]


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.process_set = process_set
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.scalar = tensor.dim() == 0
        return synchronize(C.allgather_async(tensor, name=name,
                                             process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        averaged = synchronize(C.allreduce_async(grad_output.contiguous(),
                                                 op=C.Average, process_set=ps))
        grad = _my_rows([averaged], [ctx.rows], ps)[0]
        return (grad.reshape(()) if ctx.scalar else grad), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of every rank's ``tensor`` along dimension 0.
    Differentiable."""
    if _needs_grad((tensor,)):
        return _Allgather.apply(tensor, name, process_set)
    return synchronize(C.allgather_async(tensor, name=name, process_set=process_set))


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.process_set = process_set
        ctx.rows = [t.shape[0] if t.dim() else 1 for t in tensors]
        return tuple(synchronize(C.grouped_allgather_async(
            list(tensors), name=name, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        ps = ctx.process_set
        averaged = synchronize(C.grouped_allreduce_async(
            [g.contiguous() for g in grad_outputs], op=C.Average, process_set=ps))
        return (None, None, *_my_rows(averaged, ctx.rows, ps))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of each tensor of a list; returns the list. Differentiable."""
    tensors = list(tensors)
    if _needs_grad(tensors):
        return list(_GroupedAllgather.apply(name, process_set, *tensors))
    return synchronize(C.grouped_allgather_async(tensors, name=name,
                                                 process_set=process_set))


# --- broadcast -----------------------------------------------------------------

class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(C.broadcast_async(tensor, root_rank, name=name,
                                             process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(C.allreduce_async(grad_output.contiguous(), op=C.Average,
                                             process_set=ctx.process_set))
        if _native.rank() != ctx.root_rank:
            grad.zero_()
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """``root_rank``'s tensor (a global rank) on every rank of the set, as a
    new tensor. Differentiable."""
    if _needs_grad((tensor,)):
        return _Broadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(C.broadcast_async(tensor, root_rank, name=name,
                                         process_set=process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast; returns ``tensor``."""
    return synchronize(C.broadcast_async_(tensor, root_rank, name=name,
                                          process_set=process_set))


# --- alltoall ------------------------------------------------------------------

class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(C.alltoall_async(tensor, splits=splits, name=name,
                                                        process_set=process_set))
        ctx.process_set = process_set
        ctx.received = received
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = synchronize(C.alltoall_async(grad_output.contiguous(),
                                               splits=ctx.received,
                                               process_set=ctx.process_set))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters rows of ``tensor`` to the ranks and gathers theirs: returns
    the received tensor, and with ``splits`` given, (tensor, received_splits).
    Differentiable."""
    if _needs_grad((tensor,)):
        return _Alltoall.apply(tensor, splits, name, process_set)
    output, received = synchronize(C.alltoall_async(tensor, splits=splits, name=name,
                                                    process_set=process_set))
    return output if splits is None else (output, received)


# --- reducescatter -------------------------------------------------------------

def _reducescatter_grad(grad, op, prescale, postscale, process_set):
    if op == C.Sum:
        grad = grad * _set_size(process_set)
    if prescale != 1.0:
        grad = grad * prescale
    if postscale != 1.0:
        grad = grad * postscale
    return grad.contiguous()


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(C.reducescatter_async(
            tensor, name=name, op=op, process_set=process_set,
            prescale_factor=prescale, postscale_factor=postscale))

    @staticmethod
    def backward(ctx, grad_output):
        op, prescale, postscale, process_set = ctx.args
        _check_differentiable_op(op)
        grad = _reducescatter_grad(grad_output, op, prescale, postscale, process_set)
        return (synchronize(C.allgather_async(grad, process_set=process_set)),
                None, None, None, None, None)


def reducescatter(tensor, name=None, compression=Compression.none, op=C.Average,
                  process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reducescatter of ``tensor``; returns this rank's reduced block.
    Differentiable for Sum and Average."""
    compressed, ctx = compression.compress(tensor)
    if _needs_grad((compressed,)):
        out = _Reducescatter.apply(compressed, name, op, process_set,
                                   prescale_factor, postscale_factor)
    else:
        out = synchronize(C.reducescatter_async(
            compressed, name=name, op=op, process_set=process_set,
            prescale_factor=prescale_factor, postscale_factor=postscale_factor))
    return compression.decompress(out, ctx)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(synchronize(C.grouped_reducescatter_async(
            list(tensors), name=name, op=op, process_set=process_set,
            prescale_factor=prescale, postscale_factor=postscale)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, prescale, postscale, process_set = ctx.args
        _check_differentiable_op(op)
        grads = [_reducescatter_grad(g, op, prescale, postscale, process_set)
                 for g in grad_outputs]
        return (None, None, None, None, None,
                *synchronize(C.grouped_allgather_async(grads, process_set=process_set)))


def grouped_reducescatter(tensors, name=None, compression=Compression.none,
                          op=C.Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter of each tensor of a list; returns this rank's blocks.
    Differentiable for Sum and Average."""
    pairs = [compression.compress(t) for t in tensors]
    compressed = [p[0] for p in pairs]
    if _needs_grad(compressed):
        outs = list(_GroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                postscale_factor, *compressed))
    else:
        outs = synchronize(C.grouped_reducescatter_async(
            compressed, name=name, op=op, process_set=process_set,
            prescale_factor=prescale_factor, postscale_factor=postscale_factor))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]

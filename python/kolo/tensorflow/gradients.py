"""The gradient allreduce shared by DistributedGradientTape,
DistributedOptimizer and kolo.keras: ``_make_allreduce_grads_fn`` (Horovod's
name and arguments) returns ``allreduce_grads(grads, vars=None,
use_generic_names=False)``, which reduces a list of gradients (None stays
None) over a process set.

Eagerly, that function is a tf.function: the allreduces of one call are
submitted together, so kolo's runtime negotiates them at once and fuses them
into few transfers (eager ops would run one at a time). It is built once per
configuration (util._cache) and traced once per gradient structure.

Grouping (``groups``): None, one allreduce per gradient (the runtime still
fuses what is ready together); an int n, the gradients split in n
contiguous groups of near-equal length, each one grouped_allreduce (fused as
a unit); a list of lists of variables, one group per list, the other
gradients one group each. ``gradient_predivide_factor`` f splits Average
into a 1/f scale before the sum and f/size after it.
"""

import tensorflow as tf

from kolo.tensorflow import errors
from kolo.tensorflow.collectives import (_elastic, allreduce, grouped_allreduce,
                                         set_size)
from kolo.tensorflow.mpi_ops import Average, global_process_set
from kolo.tensorflow.util import (_cache, _executing_eagerly, _make_subgraph, ref_of,
                                  refs_to_vars, vars_to_refs)


def split_list(items, n):
    """``items`` in ``n`` contiguous parts whose lengths differ by at most
    one (the first parts the longer), as Horovod's split_list."""
    d, r = divmod(len(items), n)
    parts, start = [], 0
    for i in range(n):
        end = start + d + (1 if i < r else 0)
        parts.append(items[start:end])
        start = end
    return [p for p in parts if p]


def check_groups(groups, num_groups, what):
    """Horovod's ``num_groups`` (deprecated) folded into ``groups``, checked."""
    if num_groups:
        if groups is None:
            groups = num_groups
    if groups is not None:
        if isinstance(groups, list):
            if not all(isinstance(g, (list, tuple)) for g in groups):
                raise errors.invalid_argument(
                    "%s: groups must be an int or a list of lists of "
                    "tf.Variable, got %r" % (what, groups))
        elif not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
            raise errors.invalid_argument(
                "%s: groups must be a positive int or a list of lists of "
                "tf.Variable, got %r" % (what, groups))
    return groups


def check_predivide(gradient_predivide_factor, op, what):
    if gradient_predivide_factor != 1.0 and op != Average:
        raise errors.invalid_argument(
            "%s: gradient_predivide_factor=%r needs op=Average, got op=%r"
            % (what, gradient_predivide_factor, op))


def reduces_here(process_set):
    """Whether this rank takes part in reductions over ``process_set`` (a
    rank outside it, or a set of one rank outside an elastic job, keeps its
    gradients as they are)."""
    if not process_set.included():
        return False
    return process_set.size() > 1 or _elastic()


def _groups_of(grads, variables, groups):
    """[(indices, gradients)] per group; None gradients are left out."""
    present = [(i, g) for i, g in enumerate(grads) if g is not None]
    if isinstance(groups, int):
        return [tuple(zip(*part)) for part in split_list(present, groups)]
    if variables is None:
        raise errors.invalid_argument(
            "allreduce_grads: groups given as variables need the variables "
            "of the gradients (vars=...)")
    by_ref = {ref_of(variables[i]): (i, g) for i, g in present}
    out = []
    for group in groups:
        members = [by_ref.pop(ref_of(v)) for v in group if ref_of(v) in by_ref]
        if members:
            out.append(tuple(zip(*members)))
    # What no group named: each alone, in the order of the gradients.
    for i, g in sorted(by_ref.values(), key=lambda ig: ig[0]):
        out.append(((i,), (g,)))
    return out


@_cache
def _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                    sparse_as_dense, op, gradient_predivide_factor,
                                    groups, process_set):
    groups = refs_to_vars(groups) if isinstance(groups, tuple) else groups
    if op == Average:
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale = postscale = 1.0
    common = dict(device_dense=device_dense, device_sparse=device_sparse,
                  compression=compression, op=op, prescale_factor=prescale,
                  postscale_factor=postscale, process_set=process_set)

    def reduce_parts(parts, grouped, use_generic_names):
        """``parts``: lists of gradients; each one grouped_allreduce when
        ``grouped``, else each gradient its own allreduce."""
        with tf.name_scope(name + "_Allreduce"):
            if not grouped:
                return [[allreduce(g, name="grad_%d" % k if use_generic_names else None,
                                   ignore_name_scope=use_generic_names, **common)
                         for g in part] for k, part in enumerate(parts)]
            return [grouped_allreduce(
                part, name="grad_group_%d" % k if use_generic_names else None,
                ignore_name_scope=use_generic_names, **common)
                for k, part in enumerate(parts)]

    # Eagerly, one tf.function per configuration; the variables stay out of
    # its arguments (only gradients go in), so a new model of the same
    # shapes reuses the trace.
    reduce_fn = _make_subgraph(reduce_parts) if _executing_eagerly() else reduce_parts

    def allreduce_grads(grads, vars=None, use_generic_names=False):  # noqa: A002
        grads = list(grads)
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        if not reduces_here(process_set):
            return grads
        if groups is None:
            indices = [(i,) for i, g in enumerate(grads) if g is not None]
        else:
            indices = [ix for ix, _ in _groups_of(grads, vars, groups)]
        if not indices:
            return grads
        reduced = reduce_fn([[grads[i] for i in ix] for ix in indices],
                            groups is not None, use_generic_names)
        out = list(grads)
        for ix, part in zip(indices, reduced):
            for i, r in zip(ix, part):
                out[i] = r
        return out

    return allreduce_grads


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                             sparse_as_dense, op, gradient_predivide_factor, groups,
                             process_set=global_process_set):
    """The gradient reduction function for one configuration (module doc)."""
    groups = vars_to_refs(groups) if isinstance(groups, list) else groups
    return _make_cached_allreduce_grads_fn(name, device_dense, device_sparse,
                                           compression, sparse_as_dense, op,
                                           gradient_predivide_factor, groups,
                                           process_set)


def scale_local_grads(grads, local_mask, process_set):
    """Divides the gradients flagged in ``local_mask`` by the set's size
    (Horovod's scale_local_gradients: a local variable's gradient is then on
    the scale of the averaged ones)."""
    out = []
    for g, local in zip(grads, local_mask):
        if local and g is not None:
            if isinstance(g, tf.IndexedSlices):
                n = set_size(process_set, g.values.dtype)
                g = tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
            else:
                g = g / set_size(process_set, g.dtype)
        out.append(g)
    return out


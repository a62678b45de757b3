"""The sharded optimizer's state, per piece and gathered.

A piece's state entry is *elementwise* when it is a tensor of the piece's
own shape (momentum, Adam's moments): on a whole parameter it would have the
parameter's shape. Anything else (Adam's 0-d ``step``, Python numbers) is a
*scalar*, the same for every piece of a parameter.
"""

import torch

from kolo.torch.functions import allgather_object
from kolo.torch.zero import comm


def split_entry(t, entry):
    """(elementwise {key: tensor}, scalars {key: value}) of one piece."""
    elementwise, scalars = {}, {}
    for key, value in entry.items():
        if isinstance(value, torch.Tensor) and value.dim() == 1 and value.shape == t.shape:
            elementwise[key] = value
        else:
            scalars[key] = value
    return elementwise, scalars


def gather_state(opt):
    """{name: {key: full tensor or scalar}} on every rank. Collective."""
    from kolo.torch.zero.optimizer import full_shape
    mine_keys, mine_scalars = {}, {}
    for b, pc, t in opt._pieces:
        elementwise, scalars = split_entry(t, opt.state.get(t, {}))
        mine_keys.setdefault(b.index, set()).update(
            (k, str(v.dtype)) for k, v in elementwise.items())
        name = opt._names[pc.param]
        mine_scalars.setdefault(name, {}).update(
            {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in scalars.items()})
    everyone = allgather_object((mine_keys, mine_scalars), name="zero.state.keys",
                                process_set=opt.process_set)
    keys, out = {}, {}
    for ks, scalars in everyone:
        for i, s in ks.items():
            keys.setdefault(i, set()).update(s)
        for name, entry in scalars.items():
            for k, v in entry.items():
                out.setdefault(name, {}).setdefault(k, v)
    for b in opt._buckets:
        for key, dtype_name in sorted(keys.get(b.index, ())):
            dtype = getattr(torch, dtype_name.replace("torch.", ""))
            shard = torch.zeros(b.shard, dtype=dtype)
            for bb, pc, t in opt._pieces_of[b.index]:
                value = opt.state.get(t, {}).get(key)
                if value is not None:
                    at = pc.bucket_begin - b.begin
                    shard[at:at + pc.numel].copy_(value)
            flat = comm.start_allgather(shard, "zero%d.state.%d.%s" % (opt._id, b.index, key),
                                        opt.process_set).wait()
            for p, off, n in zip(b.params, b.offsets, b.numels):
                if p in opt._names:
                    out.setdefault(opt._names[p], {})[key] = \
                        flat[off:off + n].view(full_shape(p)).clone()
    return out
